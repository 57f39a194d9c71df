package hdma_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func TestIdentify(t *testing.T) {
	r := newRig(t, mock.Config{Queues: 5, MaxQueueEntriesLog2: 9, DevMemSize: 2 << 20, MaxTransfer: 1 << 20}, hdma.Config{}, 1, 64)
	want := hdma.Info{Version: 1, Queues: 5, MaxQueueEntries: 512, DevMemSize: 2 << 20, MaxTransfer: 1 << 20}
	if got := r.drv.Info(); got != want {
		t.Errorf("Info = %+v, want %+v", got, want)
	}
	if len(r.drv.DeviceMemory()) != 2<<20 {
		t.Errorf("device memory %d bytes", len(r.drv.DeviceMemory()))
	}
	if err := r.drv.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
	// Queue configuration is refused while enabled, and checked.
	if _, err := r.drv.SetupQueue(hdma.QueueConfig{Index: 1, Entries: 64}); !errors.Is(err, hdma.ErrEnabled) {
		t.Errorf("setup while enabled: %v", err)
	}
	must(t, r.drv.Reset())
	bad := []hdma.QueueConfig{
		{Index: 5, Entries: 64, SQ: r.mem, CQ: r.mem},
		{Index: 1, Entries: 48, SQ: r.mem, CQ: r.mem},
		{Index: 1, Entries: 1024, SQ: r.mem, CQ: r.mem},
		{Index: 1, Entries: 64, SQ: r.mem[:100], CQ: r.mem},
		{Index: 1, Entries: 64, SQ: r.mem, CQ: r.mem, SQIOVA: 8},
		{Index: 1, Entries: 64, SQ: r.mem, CQ: r.mem[2:]}, // CQ memory not 4-byte aligned
	}
	for _, c := range bad {
		if _, err := r.drv.SetupQueue(c); !errors.Is(err, hdma.ErrBadConfig) {
			t.Errorf("SetupQueue(index %d, entries %d): %v, want ErrBadConfig", c.Index, c.Entries, err)
		}
	}
}

// notHDMA is a device whose ID register reads wrong.
type notHDMA struct{ *mock.Device }
type badID struct{ vfio.Region }

func (b badID) Read32(off uint64) (uint32, error) {
	if off == model.RegID {
		return 0x11e81234, nil
	}
	return b.Region.Read32(off)
}
func (n notHDMA) Region(i int) (vfio.Region, error) {
	r, err := n.Device.Region(i)
	if i == vfio.RegionBAR0 && err == nil {
		return badID{r}, nil
	}
	return r, err
}

func TestOpenNotHDMA(t *testing.T) {
	d, err := mock.New(mock.Config{})
	must(t, err)
	defer d.Close()
	if _, err := hdma.Open(notHDMA{d}, hdma.Config{}); !errors.Is(err, hdma.ErrNotHDMA) {
		t.Fatalf("Open: %v, want ErrNotHDMA", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestTransfers moves data host→device, device→device and device→host in
// batches of 32, one doorbell per batch (counted by the device), and checks
// every byte.
func TestTransfers(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) { testTransfers(t, inline) })
	}
}

