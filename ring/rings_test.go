package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// longEnv turns on the long stress mode (≥10^8 items; run without -race by
// `make test-long`).
const longEnv = "HCOMM_LONG"

func longMode() bool { return os.Getenv(longEnv) == "1" }

// stressItemsEnv sets how many items each stress test moves (the arm64 VM
// guest asks for 10^7: both vCPUs under MTTCG, no -race).
const stressItemsEnv = "HCOMM_STRESS_ITEMS"

// stressItems is how many items each stress test moves in total.
func stressItems(t testing.TB) int {
	if n, err := strconv.Atoi(os.Getenv(stressItemsEnv)); err == nil && n > 0 {
		return n
	}
	switch {
	case longMode() && raceEnabled:
		t.Logf("%s=1 under -race: keeping the -race size", longEnv)
		return 1_000_000
	case longMode():
		return 100_000_000
	case raceEnabled:
		return 1_000_000
	default:
		return 2_000_000
	}
}

func TestGeometry(t *testing.T) {
	aligned := make([]byte, 4096+4)
	tests := []struct {
		name      string
		mem       []byte
		size      int
		phaseOff  int
		wantRings bool // NewSPSC/NewMPSC accept
		wantCQ    bool // NewCompletionRing/Writer accept
	}{
		{"hdma 16B x 256", aligned[:4096], 16, 10, true, true},
		{"64B descriptors", aligned[:4096], 64, 0, true, true},
		{"one entry", aligned[:16], 16, 10, true, true},
		{"zero entry size", aligned[:4096], 0, 0, false, false},
		{"negative entry size", aligned[:4096], -16, 0, false, false},
		{"empty memory", aligned[:0], 16, 10, false, false},
		{"not a multiple", aligned[:4095], 16, 10, false, false},
		{"not a power of two", aligned[:48], 16, 10, false, false},
		{"odd entry size", aligned[:8], 2, 0, true, false},
		{"odd phase offset", aligned[:4096], 16, 9, true, false},
		{"phase beyond entry", aligned[:4096], 16, 15, true, false},
		{"phase at end", aligned[:4096], 16, 14, true, true},
		{"negative phase", aligned[:4096], 16, -2, true, false},
		{"misaligned memory", aligned[2 : 2+4096], 16, 10, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what string, err error, want bool) {
				t.Helper()
				if want && err != nil {
					t.Errorf("%s: unexpected error %v", what, err)
				}
				if !want && !errors.Is(err, ErrGeometry) {
					t.Errorf("%s: got %v, want ErrGeometry", what, err)
				}
			}
			_, err := NewSPSC(tc.mem, tc.size)
			check("NewSPSC", err, tc.wantRings)
			_, err = NewMPSC(tc.mem, tc.size)
			check("NewMPSC", err, tc.wantRings)
			_, err = NewCompletionRing(tc.mem, tc.size, tc.phaseOff)
			check("NewCompletionRing", err, tc.wantCQ)
			_, err = NewCompletionWriter(tc.mem, tc.size, tc.phaseOff)
			check("NewCompletionWriter", err, tc.wantCQ)
		})
	}
}

// producerRing is what SPSC and MPSC have in common, for shared tests.
type producerRing interface {
	Cap() int
	Len() int
	Reserve(k int) (Batch, error)
	Commit(b Batch) error
	Push(entry []byte) error
	Peek(max int) Batch
	Release(n int) error
	Pop(dst []byte) error
}

func newRings(t testing.TB, entries, size int) map[string]producerRing {
	t.Helper()
	s, err := NewSPSC(make([]byte, entries*size), size)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMPSC(make([]byte, entries*size), size)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]producerRing{"SPSC": s, "MPSC": m}
}

