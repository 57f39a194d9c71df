package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg   Config
		field string
	}{
		{Config{PoolSize: 1}, "PoolSize"},
		{Config{PoolSize: -5}, "PoolSize"},
		{Config{QueueDepth: 3}, "QueueDepth"},
		{Config{QueueDepth: -1}, "QueueDepth"},
		{Config{QueueDepth: 1 << 20}, "QueueDepth"},
		{Config{Alignment: 4}, "Alignment"},
		{Config{Alignment: 96}, "Alignment"},
		{Config{Target: 7}, "Target"},
		{Config{CPUThreshold: -2}, "CPUThreshold"},
		{Config{CPUThreshold: 1 << 30}, "CPUThreshold"},
		{Config{Timeout: time.Microsecond}, "Timeout"},
		{Config{Mode: 9}, "Mode"},
		{Config{Spin: time.Hour}, "Spin"},
		{Config{DeviceQueue: -1}, "DeviceQueue"},
		{Config{Backings: []hugepage.Backing{99}}, "Backings"},
		{Config{Target: TargetFile}, "File"},
		{Config{QueueDepth: 4096}, "QueueDepth"}, // the default mock holds 4096 entries: depth ≤ 2048
		{Config{DeviceQueue: 4}, "DeviceQueue"},  // the default mock has 4 queues
	}
	for _, c := range cases {
		_, err := Open(small(c.cfg))
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Open(%+v): %v, want ErrBadConfig naming %s", c.cfg, err, c.field)
		}
	}
}

func TestDefaults(t *testing.T) {
	e, err := Open(Config{Logger: quiet(), Backings: []hugepage.Backing{hugepage.Backing4K}})
	must(t, err)
	defer e.Close(context.Background())
	c := e.Config()
	if c.PoolSize != 256<<20 || c.QueueDepth != 64 || c.Alignment != 64 || c.Mode != ModeReaper || c.Target != TargetDevice {
		t.Errorf("defaults: %+v", c)
	}
	if c.CPUThreshold == 0 {
		t.Errorf("CPUThreshold not measured")
	}
	t.Logf("measured CPU-path threshold: %d bytes", c.CPUThreshold)
}

// TestDataPaths moves data host→device (DMA and CPU path), device→device and
// device→host and checks every byte, and that only the bytes named moved.
func TestDataPaths(t *testing.T) {
	for _, thr := range []int{-1, 4096} {
		e := open(t, Config{CPUThreshold: thr})
		src := alloc(t, e, 8192)
		dst := alloc(t, e, 8192)
		for i := range src.Bytes() {
			src.Bytes()[i] = byte(i * 7)
		}
		ctx := ctxT(t, 10*time.Second)
		run := func(tr Transfer) {
			t.Helper()
			id, err := e.Submit(tr)
			must(t, err)
			must(t, e.Wait(ctx, id))
		}
		run(Transfer{Src: HostAt(src, 100), Dst: DeviceAt(1000), Len: 3000})
		run(Transfer{Src: DeviceAt(1000), Dst: DeviceAt(9000), Len: 3000})
		run(Transfer{Src: DeviceAt(9000), Dst: HostAt(dst, 50), Len: 3000})
		want := make([]byte, 8192)
		copy(want[50:], src.Bytes()[100:3100])
		if !bytes.Equal(dst.Bytes(), want) {
			t.Fatalf("threshold %d: data mismatch", thr)
		}
		st := e.Stats()
		if thr > 0 && st.Paths[PathCPU].Transfers != 1 || thr < 0 && st.Paths[PathCPU].Transfers != 0 {
			t.Errorf("threshold %d: paths %+v", thr, st.Paths)
		}
	}
}