func testTransfers(t *testing.T, inline bool) {
	const n, blk = 32, 4096
	r := newRig(t, mock.Config{DevMemSize: 4 << 20, Inline: inline}, hdma.Config{}, 2, 64)
	q := r.qs[1]
	src, dst := dataOff, dataOff+n*blk
	for i := range n * blk {
		r.mem[src+i] = byte(i*31 + i>>8)
	}
	before, qbefore := r.dev.Counters(), r.dev.QueueCounters(1)
	batch := func(op hdma.Op, s, d func(i int) uint64) {
		descs := make([]hdma.Desc, n)
		for i := range descs {
			descs[i] = hdma.Desc{Op: op, Len: blk, Src: s(i), Dst: d(i), User: uint64(i)}
		}
		r.submit(q, descs...)
		for i, c := range r.reap(q, n) {
			if c.Err != nil || c.User != uint64(i) || c.Len != blk {
				t.Fatalf("%v completion %d: %+v", op, i, c)
			}
		}
	}
	batch(hdma.OpH2D, func(i int) uint64 { return iova(src + i*blk) }, func(i int) uint64 { return uint64(i * blk) })
	batch(hdma.OpD2D, func(i int) uint64 { return uint64(i * blk) }, func(i int) uint64 { return uint64(2<<20 + (n-1-i)*blk) })
	batch(hdma.OpD2H, func(i int) uint64 { return uint64(2<<20 + (n-1-i)*blk) }, func(i int) uint64 { return iova(dst + i*blk) })
	if !bytes.Equal(r.mem[src:src+n*blk], r.mem[dst:dst+n*blk]) {
		t.Fatal("data did not survive host→device→device→host")
	}
	after := r.dev.Counters()
	if got := after.SQDoorbells - before.SQDoorbells; got != 3 {
		t.Errorf("device saw %d SQ doorbells for 3 batches", got)
	}
	if got := after.BytesH2D + after.BytesD2D + after.BytesD2H - before.BytesH2D - before.BytesD2D - before.BytesD2H; got != 3*n*blk {
		t.Errorf("device moved %d bytes", got)
	}
	st := q.Stats()
	if st.Doorbells != 3 || st.Submitted != 3*n || st.Reaped != 3*n || st.HeadWrites > st.Reaped || st.Errors != 0 {
		t.Errorf("queue stats %+v", st)
	}
	if qc := r.dev.QueueCounters(1); qc.SQDoorbells-qbefore.SQDoorbells != 3 || qc.CQDoorbells-qbefore.CQDoorbells != st.HeadWrites {
		t.Errorf("device queue counters %+v vs driver %+v", qc, st)
	}
	// CPU path into device memory (BAR2 mapped).
	copy(r.drv.DeviceMemory()[100:], "cpu path")
	r.submit(q, hdma.Desc{Op: hdma.OpD2H, Len: 8, Src: 100, Dst: iova(dst)})
	if c := r.reap(q, 1)[0]; c.Err != nil || string(r.mem[dst:dst+8]) != "cpu path" {
		t.Errorf("CPU-written device memory: %+v %q", c, r.mem[dst:dst+8])
	}
}

func TestQueueFullAndWrap(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 8)
	q := r.qs[0]
	for round := range 5 {
		descs := make([]hdma.Desc, 10)
		for i := range descs {
			descs[i] = hdma.Desc{Op: hdma.OpFence, User: uint64(round*100 + i)}
		}
		n, err := q.SubmitBatch(descs)
		if n != 7 || !errors.Is(err, hdma.ErrQueueFull) {
			t.Fatalf("round %d: SubmitBatch took %d, %v; want 7, ErrQueueFull", round, n, err)
		}
		if q.Free() != 0 {
			t.Fatalf("Free = %d", q.Free())
		}
		for i, c := range r.reap(q, 7) {
			if c.Err != nil || c.User != uint64(round*100+i) {
				t.Fatalf("round %d completion %d: %+v", round, i, c)
			}
		}
	}
}