func TestFullEmptyAndWrap(t *testing.T) {
	for name, r := range newRings(t, 8, 16) {
		t.Run(name, func(t *testing.T) {
			buf := make([]byte, 16)
			if err := r.Pop(buf); !errors.Is(err, ErrEmpty) {
				t.Fatalf("Pop on empty ring: %v, want ErrEmpty", err)
			}
			if b := r.Peek(4); b.Len() != 0 {
				t.Fatalf("Peek on empty ring: %d entries", b.Len())
			}
			for _, k := range []int{0, -1, 9} {
				if _, err := r.Reserve(k); !errors.Is(err, ErrBatchSize) {
					t.Errorf("Reserve(%d): %v, want ErrBatchSize", k, err)
				}
			}
			var next, want uint64
			for round := 0; round < 50; round++ { // 50 rounds of ≤8 entries: wraps many times
				k := 1 + round%8
				b, err := r.Reserve(k)
				if err != nil {
					t.Fatalf("round %d: Reserve(%d): %v", round, k, err)
				}
				for i := 0; i < k; i++ {
					binary.LittleEndian.PutUint64(b.Entry(i), next)
					next++
				}
				if b.Entry(k) != nil || b.Entry(-1) != nil {
					t.Fatal("Entry out of range returned memory")
				}
				if free := r.Cap() - r.Len(); free < 8 {
					if _, err := r.Reserve(free + 1); !errors.Is(err, ErrFull) {
						t.Errorf("Reserve(%d) with %d free: %v, want ErrFull", free+1, free, err)
					}
				}
				if err := r.Commit(b); err != nil {
					t.Fatalf("Commit: %v", err)
				}
				if err := r.Commit(b); !errors.Is(err, ErrCommit) {
					t.Fatalf("second Commit of the same batch: %v, want ErrCommit", err)
				}
				got := r.Peek(8)
				if err := r.Release(got.Len() + 1); !errors.Is(err, ErrRelease) {
					t.Fatalf("Release beyond Peek: %v, want ErrRelease", err)
				}
				for i := 0; i < got.Len(); i++ {
					if v := binary.LittleEndian.Uint64(got.Entry(i)); v != want {
						t.Fatalf("round %d: entry %d = %d, want %d", round, i, v, want)
					}
					want++
				}
				if err := r.Release(got.Len()); err != nil {
					t.Fatal(err)
				}
			}
			// Fill completely, then Push must report full.
			for i := 0; i < r.Cap(); i++ {
				if err := r.Push(buf); err != nil {
					t.Fatalf("Push %d: %v", i, err)
				}
			}
			if err := r.Push(buf); !errors.Is(err, ErrFull) {
				t.Fatalf("Push into full ring: %v, want ErrFull", err)
			}
			if err := r.Push(buf[:3]); !errors.Is(err, ErrEntrySize) {
				t.Fatalf("Push of 3 bytes: %v, want ErrEntrySize", err)
			}
			if err := r.Commit(Batch{}); !errors.Is(err, ErrCommit) {
				t.Fatalf("Commit of a zero Batch: %v, want ErrCommit", err)
			}
			for i := 0; i < r.Cap(); i++ {
				if err := r.Pop(buf); err != nil {
					t.Fatalf("Pop %d: %v", i, err)
				}
			}
		})
	}
}

