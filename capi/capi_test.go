package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// These tests drive the ABI's Go half (everything behind the hcommgo_*
// exports) without cgo; tests/capi/ drives the whole library from C.

// calls records callbacks by user data.
type calls struct {
	mu     sync.Mutex
	status map[uintptr][]int32
	ids    map[uintptr]uint64
	n      atomic.Int64
}

func newCalls() *calls {
	return &calls{status: map[uintptr][]int32{}, ids: map[uintptr]uint64{}}
}

func (c *calls) invoke(cb, ud uintptr, id uint64, status int32) {
	c.mu.Lock()
	c.status[ud] = append(c.status[ud], status)
	c.ids[ud] = id
	c.mu.Unlock()
	c.n.Add(1)
}

func (c *calls) waitN(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.n.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callbacks after 10s, want %d", c.n.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func openT(t *testing.T, c config, inv invokeFunc) *state {
	t.Helper()
	if c.PoolSize == 0 {
		c.PoolSize = 8 << 20
	}
	s, code, err := open(c, inv)
	if err != nil || code != codeOK {
		t.Fatalf("open(%+v): code %d: %v", c, code, err)
	}
	t.Cleanup(func() { finalize(s.handle, 5000) })
	return s
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    config
		want int32
	}{
		{"flags on mock", config{Flags: remoteShm}, codeEINVAL},
		{"unknown flags", config{Target: targetRemote, Flags: 2}, codeEINVAL},
		{"remote dev_mem_size", config{Target: targetRemote, DevMemSize: 4096}, codeEINVAL},
		{"remote bad listen", config{Target: targetRemote, Path: "localhost:0"}, codeEINVAL},
		{"depth", config{QueueDepth: 3}, codeEINVAL},
		{"depth too big", config{QueueDepth: 1 << 20}, codeEINVAL},
		{"align", config{Align: 48}, codeEINVAL},
		{"pool too small", config{PoolSize: 1024}, codeEINVAL},
		{"target", config{Target: 9}, codeEINVAL},
		{"mock path", config{Path: "/tmp/x"}, codeEINVAL},
		{"file no path", config{Target: targetFile}, codeEINVAL},
		{"file bad dir", config{Target: targetFile, Path: "/nonexistent-dir/x"}, codeENODEV},
		{"vfio no path", config{Target: targetVFIO}, codeEINVAL},
		{"vfio missing", config{Target: targetVFIO, Path: "0000:7f:1f.7"}, codeENODEV},
		{"memory dev", config{Target: targetMemory, DevMemSize: 4096}, codeEINVAL},
		{"dev mem huge", config{DevMemSize: 1 << 50}, codeEINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, code, err := open(tc.c, nil)
			if s != nil {
				finalize(s.handle, 0)
			}
			if code != tc.want || err == nil {
				t.Fatalf("open(%+v) = code %d, err %v; want code %d and an error", tc.c, code, err, tc.want)
			}
		})
	}
}

func TestHandles(t *testing.T) {
	s := openT(t, config{}, nil)
	if lookup(s.handle) != s {
		t.Fatal("lookup of a live handle failed")
	}
	for _, h := range []uint64{0, s.handle + 1<<16, s.handle&^0xffff | maxHandles + 1, s.handle &^ 0xffff} {
		if lookup(h) != nil {
			t.Errorf("lookup(%#x) found a state", h)
		}
	}
	if code := finalize(s.handle, 1000); code != codeOK {
		t.Fatalf("finalize: %d", code)
	}
	if lookup(s.handle) != nil || finalize(s.handle, 0) != codeEBADF {
		t.Fatal("finalized handle still resolves")
	}
	// The slot is reused under a new sequence number: the old handle stays dead.
	s2 := openT(t, config{}, nil)
	if s2.handle == s.handle || lookup(s.handle) != nil {
		t.Fatalf("handle %#x reused as %#x", s.handle, s2.handle)
	}
}