// TestIOMMUFaultThroughDriver: an unmapped IOVA gives ErrIOMMUFault on
// exactly that descriptor, FAULT_ADDR names it, and the guard bytes around
// the mapped buffer are untouched.
func TestIOMMUFaultThroughDriver(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 64)
	q := r.qs[0]
	// A second, small mapping with guard bytes on both sides in the arena
	// but outside the IOMMU map: arena pages are mapped at arenaIOVA; map
	// one extra page of the arena again elsewhere, read-only.
	const gIOVA = 0x2_0000_0000
	page := r.mem[arenaSize-3*4096 : arenaSize]
	for i := range page {
		page[i] = 0xA5
	}
	for i := 4096; i < 8192; i++ {
		page[i] = 0x5A
	}
	must(t, r.dev.UnmapDMA(arenaIOVA, arenaSize))
	must(t, r.dev.MapDMA(arenaIOVA, r.mem[:arenaSize-3*4096], vfio.DMAReadWrite))
	must(t, r.dev.MapDMA(gIOVA, page[4096:8192], vfio.DMARead))
	devmem := r.drv.DeviceMemory()
	clear(devmem[:1<<20])
	r.submit(q,
		hdma.Desc{Op: hdma.OpH2D, Len: 4096, Src: gIOVA, Dst: 0, User: 1},           // ok
		hdma.Desc{Op: hdma.OpH2D, Len: 4096, Src: gIOVA + 2048, Dst: 8192, User: 2}, // straddles the end
		hdma.Desc{Op: hdma.OpD2H, Len: 16, Src: 0, Dst: gIOVA, User: 3},             // read-only mapping
		hdma.Desc{Op: hdma.OpH2D, Len: 64, Src: 0xdead_0000, Dst: 16384, User: 4},   // unmapped
		hdma.Desc{Op: hdma.OpD2H, Len: 64, Src: 0, Dst: gIOVA - 64, User: 5},        // just below
		hdma.Desc{Op: hdma.OpH2D, Len: 64, Src: gIOVA + 4032, Dst: 24576, User: 6},  // last bytes: ok
	)
	cs := r.reap(q, 6)
	for _, c := range cs {
		wantErr := error(nil)
		if c.User >= 2 && c.User <= 5 {
			wantErr = hdma.ErrIOMMUFault
		}
		if !errors.Is(c.Err, wantErr) || (wantErr != nil && c.Len != 0) {
			t.Errorf("descriptor %d: %+v, want %v", c.User, c, wantErr)
		}
	}
	_, fa, err := r.drv.Status()
	must(t, err)
	if fa != gIOVA-64 {
		t.Errorf("FAULT_ADDR %#x, want %#x (the last fault)", fa, uint64(gIOVA-64))
	}
	if !allBytes(page[:4096], 0xA5) || !allBytes(page[8192:], 0xA5) || !allBytes(page[4096:8192], 0x5A) {
		t.Error("guard bytes or the read-only page changed")
	}
	if !allBytes(devmem[:4096], 0x5A) || !allBytes(devmem[4096:24576], 0) || !allBytes(devmem[24576:24640], 0x5A) {
		t.Error("device memory holds bytes from outside the map")
	}
}

func allBytes(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}

// TestDeviceErrors: statuses 2 and 3 surface as their errors.
func TestDeviceErrors(t *testing.T) {
	r := newRig(t, mock.Config{DevMemSize: 1 << 20}, hdma.Config{}, 1, 64)
	q := r.qs[0]
	r.submit(q,
		hdma.Desc{Op: hdma.OpD2D, Len: 64, Src: 1 << 20, Dst: 0, User: 1},
		hdma.Desc{Op: 7, Len: 64, User: 2},
		hdma.Desc{Op: hdma.OpH2D, Len: 0, Src: iova(dataOff), User: 3},
		hdma.Desc{Op: hdma.OpFence, User: 4},
	)
	want := []error{hdma.ErrDevMemBounds, hdma.ErrBadDescriptor, hdma.ErrBadDescriptor, nil}
	for i, c := range r.reap(q, 4) {
		if !errors.Is(c.Err, want[i]) || c.User != uint64(i+1) {
			t.Errorf("completion %d: %+v, want %v", i, c, want[i])
		}
	}
}

// TestInjectedFaultsExact: each injected fault surfaces as an error on
// exactly the descriptor it hit — compared against the device's own log by
// sequence number — and every other descriptor succeeds with its data moved.
func TestInjectedFaultsExact(t *testing.T) {
	tests := []struct {
		name  string
		fault mock.Fault
		want  error
	}{
		{"nth on queue 1 h2d", mock.Fault{Kind: mock.FaultError, Queues: 1 << 1, Opcode: model.OpH2D, Nth: 7}, hdma.ErrDeviceError},
		{"nth as bounds error", mock.Fault{Kind: mock.FaultError, Queues: 1 << 1, Nth: 30, Status: model.StatusDevMemBound}, hdma.ErrDevMemBounds},
		{"rate 0.1", mock.Fault{Kind: mock.FaultError, Rate: 0.1}, hdma.ErrDeviceError},
		{"rate, other queue only", mock.Fault{Kind: mock.FaultError, Queues: 1 << 0, Rate: 0.5}, nil},
		{"rate, other opcode only", mock.Fault{Kind: mock.FaultError, Opcode: model.OpD2H, Rate: 0.5}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, mock.Config{Seed: 7}, hdma.Config{}, 2, 128)
			must(t, r.dev.InjectFault(tc.fault))
			q := r.qs[1]
			const n, blk = 100, 256
			for i := range n * blk {
				r.mem[dataOff+i] = byte(i%253 + 1)
			}
			descs := make([]hdma.Desc, n)
			for i := range descs {
				// User = the descriptor's sequence number on its queue,
				// which the device's injection log records.
				descs[i] = hdma.Desc{Op: hdma.OpH2D, Len: blk, Src: iova(dataOff + i*blk), Dst: uint64(i * blk), User: uint64(i + 1)}
			}
			r.submit(q, descs[:50]...)
			got := r.reap(q, 50)
			r.submit(q, descs[50:]...)
			got = append(got, r.reap(q, 50)...)
			injected := map[uint64]bool{}
			for _, in := range r.dev.Injections() {
				if in.Queue != 1 {
					t.Fatalf("injection on queue %d", in.Queue)
				}
				injected[in.Seq] = true
			}
			if tc.want == nil && len(injected) != 0 {
				t.Fatalf("rule should not match, fired %d times", len(injected))
			}
			if tc.want != nil && len(injected) == 0 {
				t.Fatal("rule never fired")
			}
			dev := r.drv.DeviceMemory()
			for _, c := range got {
				i := int(c.User - 1)
				moved := bytes.Equal(dev[i*blk:(i+1)*blk], r.mem[dataOff+i*blk:dataOff+(i+1)*blk])
				if injected[c.User] {
					if !errors.Is(c.Err, tc.want) || moved {
						t.Errorf("descriptor %d hit by the fault: %+v, data moved %v", c.User, c, moved)
					}
				} else if c.Err != nil || !moved {
					t.Errorf("descriptor %d not hit: %+v, data moved %v", c.User, c, moved)
				}
			}
		})
	}
}

