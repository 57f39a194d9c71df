package engine_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// goid is the calling goroutine's ID (from its stack header).
func goid() string {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	return string(s[:bytes.IndexByte(s, ' ')])
}

// TestWaiterReapsOwn: in the default mode a goroutine that Submits and then
// Waits completes its own transfer — the callback runs on it, not on the
// reaper — so a synchronous transfer needs no hand-off between threads. A
// reaper that kept cycling beside the waiter won those completions and the
// waiter then waited for it (2.6 µs instead of 0.25 µs per 4 KiB transfer
// on vfio-mock). Spin is long so that scheduling delays on a loaded
// machine cannot let the reaper's stand-back lapse between transfers.
func TestWaiterReapsOwn(t *testing.T) {
	tests := []struct {
		name string
		cpu  int
	}{
		{"cpu-path", 1 << 16}, // completes at Submit (Inline), delivered by a cycle
		{"dma", -1},           // the device completes it
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := open(t, engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: tt.cpu}), Spin: time.Second})
			b := alloc(t, e, 4096)
			me := goid()
			// Until the reaper has seen the waiter's first cycles (it
			// looks between its own), it may take a few: seen up to the
			// 21st transfer.
			const n, warmUp = 2000, 200
			onWaiter := 0
			ctx := ctxT(t, 30*time.Second)
			for i := range n {
				var ran string
				id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096,
					Callback: func(engine.Result) { ran = goid() }})
				must(t, err)
				must(t, e.Wait(ctx, id))
				if ran == "" {
					t.Fatalf("transfer %d: Wait returned before its callback ran", i)
				}
				if ran == me && i >= warmUp {
					onWaiter++
				}
			}
			if onWaiter != n-warmUp {
				t.Errorf("%d of the %d callbacks after the first %d ran on the waiting goroutine, want all", onWaiter, n-warmUp, warmUp)
			}
		})
	}
}

// TestReaperSleepsBesideWaiter: while a goroutine keeps waiting and
// reaping for itself (the DMA path: the device completes each transfer),
// the reaper stands aside asleep rather than yielding in a loop (a busy
// thread beside the waiter's, on a 2-CPU machine the last CPU); once the
// waiter is gone, the reaper delivers a callback that nobody waits on.
func TestReaperSleepsBesideWaiter(t *testing.T) {
	e := open(t, engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: -1})})
	b := alloc(t, e, 4096)
	ctx := ctxT(t, 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	aside := false
	for i := 0; !aside; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d synchronous transfers the reaper never stood aside asleep", i)
		}
		id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096})
		must(t, err)
		must(t, e.Wait(ctx, id))
		aside = e.ReaperStandsAside()
	}
	done := make(chan struct{})
	_, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096,
		Callback: func(engine.Result) { close(done) }})
	must(t, err)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the callback of a transfer nobody waits on never ran")
	}
}

// TestPollYields: a goroutine that only polls yields to the Go scheduler
// every yieldEvery, so that the runtime's monitor never finds it on one
// scheduling tick for 10 ms — inside a backend's system call that would
// put the monitor back to polling every 20 µs (docs/engine.md, "Poll loops
// and the runtime's monitor"). Without the yield LastYield stays zero.
func TestPollYields(t *testing.T) {
	e := open(t, engine.Config{Mode: engine.ModePoll})
	b := alloc(t, e, 4096)
	deadline := time.Now().Add(20 * time.Second)
	var seen []time.Time
	for len(seen) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("a poll loop of 20 s yielded %d times, want 3 (every 8 ms)", len(seen))
		}
		// Something to reap now and then, as a real poll loop has.
		if _, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096}); err != nil && !errors.Is(err, engine.ErrQueueFull) {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			e.Poll()
		}
		if y := e.LastYield(); !y.IsZero() && (len(seen) == 0 || !y.Equal(seen[len(seen)-1])) {
			seen = append(seen, y)
		}
	}
	for i := 1; i < len(seen); i++ {
		if gap := seen[i].Sub(seen[i-1]); gap < 8*time.Millisecond {
			t.Errorf("yields %v apart, want at least yieldEvery (8 ms)", gap)
		}
	}
}