// TestBadInput: every caller mistake is a typed error, and none reaches
// the device: the mock's IOMMU sees no fault and no bad descriptor.
func TestBadInput(t *testing.T) {
	dev := newMock(t, mock.Config{DevMemSize: 1 << 20, MaxTransfer: 64 << 10})
	e := open(t, Config{Device: dev, CPUThreshold: -1})
	other := open(t, Config{Target: TargetMemory})
	b := alloc(t, e, 4096)
	freed := alloc(t, e, 4096)
	must(t, e.Free(freed))
	ob := alloc(t, other, 4096)
	cases := []struct {
		name string
		tr   Transfer
		want error
	}{
		{"zero length", Transfer{Src: Host(b), Dst: DeviceAt(0)}, ErrBadTransfer},
		{"negative length", Transfer{Src: Host(b), Dst: DeviceAt(0), Len: -1}, ErrBadTransfer},
		{"other engine's block", Transfer{Src: Host(ob), Dst: DeviceAt(0), Len: 64}, ErrForeignBlock},
		{"zero block", Transfer{Src: Host(Block{}), Dst: DeviceAt(0), Len: 64}, ErrForeignBlock},
		{"freed block", Transfer{Src: Host(freed), Dst: DeviceAt(0), Len: 64}, ErrFreedBlock},
		{"beyond block", Transfer{Src: HostAt(b, 4000), Dst: DeviceAt(0), Len: 100}, ErrOutOfBounds},
		{"negative offset", Transfer{Src: HostAt(b, -1), Dst: DeviceAt(0), Len: 100}, ErrOutOfBounds},
		{"beyond device memory", Transfer{Src: Host(b), Dst: DeviceAt(1<<20 - 10), Len: 64}, ErrOutOfBounds},
		{"device offset wraps", Transfer{Src: Host(b), Dst: DeviceAt(^uint64(0) - 8), Len: 64}, ErrOutOfBounds},
		{"device to host beyond block", Transfer{Src: DeviceAt(0), Dst: HostAt(b, 1), Len: 4096}, ErrOutOfBounds},
		{"over MAX_LEN", Transfer{Src: DeviceAt(0), Dst: DeviceAt(1 << 19), Len: 128 << 10}, ErrOutOfBounds},
		{"host to host", Transfer{Src: Host(b), Dst: Host(b), Len: 64}, ErrBadTransfer},
		{"to a file", Transfer{Src: Host(b), Dst: FileAt(0), Len: 64}, ErrBadTransfer},
		{"nowhere", Transfer{Len: 64}, ErrBadTransfer},
	}
	for _, c := range cases {
		if _, err := e.Submit(c.tr); !errors.Is(err, c.want) {
			t.Errorf("%s: Submit: %v, want %v", c.name, err, c.want)
		}
		if n, err := e.SubmitBatch([]Transfer{{Src: Host(b), Dst: DeviceAt(0), Len: 64}, c.tr}, nil); n != 1 || !errors.Is(err, c.want) {
			t.Errorf("%s: SubmitBatch: %d, %v, want 1, %v", c.name, n, err, c.want)
		}
	}
	if err := e.Free(freed); !errors.Is(err, ErrFreedBlock) {
		t.Errorf("double free: %v", err)
	}
	if err := e.Free(ob); !errors.Is(err, ErrForeignBlock) {
		t.Errorf("foreign free: %v", err)
	}
	if err := e.Free(Block{}); !errors.Is(err, ErrForeignBlock) {
		t.Errorf("zero block free: %v", err)
	}
	if err := e.Wait(context.Background(), 0); !errors.Is(err, ErrUnknownID) {
		t.Errorf("Wait(0): %v", err)
	}
	oid, err := other.Submit(Transfer{Src: Host(ob), Dst: Host(ob), Len: 64})
	must(t, err)
	if err := e.Wait(context.Background(), oid); !errors.Is(err, ErrUnknownID) {
		t.Errorf("Wait(other engine's ID): %v", err)
	}
	must(t, e.Drain(ctxT(t, 10*time.Second)))
	c := dev.Counters()
	if c.IOMMUFaults != 0 || c.DevMemFaults != 0 || c.BadDescriptors != 0 {
		t.Errorf("bad input reached the device: %+v", c)
	}
	if c.Descriptors != uint64(len(cases)) {
		t.Errorf("device saw %d descriptors, want %d (the valid first half of each batch)", c.Descriptors, len(cases))
	}
}