// TestStallTimeoutRecover: a stalled descriptor is found by the driver's
// timeout; Recover fails it with ErrTimeout and everything behind it with
// ErrDeviceReset, each exactly once, and later transfers succeed.
func TestStallTimeoutRecover(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{Timeout: 100 * time.Millisecond}, 2, 64)
	q := r.qs[0]
	must(t, r.dev.InjectFault(mock.Fault{Kind: mock.FaultStall, Queues: 1, Nth: 4}))
	descs := make([]hdma.Desc, 10)
	for i := range descs {
		descs[i] = hdma.Desc{Op: hdma.OpH2D, Len: 64, Src: iova(dataOff + i*64), Dst: uint64(i * 64), User: uint64(i + 1)}
	}
	r.submit(q, descs...)
	first := r.reap(q, 3)
	for i, c := range first {
		if c.Err != nil || c.User != uint64(i+1) {
			t.Fatalf("before the stall: %+v", c)
		}
	}
	// Poll as an engine would: reap, and check the timeout when idle.
	deadline := time.Now().Add(20 * time.Second)
	var out [16]hdma.Completion
	for {
		if n := q.Reap(out[:]); n != 0 {
			t.Fatalf("completion from a stalled queue: %+v", out[:n])
		}
		if user, age, stalled := q.CheckTimeout(); stalled {
			if user != 4 || age < 100*time.Millisecond {
				t.Fatalf("stall reported on descriptor %d after %v", user, age)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("stall not detected in 20s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := q.Enqueue(descs[0]); !errors.Is(err, hdma.ErrRecoveryNeeded) {
		t.Errorf("Enqueue on a stalled device: %v", err)
	}
	must(t, r.drv.Recover())
	seen := map[uint64]error{}
	for _, c := range r.reap(q, 7) {
		if _, dup := seen[c.User]; dup {
			t.Errorf("descriptor %d completed twice", c.User)
		}
		seen[c.User] = c.Err
	}
	for u := uint64(4); u <= 10; u++ {
		want := hdma.ErrDeviceReset
		if u == 4 {
			want = hdma.ErrTimeout
		}
		if !errors.Is(seen[u], want) {
			t.Errorf("descriptor %d: %v, want %v", u, seen[u], want)
		}
	}
	if n := q.Reap(out[:]); n != 0 {
		t.Errorf("extra completions after recovery: %+v", out[:n])
	}
	if q.Outstanding() != 0 {
		t.Errorf("outstanding %d after recovery", q.Outstanding())
	}
	// The device works again, on both queues.
	for _, qq := range r.qs {
		r.submit(qq, descs...)
		for _, c := range r.reap(qq, len(descs)) {
			if c.Err != nil {
				t.Fatalf("queue %d after recovery: %+v", qq.Index(), c)
			}
		}
	}
	if r.drv.Recoveries() != 1 {
		t.Errorf("Recoveries %d", r.drv.Recoveries())
	}
}

// TestDeviceResetRecover: the device resets itself mid-stream; what was in
// flight completes with ErrDeviceReset (status 4, written by the device),
// the driver refuses submissions until Recover, and after it transfers
// succeed. Every descriptor completes exactly once.
func TestDeviceResetRecover(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 256)
	q := r.qs[0]
	must(t, r.dev.InjectFault(mock.Fault{Kind: mock.FaultReset, Opcode: model.OpH2D, Nth: 20}))
	descs := make([]hdma.Desc, 50)
	for i := range descs {
		descs[i] = hdma.Desc{Op: hdma.OpH2D, Len: 128, Src: iova(dataOff + i*128), Dst: uint64(i * 128), User: uint64(i + 1)}
	}
	r.submit(q, descs...)
	cs := r.reap(q, 50)
	for i, c := range cs {
		want := error(nil)
		if i >= 19 {
			want = hdma.ErrDeviceReset
		}
		if c.User != uint64(i+1) || !errors.Is(c.Err, want) {
			t.Errorf("completion %d: %+v, want %v", i, c, want)
		}
	}
	if err := r.drv.Healthy(); !errors.Is(err, hdma.ErrNotReady) {
		t.Errorf("Healthy after a device reset: %v", err)
	}
	if err := q.Enqueue(descs[0]); !errors.Is(err, hdma.ErrRecoveryNeeded) {
		t.Errorf("Enqueue after a device reset: %v", err)
	}
	must(t, r.drv.Recover())
	var out [8]hdma.Completion
	if n := q.Reap(out[:]); n != 0 {
		t.Errorf("recovery produced %d completions for descriptors already completed", n)
	}
	r.submit(q, descs...)
	for _, c := range r.reap(q, 50) {
		if c.Err != nil {
			t.Fatalf("after recovery: %+v", c)
		}
	}
	must(t, r.drv.Healthy())
}

// TestInterruptCoalescingBounded: two large descriptors that each ask for an
// interrupt, rung together, interrupt twice: the device coalesces MSIs only
// over a short window, so the first completion is not held back until the
// second (2 MiB takes far longer to copy than that window).
func TestInterruptCoalescingBounded(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 64)
	q := r.qs[0]
	const n = 2 << 20
	r.submit(q,
		hdma.Desc{Op: hdma.OpH2D, Len: n, Src: iova(dataOff), Dst: 0, User: 1, Interrupt: true},
		hdma.Desc{Op: hdma.OpH2D, Len: n, Src: iova(dataOff + n), Dst: n, User: 2, Interrupt: true})
	for _, c := range r.reap(q, 2) {
		must(t, c.Err)
	}
	if got := r.dev.Counters().MSIs; got != 2 {
		t.Errorf("MSIs for two 2 MiB descriptors with the interrupt flag: %d, want 2", got)
	}
}