// TestQuietInlineDoneAtSubmit: in the default mode a transfer its
// submitter executes (the CPU path into device memory) with no callback is
// done when Submit returns: a Wait finds it done without a completion round
// (even with its context already ended), Stats counts it completed, and
// the device holds its bytes. The exception is documented: a submitter
// that finds another goroutine draining (the reaper's cycle holds the
// owner flag a moment) leaves its entry to that goroutine, which completes
// it moments later; a Wait with an ended context then reports the context,
// and one with a live context finds it done. That may happen to a few of
// the transfers (the reaper cycles right after Open; once, in a TCG guest,
// to the first), not to a tenth of them; without the drain's marking it
// happens to every one. With a callback it goes through a completion
// round, whose callback runs once.
func TestQuietInlineDoneAtSubmit(t *testing.T) {
	m, err := mock.New(mock.Config{Logger: quiet()})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	e := open(t, engine.Config{Backend: hdmaBE(t, m, hdmadev.Config{CPUThreshold: 1 << 16})})
	dev, err := m.Region(vfio.RegionBAR2)
	must(t, err)
	b := alloc(t, e, 4096)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	const n = 1000
	left := 0 // transfers left to another goroutine's drain
	for i := range n {
		for j := range b.Bytes() {
			b.Bytes()[j] = byte(i + j)
		}
		off := i % 16 * 4096
		id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(off)), Len: 4096})
		must(t, err)
		if err := e.Wait(ended, id); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("transfer %d: Wait with an ended context: %v, want nil (done at Submit) or context.Canceled", i, err)
			}
			left++
			must(t, e.Wait(ctxT(t, 10*time.Second), id))
		}
		if !bytes.Equal(dev.Mapped()[off:off+4096], b.Bytes()) {
			t.Fatalf("transfer %d: device memory does not hold the block's bytes", i)
		}
	}
	if left > n/10 {
		t.Errorf("%d of %d transfers not done when Submit returned, want at most %d", left, n, n/10)
	} else if left > 0 {
		t.Logf("%d of %d transfers left to another goroutine's drain", left, n)
	}
	if st := e.Stats(); st.Completed < n {
		t.Errorf("Stats.Completed = %d after %d transfers done at Submit", st.Completed, n)
	}
	ran := 0
	id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096,
		Callback: func(engine.Result) { ran++ }})
	must(t, err)
	must(t, e.Wait(ctxT(t, 10*time.Second), id))
	if ran != 1 {
		t.Errorf("callback ran %d times, want 1", ran)
	}
}

// TestParkedWaiterRousesReaper: a goroutine that waits for a slow device
// reaps, finds nothing, then parks; the reaper, which went to sleep while
// that goroutine held the reaping flag, sleeps without watching the
// device's completion signal (or stands aside asleep). Parking hands the
// reaping back to it. Left asleep, it would notice the completion only at
// its timeout, which the test sets to an hour, so each missed hand-off
// shows as a Wait that runs into its deadline. With Spin short the
// waiter parks on most transfers (the device takes 300 µs each).
func TestParkedWaiterRousesReaper(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spin  time.Duration
		batch int
	}{
		{"submit+wait", 5 * time.Microsecond, 1},
		{"batch+wait", 5 * time.Microsecond, 8},
		{"no-spin", -1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := mock.New(mock.Config{Logger: quiet()})
			must(t, err)
			t.Cleanup(func() { m.Close() })
			must(t, m.InjectFault(mock.Fault{Kind: mock.FaultLatency, Rate: 1, Latency: 300 * time.Microsecond}))
			e := open(t, engine.Config{Spin: tt.spin, Backend: hdmaBE(t, m, hdmadev.Config{CPUThreshold: -1})})
			e.SetReaperTick(time.Hour)
			b := alloc(t, e, 4096)
			ts := make([]engine.Transfer, tt.batch)
			for i := range ts {
				ts[i] = engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(i) * 4096), Len: 4096}
			}
			ids := make([]engine.ID, tt.batch)
			start := time.Now()
			deadline := start.Add(5 * time.Second)
			rounds := 0
			for ; rounds < 1000 && time.Now().Before(deadline); rounds++ {
				if _, err := e.SubmitBatch(ts, ids); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := e.Wait(ctx, ids[len(ids)-1])
				cancel()
				if err != nil {
					t.Fatalf("round %d: Wait: %v (a parked waiter left to a reaper asleep until its timeout)", rounds, err)
				}
			}
			t.Logf("%d rounds in %v", rounds, time.Since(start))
			if rounds < 100 {
				t.Fatalf("only %d rounds in 5 s", rounds)
			}
		})
	}
}