// TestStaleID: once a slot is reused, its old ID is stale, never another
// transfer's result.
func TestStaleID(t *testing.T) {
	e := open(t, Config{QueueDepth: 2, Target: TargetMemory})
	b := alloc(t, e, 128)
	ctx := ctxT(t, 10*time.Second)
	first, err := e.Submit(Transfer{Src: HostAt(b, 0), Dst: HostAt(b, 64), Len: 64})
	must(t, err)
	must(t, e.Wait(ctx, first))
	for range 4 {
		id, err := e.SubmitContext(ctx, Transfer{Src: HostAt(b, 0), Dst: HostAt(b, 64), Len: 64})
		must(t, err)
		must(t, e.Wait(ctx, id))
	}
	if err := e.Wait(ctx, first); !errors.Is(err, ErrStaleID) {
		t.Fatalf("Wait(stale): %v", err)
	}
	if err := e.Wait(ctx, first+100); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("Wait(future): %v", err)
	}
}

// TestQueueFull: a stalled device fills the queue; Submit says so, the
// context variant waits, and after the stall is detected everything
// completes (the stalled transfer with ErrTimeout).
func TestQueueFull(t *testing.T) {
	dev := newMock(t, mock.Config{})
	must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultStall, Nth: 1}))
	e := open(t, Config{Device: dev, QueueDepth: 8, CPUThreshold: -1, Timeout: 100 * time.Millisecond})
	b := alloc(t, e, 64)
	var mu sync.Mutex
	results := map[uint64]error{}
	cb := func(r Result) { mu.Lock(); results[r.User] = r.Err; mu.Unlock() }
	for i := range 8 {
		if _, err := e.Submit(Transfer{Src: Host(b), Dst: DeviceAt(0), Len: 64, Callback: cb, User: uint64(i)}); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	if _, err := e.Submit(Transfer{Src: Host(b), Dst: DeviceAt(0), Len: 64}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("9th submit: %v, want ErrQueueFull", err)
	}
	if n, err := e.SubmitBatch(make([]Transfer, 2), nil); n != 0 || !errors.Is(err, ErrQueueFull) && !errors.Is(err, ErrBadTransfer) {
		t.Fatalf("batch on a full queue: %d, %v", n, err)
	}
	short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := e.SubmitContext(short, Transfer{Src: Host(b), Dst: DeviceAt(0), Len: 64}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SubmitContext on a stalled queue: %v", err)
	}
	// The stall is found after Timeout; recovery fails everything once.
	id, err := e.SubmitContext(ctxT(t, 20*time.Second), Transfer{Src: Host(b), Dst: DeviceAt(0), Len: 64, Callback: cb, User: 8})
	must(t, err)
	must(t, e.Wait(ctxT(t, 20*time.Second), id))
	must(t, e.Drain(ctxT(t, 20*time.Second)))
	mu.Lock()
	defer mu.Unlock()
	if len(results) != 9 {
		t.Fatalf("%d callbacks, want 9", len(results))
	}
	if !errors.Is(results[0], ErrTimeout) {
		t.Errorf("stalled transfer: %v, want ErrTimeout", results[0])
	}
	for i := uint64(1); i < 8; i++ {
		if !errors.Is(results[i], ErrDevice) {
			t.Errorf("transfer %d behind the stall: %v, want ErrDevice (reset)", i, results[i])
		}
	}
	if st := e.Stats(); st.QueueFull < 2 || st.Recoveries < 1 || st.Timeouts < 1 {
		t.Errorf("stats: %+v", st)
	}
}