// TestQuiesceAfterDeviceReset: a descriptor published after the device reset
// itself (before the host reaped that) is never fetched; Quiesce fails it
// and the one the device completed comes out with its own status, each
// exactly once.
func TestQuiesceAfterDeviceReset(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 64)
	q := r.qs[0]
	must(t, r.dev.InjectFault(mock.Fault{Kind: mock.FaultReset, Nth: 1}))
	desc := func(user uint64) hdma.Desc {
		return hdma.Desc{Op: hdma.OpH2D, Len: 128, Src: iova(dataOff), Dst: 0, User: user}
	}
	r.submit(q, desc(1))
	for deadline := time.Now().Add(10 * time.Second); r.dev.Counters().InjectedResets == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the injected reset did not fire")
		}
		time.Sleep(50 * time.Microsecond)
	}
	r.submit(q, desc(2)) // the host has not reaped the reset yet
	must(t, r.drv.Quiesce())
	if n := q.Outstanding(); n != 2 {
		t.Fatalf("outstanding after Quiesce: %d, want the 2 failed completions still to reap", n)
	}
	for i, c := range r.reap(q, 2) {
		if c.User != uint64(i+1) || !errors.Is(c.Err, hdma.ErrDeviceReset) {
			t.Errorf("completion %d: %+v, want user %d with ErrDeviceReset", i, c, i+1)
		}
	}
	var out [4]hdma.Completion
	if n := q.Reap(out[:]); n != 0 || q.Outstanding() != 0 {
		t.Errorf("after reaping both: %d more completions, %d outstanding", n, q.Outstanding())
	}
}