func TestHeadTail(t *testing.T) {
	s, _ := NewSPSC(make([]byte, 8*8), 8)
	m, _ := NewMPSC(make([]byte, 8*8), 8)
	for i := 0; i < 11; i++ { // wraps once
		if err := s.Push(make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		if err := m.Push(make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		if s.Tail() != uint64(i+1) {
			t.Fatalf("SPSC Tail %d after %d pushes", s.Tail(), i+1)
		}
		if i%2 == 1 {
			for _, r := range []producerRing{s, m} {
				if err := r.Pop(make([]byte, 8)); err != nil {
					t.Fatal(err)
				}
				if err := r.Pop(make([]byte, 8)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if s.Head() != 10 || m.Head() != 10 {
		t.Fatalf("heads %d and %d after 10 pops, want 10", s.Head(), m.Head())
	}
}

func TestSPSCCommitOrder(t *testing.T) {
	r, _ := NewSPSC(make([]byte, 8*8), 8)
	a, _ := r.Reserve(2)
	b, _ := r.Reserve(2)
	if err := r.Commit(b); !errors.Is(err, ErrCommit) {
		t.Fatalf("out-of-order commit: %v, want ErrCommit", err)
	}
	if err := r.Commit(a); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(b); err != nil {
		t.Fatal(err)
	}
	if n := r.Peek(8).Len(); n != 4 {
		t.Fatalf("Peek after two commits: %d, want 4", n)
	}
}

func TestMPSCOutOfOrderCommit(t *testing.T) {
	r, _ := NewMPSC(make([]byte, 8*8), 8)
	a, _ := r.Reserve(3)
	b, _ := r.Reserve(2)
	if err := r.Commit(b); err != nil {
		t.Fatal(err)
	}
	if n := r.Peek(8).Len(); n != 0 {
		t.Fatalf("Peek with the first batch unpublished: %d entries, want 0", n)
	}
	if err := r.Commit(a); err != nil {
		t.Fatal(err)
	}
	if n := r.Peek(8).Len(); n != 5 {
		t.Fatalf("Peek after both commits: %d, want 5", n)
	}
}

func TestZeroAllocs(t *testing.T) {
	for name, r := range newRings(t, 64, 64) {
		t.Run(name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(1000, func() {
				b, err := r.Reserve(8)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < b.Len(); i++ {
					b.Entry(i)[0] = byte(i)
				}
				if err := r.Commit(b); err != nil {
					t.Fatal(err)
				}
				got := r.Peek(8)
				if err := r.Release(got.Len()); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per reserve/commit/peek/release, want 0", allocs)
			}
		})
	}
	mem := make([]byte, 64*16)
	cr, _ := NewCompletionRing(mem, 16, 10)
	cw, _ := NewCompletionWriter(mem, 16, 10)
	entry := make([]byte, 16)
	allocs := testing.AllocsPerRun(1000, func() {
		if err := cw.Write(entry); err != nil {
			t.Fatal(err)
		}
		b := cr.Peek(8)
		if err := cr.Release(b.Len()); err != nil {
			t.Fatal(err)
		}
		if err := cw.SetHead(cr.Head()); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per completion write/peek/release, want 0", allocs)
	}
}

// item layout in a 16-byte stress entry: producer id (u32) at 0, a check word
// at 4, sequence number (u64) at 8.
func putItem(e []byte, producer uint32, seq uint64) {
	binary.LittleEndian.PutUint32(e[0:], producer)
	binary.LittleEndian.PutUint32(e[4:], producer^uint32(seq)^0x5a5a5a5a)
	binary.LittleEndian.PutUint64(e[8:], seq)
}

func getItem(e []byte) (producer uint32, seq uint64, ok bool) {
	producer = binary.LittleEndian.Uint32(e[0:])
	seq = binary.LittleEndian.Uint64(e[8:])
	return producer, seq, binary.LittleEndian.Uint32(e[4:]) == producer^uint32(seq)^0x5a5a5a5a
}

// stress moves total items from producers goroutines through r and checks
// that the consumer sees, per producer, exactly 0, 1, 2, ... in order: no
// loss, no duplicate, no reordering, no torn entry.
func stress(t testing.TB, r producerRing, producers, total int) {
	t.Helper()
	per := total / producers
	var wg sync.WaitGroup
	var failed atomic.Bool // a producer failed: the others stop waiting for room
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p uint32) {
			defer wg.Done()
			rnd := uint32(p*2654435761 + 1)
			for seq := 0; seq < per; {
				rnd ^= rnd << 13
				rnd ^= rnd >> 17
				rnd ^= rnd << 5
				k := 1 + int(rnd%8)
				if k > per-seq {
					k = per - seq
				}
				b, err := r.Reserve(k)
				if errors.Is(err, ErrFull) {
					if failed.Load() {
						return
					}
					runtime.Gosched()
					continue
				}
				if err != nil {
					failed.Store(true)
					t.Errorf("producer %d: Reserve(%d): %v", p, k, err)
					return
				}
				for i := 0; i < k; i++ {
					putItem(b.Entry(i), p, uint64(seq+i))
				}
				if err := r.Commit(b); err != nil {
					failed.Store(true)
					t.Errorf("producer %d: Commit: %v", p, err)
					return
				}
				seq += k
			}
		}(uint32(p))
	}
	// A producer that fails returns early and the others stop at the next
	// full ring: the consumer then stops once every producer has returned
	// and the ring is drained, instead of waiting for items that never
	// come until the test binary times out.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	next := make([]uint64, producers)
	got := 0
	var wd watchdog
	for got < per*producers {
		b := r.Peek(64)
		if b.Len() == 0 {
			if wd.stalled() {
				failed.Store(true)
				t.Fatalf("no entry published for %v after %d of %d items", stallLimit, got, per*producers)
			}
			select {
			case <-done:
				if r.Peek(64).Len() == 0 {
					t.Fatalf("producers returned after %d of %d items", got, per*producers)
				}
				continue
			default:
			}
			// Yield at once: on a loaded 2-CPU machine spinning only
			// burns the time slice the producers need.
			runtime.Gosched()
			continue
		}
		for i := 0; i < b.Len(); i++ {
			p, seq, ok := getItem(b.Entry(i))
			if !ok || int(p) >= producers {
				t.Fatalf("torn or foreign entry after %d items: producer %d seq %d", got, p, seq)
			}
			if seq != next[p] {
				t.Fatalf("producer %d: got seq %d, want %d (loss, duplicate or reorder) after %d items", p, seq, next[p], got)
			}
			next[p]++
		}
		got += b.Len()
		wd.progress()
		if err := r.Release(b.Len()); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if b := r.Peek(1); b.Len() != 0 {
		t.Fatalf("ring not empty after all items: %d extra", b.Len())
	}
	for p, n := range next {
		if n != uint64(per) {
			t.Fatalf("producer %d: %d items arrived, want %d", p, n, per)
		}
	}
	t.Logf("moved %d items from %d producers through %d slots (%d wraps): no loss, duplicate or reorder",
		got, producers, r.Cap(), got/r.Cap())
}

func TestStressMPSC(t *testing.T) {
	r, err := NewMPSC(make([]byte, 256*16), 16)
	if err != nil {
		t.Fatal(err)
	}
	stress(t, r, 4, stressItems(t))
}

func TestStressSPSC(t *testing.T) {
	r, err := NewSPSC(make([]byte, 256*16), 16)
	if err != nil {
		t.Fatal(err)
	}
	stress(t, r, 1, stressItems(t))
}

// TestStressCompletion runs a CompletionWriter ("device") goroutine against a
// CompletionRing consumer over a small HDMA-layout ring, the head going back
// through SetHead as a doorbell would carry it.
func TestStressCompletion(t *testing.T) {
	const entries = 256
	mem := make([]byte, entries*16)
	cr, err := NewCompletionRing(mem, 16, 10)
	if err != nil {
		t.Fatal(err)
	}
	cw, err := NewCompletionWriter(mem, 16, 10)
	if err != nil {
		t.Fatal(err)
	}
	total := stressItems(t)
	done := make(chan struct{})
	var stop atomic.Bool // the consumer gave up: the writer stops waiting for room
	t.Cleanup(func() { stop.Store(true); <-done })
	go func() {
		defer close(done)
		e := make([]byte, 16)
		for tag := uint64(0); tag < uint64(total) && !stop.Load(); {
			binary.LittleEndian.PutUint64(e[0:], tag)
			binary.LittleEndian.PutUint16(e[8:], uint16(tag)&0x7)     // status
			binary.LittleEndian.PutUint16(e[10:], 0xfffe|uint16(tag)) // phase word noise: writer owns bit 0
			binary.LittleEndian.PutUint32(e[12:], uint32(tag*3))      // len
			if err := cw.Write(e); errors.Is(err, ErrFull) {
				runtime.Gosched()
				continue
			} else if err != nil {
				t.Errorf("Write: %v", err)
				return
			}
			tag++
		}
	}()
	var want uint64
	var wd watchdog
	for want < uint64(total) {
		b := cr.Peek(64)
		if b.Len() == 0 {
			if wd.stalled() {
				t.Fatalf("no completion ready for %v after %d of %d (writer tail %d, consumer head %d phase %d)",
					stallLimit, want, total, cw.Tail(), cr.Head(), cr.Phase())
			}
			runtime.Gosched()
			continue
		}
		wd.progress()
		for i := 0; i < b.Len(); i++ {
			e := b.Entry(i)
			tag := binary.LittleEndian.Uint64(e[0:])
			if tag != want || binary.LittleEndian.Uint16(e[8:]) != uint16(tag)&7 ||
				binary.LittleEndian.Uint16(e[10:])&^1 != 0xfffe|uint16(tag)&^1 ||
				binary.LittleEndian.Uint32(e[12:]) != uint32(tag*3) {
				t.Fatalf("completion %d: got tag %d, entry % x", want, tag, e)
			}
			want++
		}
		if err := cr.Release(b.Len()); err != nil {
			t.Fatal(err)
		}
		if err := cw.SetHead(cr.Head()); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	t.Logf("moved %d completions through %d slots (%d phase flips)", want, entries, want/entries)
}

func TestCompletionPhaseAndFlowControl(t *testing.T) {
	mem := make([]byte, 4*16)
	for i := range mem {
		mem[i] = 0xff // NewCompletionRing must zero it
	}
	cr, _ := NewCompletionRing(mem, 16, 10)
	cw, _ := NewCompletionWriter(mem, 16, 10)
	e := make([]byte, 16)
	if b := cr.Peek(4); b.Len() != 0 {
		t.Fatalf("fresh ring shows %d ready entries", b.Len())
	}
	for i := 0; i < 3; i++ {
		if err := cw.Write(e); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := cw.Write(e); !errors.Is(err, ErrFull) {
		t.Fatalf("4th write into 4 slots: %v, want ErrFull (one slot stays empty)", err)
	}
	if got := mem[10] & 1; got != 1 {
		t.Fatalf("first-pass phase %d, want 1", got)
	}
	b := cr.Peek(8)
	if b.Len() != 3 {
		t.Fatalf("Peek: %d ready, want 3", b.Len())
	}
	if err := cr.Release(3); err != nil {
		t.Fatal(err)
	}
	if cr.Head() != 3 || cr.Phase() != 1 {
		t.Fatalf("head %d phase %d, want 3 and 1", cr.Head(), cr.Phase())
	}
	for _, bad := range []uint32{4, 100} {
		if err := cw.SetHead(bad); !errors.Is(err, errHead) {
			t.Errorf("SetHead(%d): %v, want errHead", bad, err)
		}
	}
	if err := cw.SetHead(3); err != nil {
		t.Fatal(err)
	}
	if err := cw.SetHead(2); !errors.Is(err, errHead) {
		t.Fatalf("SetHead backwards past the tail: %v, want errHead", err)
	}
	// Two more: slot 3 (phase 1), then slot 0 on the second pass (phase 0).
	for i := 0; i < 2; i++ {
		if err := cw.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := mem[10] & 1; got != 0 {
		t.Fatalf("second-pass phase %d, want 0", got)
	}
	if b := cr.Peek(8); b.Len() != 2 {
		t.Fatalf("Peek across the wrap: %d, want 2", b.Len())
	}
	if err := cr.Release(2); err != nil {
		t.Fatal(err)
	}
	if cr.Head() != 1 || cr.Phase() != 0 {
		t.Fatalf("after wrap: head %d phase %d, want 1 and 0", cr.Head(), cr.Phase())
	}
	if err := cr.Release(1); !errors.Is(err, ErrRelease) {
		t.Fatalf("Release without ready entries: %v, want ErrRelease", err)
	}
	if err := cw.Write(e[:8]); !errors.Is(err, ErrEntrySize) {
		t.Fatalf("short entry: %v, want ErrEntrySize", err)
	}
	cr.Reset()
	cw.Reset()
	if cr.Head() != 0 || cr.Phase() != 1 || cw.Tail() != 0 || cw.Phase() != 1 || cr.Peek(4).Len() != 0 {
		t.Fatal("Reset did not return both sides to the initial state")
	}
}

// TestMPSCLateDoubleCommit: a batch committed again after the consumer took
// it leaves a marker of a past lap in its slot. That stale marker must
// neither publish anything nor refuse the commit of the producer that
// reserves the slot a lap later (which would stall the ring for good).
func TestMPSCLateDoubleCommit(t *testing.T) {
	r, _ := NewMPSC(make([]byte, 4*8), 8)
	b, _ := r.Reserve(1)
	if err := r.Commit(b); err != nil {
		t.Fatal(err)
	}
	if err := r.Pop(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	// Too late to be detected (detecting it would cost every Commit a load
	// of the consumer's cache line): accepted or refused, it must be harmless.
	if err := r.Commit(b); err != nil && !errors.Is(err, ErrCommit) {
		t.Fatalf("late double commit: %v", err)
	}
	for i := range 3 {
		if err := r.Push(make([]byte, 8)); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if n := r.Peek(4).Len(); n != 3 {
		t.Fatalf("peek: %d entries, want 3", n)
	}
	if err := r.Release(3); err != nil {
		t.Fatal(err)
	}
	if n := r.Peek(4).Len(); n != 0 {
		t.Fatalf("the stale marker published %d entries", n)
	}
	entry := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := r.Push(entry); err != nil { // position 4: slot 0, lap 1
		t.Fatalf("push into the slot holding a stale marker: %v", err)
	}
	got := make([]byte, 8)
	if err := r.Pop(got); err != nil || !bytes.Equal(got, entry) {
		t.Fatalf("pop after the stale marker: %v %v", got, err)
	}
}

// stallLimit is how long a stress consumer waits without any progress before
// it fails (a broken ring would otherwise hang until the test binary's
// timeout); generous for -race on a loaded 2-CPU machine.
const stallLimit = 30 * time.Second

// watchdog notices a consumer loop that makes no progress for stallLimit.
type watchdog struct {
	last  time.Time
	polls int
}

func (w *watchdog) progress() { w.last, w.polls = time.Time{}, 0 }

// stalled is called on each empty poll; it reads the clock every 1024th.
func (w *watchdog) stalled() bool {
	if w.polls++; w.polls%1024 != 1 {
		return false
	}
	if w.last.IsZero() {
		w.last = time.Now()
		return false
	}
	return time.Since(w.last) > stallLimit
}

// TestMPSCTail: with a producer reserving and a consumer releasing at the
// same time, Tail is the reservation counter — never past what was
// reserved, never behind Head — while Head()+Len(), two loads apart,
// overshoots whenever entries are released between them (counted, logged:
// how often a reader that summed the two would have named positions nobody
// reserved).
func TestMPSCTail(t *testing.T) {
	r, err := NewMPSC(make([]byte, 64*64), 64)
	if err != nil {
		t.Fatal(err)
	}
	const total = 200000
	var reserved atomic.Uint64 // what the producer has reserved, stored after each Reserve
	done := make(chan struct{})
	go func() { // producer
		for i := 0; i < total; {
			b, err := r.Reserve(1)
			if err != nil {
				runtime.Gosched()
				continue
			}
			reserved.Store(uint64(i + 1))
			if err := r.Commit(b); err != nil {
				panic(err)
			}
			i++
		}
	}()
	go func() { // consumer
		defer close(done)
		for n := 0; n < total; {
			b := r.Peek(64)
			if b.Len() == 0 {
				runtime.Gosched()
				continue
			}
			if err := r.Release(b.Len()); err != nil {
				panic(err)
			}
			n += b.Len()
		}
	}()
	overshoot := 0
	for {
		select {
		case <-done:
			if r.Tail() != total || r.Head() != total {
				t.Fatalf("at the end: Tail %d, Head %d, want %d", r.Tail(), r.Head(), total)
			}
			t.Logf("Head()+Len() overshot the reservations %d times", overshoot)
			return
		default:
		}
		n := uint64(r.Len())
		sum := r.Head() + n
		head := r.Head()
		tail := r.Tail() // after Head: a release meanwhile only widens the gap
		if tail < head {
			t.Fatalf("Tail %d behind Head %d", tail, head)
		}
		if after := reserved.Load(); tail > after+1 {
			// +1: Reserve has moved tail, reserved is stored just after.
			t.Fatalf("Tail %d past the %d reserved", tail, after)
		}
		if sum > r.Tail() {
			overshoot++
		}
	}
}