// TestCloseInFlight: Close with transfers stuck in the device cancels them,
// and every callback still runs exactly once.
func TestCloseInFlight(t *testing.T) {
	for _, mode := range []Mode{ModeReaper, ModePoll} {
		dev := newMock(t, mock.Config{})
		must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultLatency, Rate: 1, Latency: time.Second}))
		e, err := Open(small(Config{Device: dev, QueueDepth: 32, CPUThreshold: -1, Mode: mode}))
		must(t, err)
		b := alloc(t, e, 64)
		counts := make([]atomic.Int32, 40)
		var canceled atomic.Int32
		cb := func(r Result) {
			counts[r.User].Add(1)
			if errors.Is(r.Err, ErrCanceled) {
				canceled.Add(1)
			}
		}
		ids := make([]ID, 32)
		ts := make([]Transfer, 32)
		for i := range ts {
			ts[i] = Transfer{Src: Host(b), Dst: DeviceAt(uint64(i) * 64), Len: 64, Callback: cb, User: uint64(i)}
		}
		n, err := e.SubmitBatch(ts, ids)
		if n != 32 || err != nil {
			t.Fatalf("batch: %d, %v", n, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		must(t, e.Close(ctx))
		cancel()
		must(t, e.Close(context.Background())) // harmless
		for i := range 32 {
			if c := counts[i].Load(); c != 1 {
				t.Errorf("%v: transfer %d: %d callbacks", mode, i, c)
			}
			if err := e.Wait(context.Background(), ids[i]); !errors.Is(err, ErrCanceled) && err != nil {
				t.Errorf("%v: Wait(%d) after Close: %v", mode, i, err)
			}
		}
		if canceled.Load() == 0 {
			t.Errorf("%v: nothing canceled", mode)
		}
		if _, err := e.Submit(Transfer{Src: Host(b), Dst: DeviceAt(0), Len: 64}); !errors.Is(err, ErrClosed) {
			t.Errorf("%v: Submit after Close: %v", mode, err)
		}
		if _, err := e.Alloc(64); !errors.Is(err, ErrClosed) {
			t.Errorf("%v: Alloc after Close: %v", mode, err)
		}
		if err := e.Free(b); !errors.Is(err, ErrClosed) {
			t.Errorf("%v: Free after Close: %v", mode, err)
		}
		if dev.Mappings() != 0 {
			t.Errorf("%v: %d DMA mappings left after Close", mode, dev.Mappings())
		}
		st := e.Stats()
		if st.Completed != 32 {
			t.Errorf("%v: stats after close: %+v", mode, st)
		}
	}
}

// TestPollMode: no goroutine; Poll drives completions on the caller.
func TestPollMode(t *testing.T) {
	dev := newMock(t, mock.Config{})
	e := open(t, Config{Device: dev, Mode: ModePoll, CPUThreshold: -1})
	b := alloc(t, e, 4096)
	var got atomic.Int32
	for i := range 10 {
		_, err := e.Submit(Transfer{Src: Host(b), Dst: DeviceAt(uint64(i) * 4096), Len: 4096, Callback: func(Result) { got.Add(1) }})
		must(t, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < 10 && time.Now().Before(deadline) {
		e.Poll()
	}
	if got.Load() != 10 {
		t.Fatalf("%d of 10 callbacks", got.Load())
	}
}

// TestResetThenIdle: the device resets itself on the first transfer; the
// engine reports it, recovers, and the next transfer — submitted after the
// reaper has gone to sleep — succeeds.
func TestResetThenIdle(t *testing.T) {
	for _, mode := range []Mode{ModeReaper, ModePoll} {
		dev := newMock(t, mock.Config{})
		must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultReset, Nth: 1}))
		e := open(t, Config{Device: dev, CPUThreshold: -1, Mode: mode})
		b := alloc(t, e, 64)
		ctx := ctxT(t, 20*time.Second)
		id, err := e.Submit(Transfer{Src: Host(b), Dst: DeviceAt(0), Len: 64})
		must(t, err)
		if err := e.Wait(ctx, id); !errors.Is(err, ErrDevice) {
			t.Fatalf("%v: first transfer: %v, want ErrDevice (reset)", mode, err)
		}
		time.Sleep(20 * time.Millisecond) // the reaper sleeps
		for i := range 3 {
			id, err = e.Submit(Transfer{Src: Host(b), Dst: DeviceAt(0), Len: 64})
			must(t, err)
			if err := e.Wait(ctx, id); err != nil {
				t.Fatalf("%v: transfer %d after the reset: %v", mode, i, err)
			}
		}
		if st := e.Stats(); st.Recoveries != 1 {
			t.Errorf("%v: %d recoveries", mode, st.Recoveries)
		}
	}
}
