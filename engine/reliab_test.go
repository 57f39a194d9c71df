package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// Regression tests for defects found under abuse. Each fails on
// the engine as it was before the fix: a wedged engine shows up here as a
// watchdog failure, not as a hung test.

// watchdog runs f and fails the test if it has not returned within d (the
// goroutine is left behind: the engine is wedged, which is the failure).
func watchdog(t *testing.T, d time.Duration, what string, f func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		t.Errorf("%s did not return within %v: the engine is wedged", what, d)
		return false
	}
}

// callPoll calls Poll and returns the value a callback panicked with.
func callPoll(e *engine.Engine) (n int, p any) {
	defer func() { p = recover() }()
	return e.Poll(), nil
}

// TestPanickingCallbackPoll: in poll mode a callback
// that panics propagates its panic out of Poll; the engine records that
// callback as run, delivers the rest of its batch on the next Poll, and
// stays usable: later transfers complete, Wait and Close return. Before the
// fix, the reaping flag stayed set: every later Poll returned 0, Wait ran
// out its deadline and Close spun for ever.
func TestPanickingCallbackPoll(t *testing.T) {
	e, err := engine.Open(small(t, engine.Config{Backend: memory.New(), Mode: engine.ModePoll, QueueDepth: 16}))
	must(t, err)
	b := alloc(t, e, 4096)
	const n = 8
	counts := make([]atomic.Int32, 2*n)
	cb := func(r engine.Result) {
		counts[r.User].Add(1)
		if r.User == 2 || r.User == 5 {
			panic(fmt.Sprintf("callback %d panics", r.User))
		}
	}
	ids := make([]engine.ID, n)
	for i := range n {
		id, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 2048), Len: 64, Callback: cb, User: uint64(i)})
		must(t, err)
		ids[i] = id
	}
	var panics []any
	ok := watchdog(t, 20*time.Second, "Poll after a panicking callback", func() {
		for ran := 0; ran < n; {
			if _, p := callPoll(e); p != nil {
				panics = append(panics, p)
			}
			ran = 0
			for i := range n {
				ran += int(counts[i].Load())
			}
		}
	})
	if !ok {
		return
	}
	if len(panics) != 2 || panics[0] != "callback 2 panics" || panics[1] != "callback 5 panics" {
		t.Errorf("Poll panicked with %v, want the two callbacks' values in order", panics)
	}
	for i, id := range ids {
		if err := e.Wait(ctxT(t, 10*time.Second), id); err != nil {
			t.Errorf("Wait(transfer %d) after the panics: %v", i, err)
		}
	}
	// Still usable: more transfers, completed through Wait (which polls).
	for i := n; i < 2*n; i++ {
		id, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 2048), Len: 64, Callback: cb, User: uint64(i)})
		must(t, err)
		must(t, e.Wait(ctxT(t, 10*time.Second), id))
	}
	watchdog(t, 20*time.Second, "Close after a panicking callback", func() { must(t, e.Close()) })
	for i := range counts {
		if c := counts[i].Load(); c != 1 {
			t.Errorf("transfer %d: %d callbacks, want 1", i, c)
		}
	}
}

// TestPanickingCallbackInShutdown: a callback that panics while Shutdown
// runs it (draining in poll mode, or canceling in either mode) does not
// leave the engine half-closed: Shutdown closes everything, runs every
// other callback once, then panics with the callback's value; a second
// Close returns nil.
func TestPanickingCallbackInShutdown(t *testing.T) {
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		t.Run(mode.String(), func(t *testing.T) {
			dev := newMock(t, mock.Config{})
			e, err := engine.Open(small(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1}), Mode: mode, QueueDepth: 16}))
			must(t, err)
			b := alloc(t, e, 4096)
			// Hold the device: every transfer is still in flight at
			// Close, so Close cancels them all on the caller.
			must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultStall, Nth: 1}))
			const n = 6
			counts := make([]atomic.Int32, n)
			cb := func(r engine.Result) {
				counts[r.User].Add(1)
				if r.User == 1 {
					panic("canceled callback panics")
				}
			}
			for i := range n {
				_, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.DeviceAt(uint64(i) * 64), Len: 64, Callback: cb, User: uint64(i)})
				must(t, err)
			}
			var p any
			watchdog(t, 20*time.Second, "Close with a panicking callback", func() {
				defer func() { p = recover() }()
				_ = e.Close()
			})
			if p != "canceled callback panics" {
				t.Errorf("Close panicked with %v, want the callback's value", p)
			}
			watchdog(t, 20*time.Second, "a second Close", func() {
				if err := e.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
			})
			for i := range counts {
				if c := counts[i].Load(); c != 1 {
					t.Errorf("transfer %d: %d callbacks, want 1", i, c)
				}
			}
			if st := e.Stats(); st.InFlight != 0 || st.Canceled+st.DeviceErrors+st.Timeouts != n {
				t.Errorf("after Close: InFlight %d, %d canceled/failed, want 0 and %d", st.InFlight, st.Errors(), n)
			}
			if _, err := e.Alloc(64); !errors.Is(err, engine.ErrClosed) {
				t.Errorf("Alloc after the panicking Close: %v, want ErrClosed", err)
			}
		})
	}
}