// TestFatalRecover: a fatal fault (completion ring unmapped) is reported by
// Healthy with FAULT_ADDR, and Recover brings the device back.
func TestFatalRecover(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{Timeout: 50 * time.Millisecond}, 1, 64)
	q := r.qs[0]
	// Unmap the arena and map it back without its ring pages' write access.
	must(t, r.dev.UnmapDMA(arenaIOVA, arenaSize))
	must(t, r.dev.MapDMA(arenaIOVA, r.mem[:ringArea], vfio.DMARead))
	must(t, r.dev.MapDMA(arenaIOVA+ringArea, r.mem[ringArea:], vfio.DMAReadWrite))
	r.submit(q, hdma.Desc{Op: hdma.OpFence, User: 1})
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := r.drv.Healthy()
		if errors.Is(err, hdma.ErrFatal) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Healthy: %v, want ErrFatal", err)
		}
		time.Sleep(time.Millisecond)
	}
	_, cq := ringOffsets(0, 64)
	if _, fa, _ := r.drv.Status(); fa != iova(cq) {
		t.Errorf("FAULT_ADDR %#x, want the CQ at %#x", fa, iova(cq))
	}
	must(t, r.dev.UnmapDMA(arenaIOVA, ringArea))
	must(t, r.dev.MapDMA(arenaIOVA, r.mem[:ringArea], vfio.DMAReadWrite))
	must(t, r.drv.Recover())
	c := r.reap(q, 1)[0]
	if c.User != 1 || !errors.Is(c.Err, hdma.ErrDeviceReset) {
		t.Errorf("descriptor lost in the fatal fault: %+v", c)
	}
	r.submit(q, hdma.Desc{Op: hdma.OpFence, User: 2})
	if c := r.reap(q, 1)[0]; c.Err != nil {
		t.Errorf("after recovery: %+v", c)
	}
}

// TestInterruptEventfd: a descriptor with Interrupt set raises the queue's
// MSI; the driver waits for it on the eventfd (blocking poll+read).
func TestInterruptEventfd(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 2, 64)
	q := r.qs[0]
	if q.EventFD() < 0 || r.qs[1].EventFD() >= 0 {
		t.Fatalf("eventfds %d %d", q.EventFD(), r.qs[1].EventFD())
	}
	if n, err := q.WaitInterrupt(0); n != 0 || err != nil {
		t.Fatalf("interrupt before any work: %d %v", n, err)
	}
	r.submit(q, hdma.Desc{Op: hdma.OpFence, User: 1}, hdma.Desc{Op: hdma.OpFence, User: 2, Interrupt: true})
	n, err := q.WaitInterrupt(20 * time.Second)
	if err != nil || n == 0 {
		t.Fatalf("WaitInterrupt: %d, %v", n, err)
	}
	var out [4]hdma.Completion
	if k := q.Reap(out[:]); k != 2 {
		t.Errorf("after the interrupt %d completions are visible, want 2", k)
	}
	if r.dev.Counters().MSIs != 1 {
		t.Errorf("device raised %d MSIs", r.dev.Counters().MSIs)
	}
	if _, err := r.qs[1].WaitInterrupt(0); !errors.Is(err, hdma.ErrBadConfig) {
		t.Errorf("WaitInterrupt on a queue without interrupts: %v", err)
	}
}

// TestSetInterrupts: with its IRQ register off, a queue's completions
// arrive and raise nothing, and nothing is owed once it is on again; on,
// they interrupt. A queue without interrupts refuses the switch.
func TestSetInterrupts(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 2, 64)
	q := r.qs[0]
	must(t, q.SetInterrupts(false))
	r.submit(q, hdma.Desc{Op: hdma.OpFence, User: 1, Interrupt: true})
	r.reap(q, 1)
	must(t, q.SetInterrupts(true))
	if n, err := q.WaitInterrupt(50 * time.Millisecond); n != 0 || err != nil {
		t.Fatalf("an interrupt for a completion made while they were off: %d, %v", n, err)
	}
	r.submit(q, hdma.Desc{Op: hdma.OpFence, User: 2, Interrupt: true})
	if n, err := q.WaitInterrupt(20 * time.Second); n == 0 || err != nil {
		t.Fatalf("no interrupt once they are on again: %d, %v", n, err)
	}
	r.reap(q, 1)
	if got := r.dev.Counters().MSIs; got != 1 {
		t.Errorf("device raised %d MSIs, want 1", got)
	}
	if err := r.qs[1].SetInterrupts(true); !errors.Is(err, hdma.ErrBadConfig) {
		t.Errorf("SetInterrupts on a queue without interrupts: %v", err)
	}
}

