package engine_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg   engine.Config
		field string
	}{
		{engine.Config{PoolSize: 1}, "PoolSize"},
		{engine.Config{PoolSize: -5}, "PoolSize"},
		{engine.Config{PoolMax: -1}, "PoolMax"},
		{engine.Config{QueueDepth: 3}, "QueueDepth"},
		{engine.Config{QueueDepth: -1}, "QueueDepth"},
		{engine.Config{QueueDepth: 1 << 20}, "QueueDepth"},
		{engine.Config{Alignment: 4}, "Alignment"},
		{engine.Config{Alignment: 96}, "Alignment"},
		{engine.Config{Alignment: 2 << 20, PoolSize: 1 << 20}, "Alignment"},
		{engine.Config{Mode: 9}, "Mode"},
		{engine.Config{Spin: time.Hour}, "Spin"},
		{engine.Config{Backings: []hugepage.Backing{99}}, "Backings"},
	}
	for _, c := range cases {
		c.cfg.Backend = memory.New()
		_, err := engine.Open(small(t, c.cfg))
		if !errors.Is(err, engine.ErrBadConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Open(%+v): %v, want ErrBadConfig naming %s", c.cfg, err, c.field)
		}
	}
	// No backend: the error says how to get a software device.
	if _, err := engine.Open(engine.Config{}); !errors.Is(err, engine.ErrBadConfig) || !strings.Contains(err.Error(), "mock.New") {
		t.Errorf("Open without a backend: %v, want ErrBadConfig naming mock.New", err)
	}
	// The backend's own limits, found when the engine attaches it.
	for _, c := range []struct {
		cfg   engine.Config
		field string
	}{
		{engine.Config{QueueDepth: 4096}, "QueueDepth"},                             // the default mock holds 4096 entries: depth ≤ 2048
		{engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{Queue: 4})}, "Queue"}, // the default mock has 4 queues
	} {
		if _, err := engine.Open(small(t, c.cfg)); !errors.Is(err, engine.ErrBadConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Open(%+v): %v, want ErrBadConfig naming %s", c.cfg, err, c.field)
		}
	}
}

func TestDefaults(t *testing.T) {
	e, err := engine.Open(engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{}), Logger: quiet(), Backings: []hugepage.Backing{hugepage.Backing4K}})
	must(t, err)
	defer e.Close()
	c := e.Config()
	if c.PoolSize != 256<<20 || c.QueueDepth != 64 || c.Alignment != 64 || c.Mode != engine.ModeReaper {
		t.Errorf("defaults: %+v", c)
	}
	d := e.Backend()
	if d.Name != "hdma" || d.CPUThreshold == 0 {
		t.Errorf("backend %+v: want hdma with a measured CPU-path threshold", d)
	}
	if st := e.Stats(); st.Backend != "hdma" || st.Backing != e.Backing() {
		t.Errorf("stats: backend %q, backing %v; engine backing %v", st.Backend, st.Backing, e.Backing())
	}
	t.Logf("measured CPU-path threshold: %d bytes; pool backing %v", d.CPUThreshold, e.Backing())
}

// TestDataPaths moves data host→device (DMA and CPU path), device→device and
// device→host and checks every byte, and that only the bytes named moved.
func TestDataPaths(t *testing.T) {
	for _, thr := range []int{-1, 4096} {
		e := open(t, engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: thr})})
		src := alloc(t, e, 8192)
		dst := alloc(t, e, 8192)
		for i := range src.Bytes() {
			src.Bytes()[i] = byte(i * 7)
		}
		ctx := ctxT(t, 10*time.Second)
		run := func(tr engine.Transfer) {
			t.Helper()
			id, err := e.Submit(tr)
			must(t, err)
			must(t, e.Wait(ctx, id))
		}
		run(engine.Transfer{Src: engine.HostAt(src, 100), Dst: engine.DeviceAt(1000), Len: 3000})
		run(engine.Transfer{Src: engine.DeviceAt(1000), Dst: engine.DeviceAt(9000), Len: 3000})
		run(engine.Transfer{Src: engine.DeviceAt(9000), Dst: engine.HostAt(dst, 50), Len: 3000})
		want := make([]byte, 8192)
		copy(want[50:], src.Bytes()[100:3100])
		if !bytes.Equal(dst.Bytes(), want) {
			t.Fatalf("threshold %d: data mismatch", thr)
		}
		st := e.Stats()
		if thr > 0 && st.Paths[engine.PathCPU].Transfers != 1 || thr < 0 && st.Paths[engine.PathCPU].Transfers != 0 {
			t.Errorf("threshold %d: paths %+v", thr, st.Paths)
		}
	}
}