func TestResolve(t *testing.T) {
	s := openT(t, config{}, nil)
	h1, c1 := s.allocHost(1000)
	h2, c2 := s.allocHost(4096)
	d1, c3 := s.allocDev(1000)
	if c1|c2|c3 != codeOK {
		t.Fatalf("alloc: %d %d %d", c1, c2, c3)
	}
	if h1%64 != 0 || d1 < devAddrBase {
		t.Fatalf("host %#x, dev %#x", h1, d1)
	}
	for _, tc := range []struct {
		name   string
		p, n   uintptr
		want   int32
		kind   int
		offset int
	}{
		{"host start", h1, 1000, codeOK, locHost, 0},
		{"host rounded length", h1, 1024, codeOK, locHost, 0}, // blocks are rounded up to the alignment
		{"host interior", h1 + 100, 900, codeOK, locHost, 100},
		{"host past end", h1 + 100, 925, codeEFAULT, 0, 0},
		{"second block", h2 + 4095, 1, codeOK, locHost, 4095},
		{"before every block", h1 - 1, 1, codeEFAULT, 0, 0},
		{"dev start", d1, 1024, codeOK, locDev, 0},
		{"dev past end", d1 + 1, 1024, codeEFAULT, 0, 0},
		{"dev unallocated", d1 + 1<<20, 1, codeEFAULT, 0, 0},
		{"dev beyond size", devAddrBase + 1<<40, 1, codeEFAULT, 0, 0},
		{"top of address space", ^uintptr(0), 1, codeEFAULT, 0, 0},
		{"null", 0, 1, codeEFAULT, 0, 0},
	} {
		_, kind, code := s.resolve(tc.p, tc.n)
		if code != tc.want || kind != tc.kind {
			t.Errorf("%s: resolve(%#x, %d) = kind %d code %d, want kind %d code %d", tc.name, tc.p, tc.n, kind, code, tc.kind, tc.want)
		}
	}
	if s.freeHost(h1+64) != codeEFAULT || s.freeDev(d1+64) != codeEFAULT || s.freeDev(h1) != codeEFAULT {
		t.Fatal("interior or wrong-kind pointers freed")
	}
	if s.freeHost(h1) != codeOK || s.freeHost(h1) != codeEFAULT {
		t.Fatal("double free of host memory not refused")
	}
	if _, _, code := s.resolve(h1, 1); code != codeEFAULT {
		t.Fatal("freed host memory still resolves")
	}
	if n := s.host.len(); n != 1 {
		t.Fatalf("%d blocks indexed after freeing one of two", n)
	}
	if s.freeDev(d1) != codeOK || s.freeDev(d1) != codeEFAULT {
		t.Fatal("double free of device memory not refused")
	}
}

func TestCBTable(t *testing.T) {
	tb := newCBTable(8)
	var got []uint32
	for i := range 8 {
		ci, ok := tb.get(uintptr(100+i), uintptr(200+i))
		if !ok {
			t.Fatalf("get %d failed", i)
		}
		got = append(got, ci)
	}
	if _, ok := tb.get(1, 1); ok {
		t.Fatal("get from an empty table succeeded")
	}
	for i, ci := range got {
		if cb, ud := tb.take(ci); cb != uintptr(100+i) || ud != uintptr(200+i) {
			t.Fatalf("take %d: %d %d", ci, cb, ud)
		}
	}
	if tb.free() != 8 {
		t.Fatalf("%d free after taking all back", tb.free())
	}
	// Concurrent get/take: every index is held by one goroutine at a time.
	var held [8]atomic.Int32
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				ci, ok := tb.get(uintptr(g), uintptr(i))
				if !ok {
					continue
				}
				if held[ci].Add(1) != 1 {
					t.Errorf("index %d handed out twice", ci)
				}
				held[ci].Add(-1)
				if cb, ud := tb.take(ci); cb != uintptr(g) || ud != uintptr(i) {
					t.Errorf("index %d: got %d/%d want %d/%d", ci, cb, ud, g, i)
				}
			}
		}()
	}
	wg.Wait()
	if tb.free() != 8 {
		t.Fatalf("%d free at the end, want 8", tb.free())
	}
}