// TestWaiterLeavesLazyReaper: a goroutine waits for one late in a row of
// transfers that complete one after another, reaping (it finds one within
// every Spin, so it never parks); the reaper stands beside it and then
// sleeps lazily without watching the device. When the waiter leaves with
// the rest of the row in flight, it hands the reaping back: otherwise
// their callbacks wait for the reaper's timer (1 ms, which the test
// stretches to an hour: a missed hand-off is a hang).
func TestWaiterLeavesLazyReaper(t *testing.T) {
	m, err := mock.New(mock.Config{Logger: quiet()})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	must(t, m.InjectFault(mock.Fault{Kind: mock.FaultLatency, Rate: 1, Latency: 200 * time.Microsecond}))
	// Spin far longer than a transfer takes (the device model's timer
	// makes 200 µs about 1–2 ms, a few more under TCG): the waiter makes
	// progress within every Spin and never parks; it waits for the 48th
	// of 64, longer than a Spin, so the reaper, standing beside it for a
	// Spin, goes to sleep meanwhile.
	// The lazy sleep stretched to 20 s, four times the 5 s the test
	// allows the callbacks after the waiter left: a missed hand-back
	// shows as a failure. A waiter that does park (a machine so loaded
	// that a transfer took longer than the Spin) is not woken beside a
	// device's lazy reaper and waits for that sleep: slow, not a failure.
	e := open(t, engine.Config{Spin: 20 * time.Millisecond, Backend: hdmaBE(t, m, hdmadev.Config{CPUThreshold: -1})})
	e.SetReaperLazy(20 * time.Second)
	b := alloc(t, e, 4096)
	const n = 64
	// Which transfer the waiter waits for: with the 48th, it leaves
	// a dozen or more in flight; with the 63rd, usually exactly one —
	// not its own, and not done (a lone transfer left behind is not
	// always the waiter's).
	for _, waitFor := range []int{3 * n / 4, n - 2} {
		for round := range 10 {
			var ran atomic.Int32
			ids := make([]engine.ID, n)
			for i := range ids {
				id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096,
					Callback: func(engine.Result) { ran.Add(1) }})
				must(t, err)
				ids[i] = id
			}
			must(t, e.Wait(ctxT(t, 5*time.Minute), ids[waitFor]))
			deadline := time.Now().Add(5 * time.Second)
			for ran.Load() < n {
				if time.Now().After(deadline) {
					t.Fatalf("waiting for #%d, round %d: %d of %d callbacks ran in 5 s after the waiter left (the reaper asleep without watching the device)", waitFor, round, ran.Load(), n)
				}
				time.Sleep(100 * time.Microsecond)
			}
			// The last callback has run; its slot is released just
			// after (the frontier moves once the callback returned):
			// the next round's 64 Submits need all of them.
			must(t, e.Drain(ctxT(t, 10*time.Second)))
		}
	}
}

// TestReaperGatesInterrupts: the reaper turns the device's completion
// signal off while it is awake and on before it sleeps on it, looking at
// the completions once more in between (backend.InterruptGate).
//
// Callbacks with nobody waiting, submitted at random moments so that
// completions land while the reaper is awake, as it turns the signal back
// on, and while it sleeps: with the reaper's timeout an hour, a completion
// neither its look nor a signal caught shows as callbacks that do not run.
// Then a loop of Submit and Wait, the waiter reaping for itself: the
// reaper stands beside it with the signal off, and the device raises
// (almost) no interrupt, where it raised one per transfer before.
func TestReaperGatesInterrupts(t *testing.T) {
	m, err := mock.New(mock.Config{Logger: quiet()})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	// No spin: the reaper goes back to sleep as soon as a cycle finds
	// nothing, so completions often land just as it does.
	// The reaper's timeouts an hour (with transfers outstanding) and half
	// an hour (the backend's Timeout halved, without).
	e := open(t, engine.Config{Spin: -1, Backend: hdmaBE(t, m, hdmadev.Config{CPUThreshold: -1, Timeout: time.Hour})})
	e.SetReaperTick(time.Hour)
	b := alloc(t, e, 4096)
	var ran atomic.Int64
	cb := func(engine.Result) { ran.Add(1) }
	rng := uint64(1)
	next := func(n uint64) uint64 { // xorshift
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return rng % n
	}
	submitted := int64(0)
	for round := range 300 {
		for range 1 + next(3) {
			_, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096, Callback: cb})
			must(t, err)
			submitted++
			if d := next(200); d > 100 {
				time.Sleep(time.Duration(d-100) * time.Microsecond)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for ran.Load() < submitted {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d callbacks ran in 5 s (a completion left to the reaper's timeout of an hour)", round, ran.Load(), submitted)
			}
			time.Sleep(20 * time.Microsecond)
		}
		// Sometimes let the reaper go to sleep before the next round.
		if next(4) == 0 {
			time.Sleep(time.Duration(next(8)) * time.Millisecond)
		}
	}

	// A Spin far longer than a transfer: the waiter never parks (a
	// parked waiter needs the reaper asleep on the signal).
	m2, err := mock.New(mock.Config{Logger: quiet()})
	must(t, err)
	t.Cleanup(func() { m2.Close() })
	e2 := open(t, engine.Config{Spin: 5 * time.Millisecond, Backend: hdmaBE(t, m2, hdmadev.Config{CPUThreshold: -1})})
	b2 := alloc(t, e2, 4096)
	const n = 2000
	tr := engine.Transfer{Src: engine.Host(b2), Dst: engine.DeviceAt(0), Len: 4096}
	id, err := e2.Submit(tr)
	must(t, err)
	must(t, e2.Wait(ctxT(t, 10*time.Second), id))
	before := m2.Counters().MSIs
	for range n {
		id, err := e2.Submit(tr)
		must(t, err)
		must(t, e2.Wait(ctxT(t, 10*time.Second), id))
	}
	msis := m2.Counters().MSIs - before
	t.Logf("Submit+Wait: %d interrupts for %d transfers", msis, n)
	if msis > n/2 {
		t.Fatalf("Submit+Wait: the device raised %d interrupts for %d transfers, with the reaper standing beside the waiter", msis, n)
	}
}