// TestBadInput: every caller mistake is a typed error, and none reaches
// the device: the mock's IOMMU sees no fault and no bad descriptor.
func TestBadInput(t *testing.T) {
	dev := newMock(t, mock.Config{DevMemSize: 1 << 20, MaxTransfer: 64 << 10})
	e := open(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1})})
	other := open(t, engine.Config{Backend: memory.New()})
	b := alloc(t, e, 4096)
	freed := alloc(t, e, 4096)
	must(t, e.Free(freed))
	ob := alloc(t, other, 4096)
	cases := []struct {
		name string
		tr   engine.Transfer
		want error
	}{
		{"zero length", engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0)}, engine.ErrBadTransfer},
		{"negative length", engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: -1}, engine.ErrBadTransfer},
		{"other engine's block", engine.Transfer{Src: engine.Host(ob), Dst: engine.DeviceAt(0), Len: 64}, engine.ErrForeignBlock},
		{"zero block", engine.Transfer{Src: engine.Host(engine.Block{}), Dst: engine.DeviceAt(0), Len: 64}, engine.ErrForeignBlock},
		{"freed block", engine.Transfer{Src: engine.Host(freed), Dst: engine.DeviceAt(0), Len: 64}, engine.ErrFreedBlock},
		{"beyond block", engine.Transfer{Src: engine.HostAt(b, 4000), Dst: engine.DeviceAt(0), Len: 100}, engine.ErrOutOfBounds},
		{"negative offset", engine.Transfer{Src: engine.HostAt(b, -1), Dst: engine.DeviceAt(0), Len: 100}, engine.ErrOutOfBounds},
		{"beyond device memory", engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(1<<20 - 10), Len: 64}, engine.ErrOutOfBounds},
		{"device offset wraps", engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(^uint64(0) - 8), Len: 64}, engine.ErrOutOfBounds},
		{"device to host beyond block", engine.Transfer{Src: engine.DeviceAt(0), Dst: engine.HostAt(b, 1), Len: 4096}, engine.ErrOutOfBounds},
		{"over MAX_LEN", engine.Transfer{Src: engine.DeviceAt(0), Dst: engine.DeviceAt(1 << 19), Len: 128 << 10}, engine.ErrOutOfBounds},
		{"host to host", engine.Transfer{Src: engine.Host(b), Dst: engine.Host(b), Len: 64}, engine.ErrBadTransfer},
		{"to a file", engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(0), Len: 64}, engine.ErrBadTransfer},
		{"nowhere", engine.Transfer{Len: 64}, engine.ErrBadTransfer},
	}
	for _, c := range cases {
		if _, err := e.Submit(c.tr); !errors.Is(err, c.want) {
			t.Errorf("%s: Submit: %v, want %v", c.name, err, c.want)
		}
		if n, err := e.SubmitBatch([]engine.Transfer{{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 64}, c.tr}, nil); n != 1 || !errors.Is(err, c.want) {
			t.Errorf("%s: SubmitBatch: %d, %v, want 1, %v", c.name, n, err, c.want)
		}
	}
	if err := e.Free(freed); !errors.Is(err, engine.ErrFreedBlock) {
		t.Errorf("double free: %v", err)
	}
	if err := e.Free(ob); !errors.Is(err, engine.ErrForeignBlock) {
		t.Errorf("foreign free: %v", err)
	}
	if err := e.Free(engine.Block{}); !errors.Is(err, engine.ErrForeignBlock) {
		t.Errorf("zero block free: %v", err)
	}
	if err := e.Wait(context.Background(), 0); !errors.Is(err, engine.ErrUnknownID) {
		t.Errorf("Wait(0): %v", err)
	}
	oid, err := other.Submit(engine.Transfer{Src: engine.Host(ob), Dst: engine.Host(ob), Len: 64})
	must(t, err)
	if err := e.Wait(context.Background(), oid); !errors.Is(err, engine.ErrUnknownID) {
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
	e := open(t, engine.Config{Backend: memory.New(), QueueDepth: 2})
	b := alloc(t, e, 128)
	ctx := ctxT(t, 10*time.Second)
	first, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 64), Len: 64})
	must(t, err)
	must(t, e.Wait(ctx, first))
	for range 4 {
		id, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 64), Len: 64})
		must(t, err)
		must(t, e.Wait(ctx, id))
	}
	if err := e.Wait(ctx, first); !errors.Is(err, engine.ErrStaleID) {
		t.Fatalf("Wait(stale): %v", err)
	}
	if err := e.Wait(ctx, first+100); !errors.Is(err, engine.ErrUnknownID) {
		t.Fatalf("Wait(future): %v", err)
	}
}