func TestTransfersAndCallbacks(t *testing.T) {
	c := newCalls()
	s := openT(t, config{}, c.invoke)
	const n = 256 << 10
	src, _ := s.allocHost(n)
	dst, _ := s.allocHost(n)
	dev, _ := s.allocDev(n)
	b, _, _ := s.host.find(src, n)
	if b == nil {
		t.Fatal("source block not found")
	}
	for i := range b.Bytes() {
		b.Bytes()[i] = byte(i * 13)
	}
	id, code := s.submit(src, dev, n, 1, 11)
	if code != codeOK || id == 0 {
		t.Fatalf("submit: %d", code)
	}
	if code := s.wait(id, 5000); code != codeOK {
		t.Fatalf("wait: %d", code)
	}
	ts := []cTransfer{{Src: dev, Dst: dst, Size: n / 2, Callback: 1, UserData: 12}, {Src: dev + n/2, Dst: dst + n/2, Size: n / 2, Callback: 1, UserData: 13}}
	if code := s.submitBatch(ts); code != codeOK || ts[0].ID == 0 || ts[1].ID == 0 {
		t.Fatalf("batch: %d, ids %v", code, ts)
	}
	for _, x := range ts {
		if code := s.wait(x.ID, 5000); code != codeOK {
			t.Fatalf("wait: %d", code)
		}
	}
	c.waitN(t, 3)
	bd, _, _ := s.host.find(dst, n)
	if bd == nil {
		t.Fatal("destination block not found")
	}
	for i, v := range bd.Bytes()[:n] {
		if v != byte(i*13) {
			t.Fatalf("byte %d: %d", i, v)
		}
	}
	c.mu.Lock()
	if c.ids[11] != id || c.ids[12] != ts[0].ID || c.ids[13] != ts[1].ID {
		t.Errorf("callback ids %v, submitted %d %d %d", c.ids, id, ts[0].ID, ts[1].ID)
	}
	c.mu.Unlock()
	if got := s.cbs.free(); got != len(s.cbs.cb) {
		t.Fatalf("%d of %d callback indexes free after all completed", got, len(s.cbs.cb))
	}
	// Refused transfers give their callback index back.
	for range 1000 {
		if _, code := s.submit(src, src, 64, 1, 1); code != codeEOPNOTSUPP {
			t.Fatalf("host→host: %d", code)
		}
		if code := s.submitBatch([]cTransfer{{Src: src, Dst: dev, Size: 64, Callback: 1}, {Src: 5, Dst: dev, Size: 1, Callback: 1}}); code != codeEFAULT {
			t.Fatalf("batch with a bad pointer: %d", code)
		}
	}
	if got := s.cbs.free(); got != len(s.cbs.cb) {
		t.Fatalf("%d of %d callback indexes free after refused submits", got, len(s.cbs.cb))
	}
}