// TestZeroAllocs: Enqueue, Submit and Reap do not allocate.
func TestZeroAllocs(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 128)
	q := r.qs[0]
	var out [64]hdma.Completion
	descs := make([]hdma.Desc, 64)
	for i := range descs {
		descs[i] = hdma.Desc{Op: hdma.OpH2D, Len: 64, Src: iova(dataOff + i*64), Dst: uint64(i * 64), User: uint64(i)}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if n, err := q.SubmitBatch(descs); n != len(descs) || err != nil {
			panic(err)
		}
		for got := 0; got < len(descs); {
			got += q.Reap(out[:])
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per submit+reap batch", allocs)
	}
}

// TestClose: after Close the queues refuse work, the device is reset and
// its interrupts unrouted; closing twice is harmless.
func TestClose(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 64)
	q := r.qs[0]
	must(t, r.drv.Close())
	must(t, r.drv.Close())
	if err := q.Enqueue(hdma.Desc{Op: hdma.OpFence}); !errors.Is(err, hdma.ErrClosed) {
		t.Errorf("Enqueue after Close: %v", err)
	}
	if err := r.drv.Recover(); !errors.Is(err, hdma.ErrClosed) {
		t.Errorf("Recover after Close: %v", err)
	}
	if st, _, err := r.drv.Status(); err != nil || st != 0 {
		t.Errorf("STATUS after Close %#x, %v", st, err)
	}
	if q.EventFD() != -1 {
		t.Errorf("eventfd %d still open", q.EventFD())
	}
}

// TestHeadReleaseError: when the CQ_HEAD write that would make room fails
// (here the device was closed under the driver), Enqueue reports that error
// instead of taking a descriptor the device was never given room for.
func TestHeadReleaseError(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 8)
	q := r.qs[0]
	r.submit(q, hdma.Desc{Op: hdma.OpFence})
	r.reap(q, 1) // one completion reaped, not yet released (a quarter is 2)
	must(t, r.dev.Close())
	for i := range q.Entries() - 2 {
		if err := q.Enqueue(hdma.Desc{Op: hdma.OpFence}); err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
	}
	err := q.Enqueue(hdma.Desc{Op: hdma.OpFence})
	// vfio.ErrClosed is hdma.ErrClosed (one shared sentinel): the message
	// tells the failed doorbell from the driver's own refusal.
	if !errors.Is(err, vfio.ErrClosed) || !strings.Contains(err.Error(), "CQ_HEAD doorbell") {
		t.Fatalf("enqueue needing a CQ_HEAD release on a closed device: %v, want the doorbell's vfio.ErrClosed", err)
	}
	if st := q.Stats(); st.HeadWrites != 0 {
		t.Errorf("%d CQ_HEAD writes counted, none reached the device", st.HeadWrites)
	}
	_ = r.drv.Close() // the device is gone: its reset fails; cleanup then finds the driver closed
}