// TestShutdownBlockedCallback: Shutdown honours its
// context when a callback blocks. It returns when ctx ends with an error
// wrapping ctx's, the engine finishes closing when the callback returns,
// and every callback still runs exactly once. Before the fix Shutdown
// waited for the callback without looking at ctx. Close() from inside a
// callback (which used to deadlock on the reaper waiting for itself) is
// the same case.
func TestShutdownBlockedCallback(t *testing.T) {
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		t.Run(mode.String(), func(t *testing.T) {
			e, err := engine.Open(small(t, engine.Config{Backend: memory.New(), Mode: mode, QueueDepth: 8}))
			must(t, err)
			b := alloc(t, e, 4096)
			release := make(chan struct{})
			entered := make(chan struct{})
			const n = 4
			counts := make([]atomic.Int32, n)
			cb := func(r engine.Result) {
				counts[r.User].Add(1)
				if r.User == 0 {
					close(entered)
					<-release
				}
			}
			for i := range n {
				_, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 2048), Len: 64, Callback: cb, User: uint64(i)})
				must(t, err)
			}
			if mode == engine.ModePoll {
				go e.Poll() // the application's poller, stuck in the callback
			}
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatal("no callback ran")
			}
			// The callback is released 20 s from now at the latest; a
			// Shutdown that returns before that honoured its context.
			watchdogRelease := time.AfterFunc(20*time.Second, func() { close(release) })
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err = e.Shutdown(ctx)
			if !watchdogRelease.Stop() {
				t.Fatal("Shutdown returned only when the blocked callback did: it ignored its context")
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "callback") {
				t.Errorf("Shutdown with a blocked callback: %v, want an error naming the callback and wrapping DeadlineExceeded", err)
			}
			if err := e.Close(); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Close while the callback still blocks: %v, want Shutdown's error again", err)
			}
			if _, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 2048), Len: 64}); !errors.Is(err, engine.ErrClosed) {
				t.Errorf("Submit after Shutdown returned: %v, want ErrClosed", err)
			}
			close(release)
			watchdog(t, 20*time.Second, "Shutdown once the callback returned", func() {
				must(t, e.Shutdown(context.Background()))
			})
			for i := range counts {
				if c := counts[i].Load(); c != 1 {
					t.Errorf("transfer %d: %d callbacks, want 1", i, c)
				}
			}
		})
	}
}

// TestCloseInsideCallback: Close called from a callback (which the docs
// forbid, and which used to deadlock the reaper waiting for itself)
// returns, and the engine closes once the callback has returned.
func TestCloseInsideCallback(t *testing.T) {
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		t.Run(mode.String(), func(t *testing.T) {
			e, err := engine.Open(small(t, engine.Config{Backend: memory.New(), Mode: mode, QueueDepth: 8}))
			must(t, err)
			b := alloc(t, e, 4096)
			closeErr := make(chan error, 1)
			id, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 2048), Len: 64,
				Callback: func(engine.Result) { closeErr <- e.Close() }})
			must(t, err)
			if mode == engine.ModePoll {
				go func() { _ = e.Wait(context.Background(), id) }()
			}
			select {
			case err := <-closeErr:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Close inside a callback: %v, want an error wrapping context.Canceled", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Close inside a callback did not return: deadlock")
			}
			watchdog(t, 20*time.Second, "Shutdown after the callback returned", func() {
				must(t, e.Shutdown(context.Background()))
			})
		})
	}
}

// holdingBackend is a backend whose transfers stay outstanding until
// released, and which cannot take them back on Cancel (as the kernel
// cannot cancel file I/O a device never finishes).
type holdingBackend struct {
	reverseBackend
	free   atomic.Bool
	closed atomic.Bool
}

func (b *holdingBackend) Reap(out []backend.Completion) int {
	if !b.free.Load() {
		return 0
	}
	return b.reverseBackend.Reap(out)
}
func (b *holdingBackend) Cancel(out []backend.Completion) int { return b.Reap(out) }
func (b *holdingBackend) Close() error {
	if b.Outstanding() > 0 {
		panic("holdingBackend closed with transfers outstanding: the engine unmapped memory they use")
	}
	b.closed.Store(true)
	return nil
}