// TestFinalizeCancels: with the device stalled, finalize cancels what is in
// flight and every callback runs exactly once with ECANCELED.
func TestFinalizeCancels(t *testing.T) {
	c := newCalls()
	s := openT(t, config{}, c.invoke)
	m := s.mock
	if err := m.InjectFault(mock.Fault{Kind: mock.FaultStall, Nth: 1}); err != nil {
		t.Fatal(err)
	}
	src, _ := s.allocHost(128 << 10)
	dev, _ := s.allocDev(128 << 10)
	sub := 0
	for i := range 32 {
		if _, code := s.submit(src, dev, 128<<10, 1, uintptr(i)); code == codeOK {
			sub++
		}
	}
	if code := finalize(s.handle, 20); code != codeOK {
		t.Fatalf("finalize: %d", code)
	}
	if c.n.Load() != int64(sub) {
		t.Fatalf("%d callbacks for %d transfers", c.n.Load(), sub)
	}
	for ud, st := range c.status {
		if len(st) != 1 || st[0] != codeECANCELED {
			t.Errorf("transfer %d: statuses %v, want one ECANCELED", ud, st)
		}
	}
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int32
	}{
		{nil, codeOK},
		{engine.ErrQueueFull, codeEAGAIN},
		{engine.ErrCanceled, codeECANCELED},
		{engine.ErrTimeout, codeETIMEDOUT},
		{engine.ErrDevice, codeEIO},
		{engine.ErrStaleID, codeESTALE},
		{engine.ErrUnknownID, codeENOENT},
		{engine.ErrFreedBlock, codeEFAULT},
		{engine.ErrClosed, codeESHUTDOWN},
		{engine.ErrBadConfig, codeEINVAL},
		{context.DeadlineExceeded, codeEINPROGRESS},
	} {
		if got := codeOf(tc.err); got != tc.want {
			t.Errorf("codeOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestSubmitAllocs: a submit through the ABI's Go half allocates nothing.
func TestSubmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c := newCalls()
	s := openT(t, config{}, func(cb, ud uintptr, id uint64, status int32) { c.n.Add(1) })
	src, _ := s.allocHost(4096)
	dev, _ := s.allocDev(4096)
	allocs := testing.AllocsPerRun(200, func() {
		id, code := s.submit(src, dev, 4096, 1, 0)
		if code != codeOK {
			t.Fatalf("submit: %d", code)
		}
		if code := s.wait(id, -1); code != codeOK {
			t.Fatalf("wait: %d", code)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per submit+wait", allocs)
	}
}

// TestWaitTimeoutAllocs: a wait with a timeout allocates nothing either
// (hcomm.data waits for every read with one), and the reused deadlines keep
// their meaning: a stalled transfer's bounded waits (0 and 20 ms, several
// times: a deadline that ran out is not reused) say EINPROGRESS, and the
// waits after them succeed.
func TestWaitTimeoutAllocs(t *testing.T) {
	c := newCalls()
	s := openT(t, config{}, func(cb, ud uintptr, id uint64, status int32) { c.n.Add(1) })
	src, _ := s.allocHost(128 << 10)
	dev, _ := s.allocDev(128 << 10)
	if !raceEnabled {
		allocs := testing.AllocsPerRun(200, func() {
			id, code := s.submit(src, dev, 4096, 1, 0)
			if code != codeOK {
				t.Fatalf("submit: %d", code)
			}
			if code := s.wait(id, 60000); code != codeOK {
				t.Fatalf("wait: %d", code)
			}
		})
		if allocs != 0 {
			t.Fatalf("%.1f allocations per submit + timed wait", allocs)
		}
	}
	if err := s.mock.InjectFault(mock.Fault{Kind: mock.FaultStall, Nth: 1}); err != nil {
		t.Fatal(err)
	}
	// 128 KiB: a transfer this large goes to the device (the stalled one),
	// not to a CPU copy.
	stalled, code := s.submit(src, dev, 128<<10, 1, 0)
	if code != codeOK {
		t.Fatalf("submit: %d", code)
	}
	for i := range 3 {
		for _, ms := range []int{0, 20} {
			if code := s.wait(stalled, ms); code != codeEINPROGRESS {
				t.Fatalf("round %d: wait(%d ms) for a stalled transfer: %d, want EINPROGRESS", i, ms, code)
			}
		}
	}
}

// TestIndexConcurrent: resolving while other goroutines allocate and free
// finds either a live block (the engine then checks its generation) or
// nothing, never a wrong block; run under -race.
func TestIndexConcurrent(t *testing.T) {
	s := openT(t, config{}, nil)
	keep, _ := s.allocHost(4096)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				p, code := s.allocHost(128)
				if code != codeOK {
					t.Errorf("alloc: %d", code)
					return
				}
				d, _ := s.allocDev(128)
				if s.freeHost(p) != codeOK || s.freeDev(d) != codeOK {
					t.Error("free failed")
					return
				}
			}
		}()
	}
	for i := 0; i < 20000; i++ {
		b, off, ok := s.host.find(keep+100, 10)
		if !ok || off != 100 || b.Addr() != keep {
			t.Fatalf("find of a long-lived block: ok %v off %d", ok, off)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := s.host.len(); n != 1 {
		t.Fatalf("%d blocks indexed, want 1", n)
	}
}