// TestUnknownTags: a completion whose tag names no outstanding descriptor —
// a stale generation of a busy slot, or a slot with nothing in it — is
// dropped and counted, never handed out and never taken for the descriptor
// that really occupies the slot. The entries are forged in the completion
// ring while the device holds the only descriptor (a stall).
func TestUnknownTags(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 64)
	q := r.qs[0]
	must(t, r.dev.InjectFault(mock.Fault{Kind: mock.FaultStall, Nth: 1}))
	r.submit(q, hdma.Desc{Op: hdma.OpFence, User: 42}) // slot 0, generation 1
	deadline := time.Now().Add(20 * time.Second)
	for r.dev.Counters().InjectedStalls == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the device did not fetch the descriptor")
		}
		time.Sleep(time.Millisecond)
	}
	_, cq := ringOffsets(0, 64)
	forge := func(slot int, tag uint64) {
		e := r.mem[cq+slot*model.CplSize:]
		binary.LittleEndian.PutUint64(e[model.CplTag:], tag)
		binary.LittleEndian.PutUint32(e[model.CplLen:], 0)
		binary.LittleEndian.PutUint32(e[model.CplStatus:], 1<<16) // status 0, phase 1
	}
	forge(0, 0)       // slot 0, generation 0: stale (the slot holds generation 1)
	forge(1, 1<<32|5) // slot 5, which holds nothing
	var out [4]hdma.Completion
	if n := q.Reap(out[:]); n != 0 {
		t.Fatalf("Reap handed out %d forged completions: %+v", n, out[:n])
	}
	if st := q.Stats(); st.UnknownTags != 2 || st.Reaped != 2 {
		t.Errorf("stats %+v: want 2 unknown tags among 2 entries reaped", st)
	}
	if n := q.Outstanding(); n != 1 {
		t.Errorf("%d outstanding, want 1 (the stalled descriptor)", n)
	}
}

// TestLazyHeadNeverFillsCQ: CQ_HEAD is released lazily (a quarter ring at a
// time), and room counts reaped-but-unreleased entries, so the device never
// finds its completion ring full, even when a busy-polling host reaps one
// completion at a time and refills the queue to the brim every round.
func TestLazyHeadNeverFillsCQ(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 8)
	q := r.qs[0]
	descs := make([]hdma.Desc, 7)
	user := uint64(0)
	for round := range 50 {
		for i := range descs {
			descs[i] = hdma.Desc{Op: hdma.OpFence, User: user + uint64(i)}
		}
		n, err := q.SubmitBatch(descs)
		if n == 0 || (n < len(descs) && !errors.Is(err, hdma.ErrQueueFull)) {
			t.Fatalf("round %d: SubmitBatch took %d: %v", round, n, err)
		}
		for i := range n {
			c := r.reap(q, 1)[0]
			if c.Err != nil || c.User != user+uint64(i) {
				t.Fatalf("round %d completion %d: %+v", round, i, c)
			}
		}
		user += uint64(n)
	}
	if c := r.dev.Counters(); c.CQFullWaits != 0 {
		t.Errorf("the device found the completion ring full %d times", c.CQFullWaits)
	}
	if st := q.Stats(); st.HeadWrites >= st.Reaped {
		t.Errorf("%d CQ_HEAD writes for %d completions: not lazy", st.HeadWrites, st.Reaped)
	}
}

// TestResetThenEnable: after a bare Reset (not Recover), Enable starts the
// queues from a clean state: the device, whose SQ head went back to 0, must
// not fetch and execute again the descriptors that were already done, and
// the host must find the next completion where the device writes it.
func TestResetThenEnable(t *testing.T) {
	r := newRig(t, mock.Config{DevMemSize: 1 << 20}, hdma.Config{}, 1, 64)
	q := r.qs[0]
	for i := range 4096 {
		r.mem[dataOff+i] = 0x3c
	}
	r.submit(q,
		hdma.Desc{Op: hdma.OpH2D, Len: 4096, Src: iova(dataOff), Dst: 0, User: 1},
		hdma.Desc{Op: hdma.OpH2D, Len: 4096, Src: iova(dataOff), Dst: 4096, User: 2},
		hdma.Desc{Op: hdma.OpH2D, Len: 4096, Src: iova(dataOff), Dst: 8192, User: 3},
	)
	r.reap(q, 3)
	must(t, r.drv.Reset())
	must(t, r.drv.Enable())
	dev := r.drv.DeviceMemory()
	clear(dev[:3*4096])
	before := r.dev.Counters().Descriptors
	r.submit(q, hdma.Desc{Op: hdma.OpFence, User: 4})
	c := r.reap(q, 1)[0]
	if c.User != 4 || c.Err != nil {
		t.Errorf("completion after Reset and Enable: %+v", c)
	}
	if n := r.dev.Counters().Descriptors - before; n != 1 {
		t.Errorf("the device fetched %d descriptors for one submitted", n)
	}
	for i, b := range dev[:3*4096] {
		if b != 0 {
			t.Fatalf("device memory byte %d is %#x: a descriptor from before the reset ran again", i, b)
		}
	}
}
