package engine_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// exactlyOnceTotal is how many transfers TestExactlyOnce moves: 10^6
// without -race (make test runs it that way too), 10^5 under -race.
func exactlyOnceTotal() int {
	switch {
	case testing.Short():
		return 20_000
	case raceEnabled:
		return 100_000
	}
	return 1_000_000
}

// TestExactlyOnce: many goroutines submit single transfers and batches,
// host→device and device→host, through the DMA and the CPU path, while
// vfio-mock injects error completions, added latency, a stall (found by
// the timeout) and a device reset mid-stream. Every callback must run
// exactly once, and the errors must account for the injected faults.
func TestExactlyOnce(t *testing.T) {
	total := exactlyOnceTotal()
	const submitters = 8
	dev := newMock(t, mock.Config{Seed: 42, DevMemSize: submitters << 16})
	for _, f := range []mock.Fault{
		{Kind: mock.FaultStall, Nth: uint64(total / 4)},
		{Kind: mock.FaultReset, Nth: uint64(total / 2)},
		{Kind: mock.FaultError, Rate: 1e-3},
		{Kind: mock.FaultLatency, Rate: 1e-4, Latency: 200 * time.Microsecond},
	} {
		must(t, dev.InjectFault(f))
	}
	// The stall is found after Timeout. Too short a Timeout turns a slow
	// moment of a loaded machine into a second (legitimate) timeout.
	e := open(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: 64, Timeout: 250 * time.Millisecond}), QueueDepth: 64})
	counts := make([]atomic.Uint32, total)
	var failed, timeouts, resets, injected atomic.Int64
	cb := func(r engine.Result) {
		counts[r.User].Add(1)
		switch {
		case r.Err == nil:
		case errors.Is(r.Err, engine.ErrTimeout):
			timeouts.Add(1)
		case errors.Is(r.Err, hdma.ErrDeviceReset):
			resets.Add(1)
		case errors.Is(r.Err, hdma.ErrDeviceError):
			injected.Add(1)
		default:
			failed.Add(1)
			t.Errorf("transfer %d: unexpected error %v", r.User, r.Err)
		}
	}
	ctx := ctxT(t, 5*time.Minute)
	var wg sync.WaitGroup
	per := total / submitters
	for g := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each submitter owns a host block and 64 KiB of device
			// memory, split so that no two transfers in flight touch the
			// same bytes from different goroutines: CPU-path writes at
			// 0, DMA writes at 16K, DMA reads from 32K.
			host := alloc(t, e, 64<<10)
			dbase := uint64(g) << 16
			var batch [8]engine.Transfer
			mk := func(i int) engine.Transfer {
				seq := uint64(g*per + i)
				switch i % 3 {
				case 0: // CPU path
					return engine.Transfer{Src: engine.HostAt(host, 48<<10), Dst: engine.DeviceAt(dbase), Len: 64, Callback: cb, User: seq}
				case 1:
					return engine.Transfer{Src: engine.HostAt(host, 0), Dst: engine.DeviceAt(dbase + 16<<10), Len: 512, Callback: cb, User: seq}
				default:
					return engine.Transfer{Src: engine.DeviceAt(dbase + 32<<10), Dst: engine.HostAt(host, 16<<10), Len: 512, Callback: cb, User: seq}
				}
			}
			for i := 0; i < per; {
				if i%5 == 0 && per-i >= len(batch) {
					for k := range batch {
						batch[k] = mk(i + k)
					}
					n, err := e.SubmitBatchContext(ctx, batch[:], nil)
					if err != nil {
						t.Errorf("submitter %d: batch at %d: %d, %v", g, i, n, err)
						return
					}
					i += n
					continue
				}
				if _, err := e.SubmitContext(ctx, mk(i)); err != nil {
					t.Errorf("submitter %d: transfer %d: %v", g, i, err)
					return
				}
				i++
			}
		}()
	}
	wg.Wait()
	must(t, e.Drain(ctx))
	n := per * submitters
	for i := range n {
		if c := counts[i].Load(); c != 1 {
			t.Fatalf("transfer %d: %d callbacks", i, c)
		}
	}
	st := e.Stats()
	mc := dev.Counters()
	t.Logf("%d transfers: %d device errors, %d timeouts, %d reset, %d recoveries; %d batches, %d doorbells (%.3f/transfer), %d syscalls; mock: %d injected errors, %d stalls, %d resets",
		n, injected.Load(), timeouts.Load(), resets.Load(), st.Recoveries, st.Batches, st.Doorbells,
		float64(st.Doorbells)/float64(n), st.Syscalls, mc.InjectedErrors, mc.InjectedStalls, mc.InjectedResets)
	if st.Completed != uint64(n) || st.InFlight != 0 {
		t.Errorf("stats: %d completed, %d in flight, want %d, 0", st.Completed, st.InFlight, n)
	}
	if uint64(injected.Load()) != mc.InjectedErrors || mc.InjectedErrors == 0 {
		t.Errorf("%d device-error callbacks for %d injected errors", injected.Load(), mc.InjectedErrors)
	}
	// One timeout for the injected stall; more only if the machine stalled
	// the mock for a whole Timeout (then each is still reported once).
	if timeouts.Load() < 1 || mc.InjectedStalls != 1 || mc.InjectedResets != 1 {
		t.Errorf("%d timeouts; mock: %d stalls, %d resets (want ≥1, 1, 1)", timeouts.Load(), mc.InjectedStalls, mc.InjectedResets)
	}
	if resets.Load() == 0 || st.Recoveries < 2 {
		t.Errorf("%d reset errors, %d recoveries: the reset and the stall should each fail transfers and be recovered", resets.Load(), st.Recoveries)
	}
	if st.Errors() != uint64(injected.Load()+timeouts.Load()+resets.Load()) {
		t.Errorf("stats count %d errors, callbacks saw %d", st.Errors(), injected.Load()+timeouts.Load()+resets.Load())
	}
	if mc.IOMMUFaults != 0 || mc.DevMemFaults != 0 || mc.BadDescriptors != 0 {
		t.Errorf("the device saw bad descriptors: %+v", mc)
	}
	if got := mc.Completions[model.StatusOK]; got == 0 {
		t.Errorf("no successful completions")
	}
}

// TestManySubmitters: 64 goroutines submit single transfers at once; all
// complete, and they share doorbells (fewer doorbells than transfers).
func TestManySubmitters(t *testing.T) {
	e := open(t, engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: -1}), QueueDepth: 256})
	const g, each = 64, 200
	var done atomic.Int64
	cb := func(engine.Result) { done.Add(1) }
	ctx := ctxT(t, time.Minute)
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := alloc(t, e, 64)
			for range each {
				if _, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(i) * 64), Len: 64, Callback: cb}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	must(t, e.Drain(ctx))
	if done.Load() != g*each {
		t.Fatalf("%d callbacks, want %d", done.Load(), g*each)
	}
	st := e.Stats()
	t.Logf("%d transfers, %d doorbells (%.3f per transfer)", st.Transfers, st.Doorbells, float64(st.Doorbells)/float64(st.Transfers))
	// Fewer, not "no more": one doorbell per transfer (no sharing at all
	// among 64 submitters) is what group commit exists to prevent.
	if st.Doorbells >= st.Transfers {
		t.Errorf("%d doorbells for %d transfers: no doorbell was shared", st.Doorbells, st.Transfers)
	}
}

var _ = context.Background