// TestQueueFull: a stalled device fills the queue; Submit says so, the
// context variant waits, and after the stall is detected everything
// completes (the stalled transfer with ErrTimeout).
func TestQueueFull(t *testing.T) {
	dev := newMock(t, mock.Config{})
	must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultStall, Nth: 1}))
	e := open(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1, Timeout: 100 * time.Millisecond}), QueueDepth: 8})
	b := alloc(t, e, 64)
	var mu sync.Mutex
	results := map[uint64]error{}
	cb := func(r engine.Result) { mu.Lock(); results[r.User] = r.Err; mu.Unlock() }
	for i := range 8 {
		if _, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 64, Callback: cb, User: uint64(i)}); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	if _, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 64}); !errors.Is(err, engine.ErrQueueFull) {
		t.Fatalf("9th submit: %v, want ErrQueueFull", err)
	}
	if n, err := e.SubmitBatch(make([]engine.Transfer, 2), nil); n != 0 || !errors.Is(err, engine.ErrQueueFull) && !errors.Is(err, engine.ErrBadTransfer) {
		t.Fatalf("batch on a full queue: %d, %v", n, err)
	}
	short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := e.SubmitContext(short, engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 64}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SubmitContext on a stalled queue: %v", err)
	}
	// The stall is found after Timeout; recovery fails everything once.
	id, err := e.SubmitContext(ctxT(t, 20*time.Second), engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 64, Callback: cb, User: 8})
	must(t, err)
	must(t, e.Wait(ctxT(t, 20*time.Second), id))
	must(t, e.Drain(ctxT(t, 20*time.Second)))
	mu.Lock()
	defer mu.Unlock()
	if len(results) != 9 {
		t.Fatalf("%d callbacks, want 9", len(results))
	}
	if !errors.Is(results[0], engine.ErrTimeout) {
		t.Errorf("stalled transfer: %v, want ErrTimeout", results[0])
	}
	for i := uint64(1); i < 8; i++ {
		if !errors.Is(results[i], engine.ErrDevice) {
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
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		dev := newMock(t, mock.Config{})
		must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultLatency, Rate: 1, Latency: time.Second}))
		e, err := engine.Open(small(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1}), QueueDepth: 32, Mode: mode}))
		must(t, err)
		b := alloc(t, e, 64)
		counts := make([]atomic.Int32, 40)
		var canceled atomic.Int32
		cb := func(r engine.Result) {
			counts[r.User].Add(1)
			if errors.Is(r.Err, engine.ErrCanceled) {
				canceled.Add(1)
			}
		}
		ids := make([]engine.ID, 32)
		ts := make([]engine.Transfer, 32)
		for i := range ts {
			ts[i] = engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(i) * 64), Len: 64, Callback: cb, User: uint64(i)}
		}
		n, err := e.SubmitBatch(ts, ids)
		if n != 32 || err != nil {
			t.Fatalf("batch: %d, %v", n, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		must(t, e.Shutdown(ctx))
		cancel()
		must(t, e.Shutdown(context.Background())) // harmless
		for i := range 32 {
			if c := counts[i].Load(); c != 1 {
				t.Errorf("%v: transfer %d: %d callbacks", mode, i, c)
			}
			if err := e.Wait(context.Background(), ids[i]); !errors.Is(err, engine.ErrCanceled) && err != nil {
				t.Errorf("%v: Wait(%d) after Close: %v", mode, i, err)
			}
		}
		if canceled.Load() == 0 {
			t.Errorf("%v: nothing canceled", mode)
		}
		if _, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 64}); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("%v: Submit after Close: %v", mode, err)
		}
		if _, err := e.Alloc(64); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("%v: Alloc after Close: %v", mode, err)
		}
		if err := e.Free(b); !errors.Is(err, engine.ErrClosed) {
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
	e := open(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1}), Mode: engine.ModePoll})
	b := alloc(t, e, 4096)
	var got atomic.Int32
	for i := range 10 {
		_, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(i) * 4096), Len: 4096, Callback: func(engine.Result) { got.Add(1) }})
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
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		dev := newMock(t, mock.Config{})
		must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultReset, Nth: 1}))
		e := open(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1}), Mode: mode})
		b := alloc(t, e, 64)
		ctx := ctxT(t, 20*time.Second)
		id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 64})
		must(t, err)
		if err := e.Wait(ctx, id); !errors.Is(err, engine.ErrDevice) {
			t.Fatalf("%v: first transfer: %v, want ErrDevice (reset)", mode, err)
		}
		time.Sleep(20 * time.Millisecond) // the reaper sleeps
		for i := range 3 {
			id, err = e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 64})
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