// TestShutdownBackendHolds: Shutdown honours its
// context when the backend cannot take transfers back: it returns with an
// error wrapping ctx's, every callback runs once with ErrCanceled, and the
// pool stays mapped (the backend still uses it) until the backend gives
// the transfers back; then the engine releases everything.
func TestShutdownBackendHolds(t *testing.T) {
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		t.Run(mode.String(), func(t *testing.T) {
			be := &holdingBackend{reverseBackend: *newReverse(1, 0)}
			e, err := engine.Open(small(t, engine.Config{Backend: be, Mode: mode, QueueDepth: 8}))
			must(t, err)
			b := alloc(t, e, 4096)
			const n = 4
			counts := make([]atomic.Int32, n)
			var canceled atomic.Int32
			for i := range n {
				_, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.DeviceAt(uint64(i) * 64), Len: 64, User: uint64(i),
					Callback: func(r engine.Result) {
						counts[r.User].Add(1)
						if errors.Is(r.Err, engine.ErrCanceled) {
							canceled.Add(1)
						}
					}})
				must(t, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			var serr error
			if !watchdog(t, 20*time.Second, "Shutdown with transfers the backend holds", func() { serr = e.Shutdown(ctx) }) {
				return
			}
			if !errors.Is(serr, context.DeadlineExceeded) || !strings.Contains(serr.Error(), "could not cancel") {
				t.Errorf("Shutdown: %v, want an error saying what the backend holds, wrapping DeadlineExceeded", serr)
			}
			if c := canceled.Load(); c != n {
				t.Errorf("%d of %d callbacks reported ErrCanceled", c, n)
			}
			if be.closed.Load() {
				t.Error("the backend was closed while it still held transfers")
			}
			be.free.Store(true)
			watchdog(t, 20*time.Second, "Shutdown once the backend let go", func() { must(t, e.Shutdown(context.Background())) })
			if !be.closed.Load() {
				t.Error("the backend was not closed once it let go")
			}
			for i := range counts {
				if c := counts[i].Load(); c != 1 {
					t.Errorf("transfer %d: %d callbacks, want 1", i, c)
				}
			}
		})
	}
}

// TestInFlightAfterClose: submissions refused after
// Close are not in flight.
func TestInFlightAfterClose(t *testing.T) {
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		e, err := engine.Open(small(t, engine.Config{Backend: memory.New(), Mode: mode, QueueDepth: 16}))
		must(t, err)
		b := alloc(t, e, 4096)
		must(t, e.Close())
		for range 10 {
			if _, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 2048), Len: 64}); !errors.Is(err, engine.ErrClosed) {
				t.Fatalf("%v: Submit after Close: %v", mode, err)
			}
		}
		ts := make([]engine.Transfer, 4)
		for i := range ts {
			ts[i] = engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 2048), Len: 64}
		}
		if _, err := e.SubmitBatch(ts, nil); !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("%v: SubmitBatch after Close: %v", mode, err)
		}
		if st := e.Stats(); st.InFlight != 0 {
			t.Errorf("%v: Stats().InFlight = %d after Close and 14 refused submissions, want 0", mode, st.InFlight)
		}
	}
}

// TestBytesAfterClose: Bytes of a block whose engine is
// closed is nil (its memory is unmapped), not a slice that faults.
func TestBytesAfterClose(t *testing.T) {
	if engine.Debug {
		t.Skip("built with -tags hcommdebug: TestBytesAfterCloseDebug checks the panic")
	}
	e, err := engine.Open(small(t, engine.Config{Backend: memory.New()}))
	must(t, err)
	b := alloc(t, e, 4096)
	if len(b.Bytes()) != 4096 {
		t.Fatalf("Bytes before Close: %d bytes", len(b.Bytes()))
	}
	must(t, e.Close())
	if got := b.Bytes(); got != nil {
		t.Errorf("Bytes after Close: %d bytes at %p, want nil (the pool is unmapped)", len(got), &got[0])
	}
}

// TestSmallDeviceMemory: device memory smaller than one
// device allocation is refused at Open, not at the first AllocDevice.
func TestSmallDeviceMemory(t *testing.T) {
	for _, c := range []struct {
		devMem, align int
		ok            bool
	}{
		{32, 0, false},
		{63, 8, false},
		{64, 8, true},
		{4096, 8192, false},
		{8192, 8192, true},
	} {
		dev := newMock(t, mock.Config{DevMemSize: c.devMem})
		e, err := engine.Open(small(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1}), Alignment: c.align}))
		if c.ok {
			if err != nil {
				t.Errorf("device memory %d, Alignment %d: %v", c.devMem, c.align, err)
				continue
			}
			if _, err := e.AllocDevice(1); err != nil {
				t.Errorf("device memory %d, Alignment %d: AllocDevice(1): %v", c.devMem, c.align, err)
			}
			must(t, e.Close())
			continue
		}
		if !errors.Is(err, engine.ErrBadConfig) || !strings.Contains(err.Error(), "device memory") {
			t.Errorf("device memory %d, Alignment %d: Open: %v, want ErrBadConfig naming the device memory", c.devMem, c.align, err)
			if err == nil {
				e.Close()
			}
		}
	}
}
