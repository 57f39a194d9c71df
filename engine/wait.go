package engine

// Waiting: Wait, Drain, WaitIdle and the blocked submitter's wait for room
// (waitFor reaps on the waiting goroutine, then parks), and the
// notifications that wake parked waiters.

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/hcomm-go/hcomm/backend"
)

// Wait waits until transfer id has completed and returns its error (nil on
// success), or ctx's error. An ID whose slot has since been reused returns
// ErrStaleID; an ID this engine never issued, ErrUnknownID.
func (e *Engine) Wait(ctx context.Context, id ID) error {
	if uint64(id)>>idPosBits != e.tag || uint64(id)&(1<<idPosBits-1) == 0 {
		return fmt.Errorf("engine: wait for %#x: %w", uint64(id), ErrUnknownID)
	}
	var res error
	err := e.waitFor(ctx, func() bool {
		done, r, err := e.lookup(id)
		if err != nil {
			res = err
			return true
		}
		if done {
			res = e.statusErr(backend.Status(r >> 32))
		}
		return done
	})
	if err != nil {
		return err
	}
	return res
}

// lookup reads id's slot: done and its result, not done, or an error for a
// stale or unknown ID. A seqlock of atomics: state, result, state again.
func (e *Engine) lookup(id ID) (done bool, res uint64, err error) {
	want := uint64(id) & (1<<idPosBits - 1) // pos+1, low 48 bits
	s := &e.slots[(want-1)&e.mask]
	for {
		s1 := s.state.Load()
		var r uint64 // backend.StatusOK unless the state says failed
		if s1&stateFailed != 0 {
			r = s.res.Load()
		}
		s2 := s.state.Load()
		if s1 != s2 {
			continue
		}
		v := s1 &^ stateFailed
		cur := (v >> 1) & (1<<idPosBits - 1)
		switch {
		case cur == want:
			return v&1 != 0, r, nil
		case cur > want || v>>1 > want:
			return false, 0, fmt.Errorf("engine: wait for %#x: %w", uint64(id), ErrStaleID)
		case want-1 < e.reserved():
			// Issued, and its slot still shows an older transfer: in
			// flight (fill does not mark it, see slot.state).
			return false, 0, nil
		default:
			return false, 0, fmt.Errorf("engine: wait for %#x: %w", uint64(id), ErrUnknownID)
		}
	}
}

// reserved is the staging ring's reservation counter: every position
// below it was handed to a submitter. (Not Head + Len: a release between
// those two loads makes the sum overshoot, and a Drain would wait for
// positions nobody reserved.)
func (e *Engine) reserved() uint64 { return e.stage.Tail() }

// Drain waits until every transfer submitted before the call has
// completed and its callback has run, or ctx ends.
func (e *Engine) Drain(ctx context.Context) error {
	// Every reservation made so far, published or not: a transfer whose
	// Submit returned may sit behind another submitter's reservation that
	// is not yet committed (Peek stops there). Submitters never block
	// between Reserve and Commit, so the frontier gets past it. Nothing
	// to forward first: every committed entry is drained by its
	// submitter's kick or by the completion round it was left to, and
	// the cycles of the wait below drain what a backend refused.
	return e.waitReleased(ctx, e.reserved())
}

// WaitIdle waits until no transfer is in flight — those submitted while it
// waits included (by callbacks, or by other goroutines), unlike Drain's —
// and every callback has run, or ctx ends. A pipeline whose callbacks
// submit the next transfers waits for its end with it. Like Wait, it reaps
// on the caller meanwhile; with callbacks that submit, on a file backend,
// each round's submissions start in the same system call as its wait for
// the next completions (see backend.LazyDoorbell).
func (e *Engine) WaitIdle(ctx context.Context) error {
	return e.waitFor(ctx, func() bool { return e.stage.Len() == 0 })
}

// waitReleased waits until the release frontier reaches target, ctx ends or
// the engine closes.
func (e *Engine) waitReleased(ctx context.Context, target uint64) error {
	return e.waitFor(ctx, func() bool { return e.released.Load() >= target })
}

// waitFor waits until cond holds, reaping on the caller meanwhile: the
// goroutine that waits is the one that polls (as SPDK's pollers and
// io_uring's completion-by-waiter do), so a synchronous Submit+Wait needs
// no hand-off to another thread. Poll mode: by polling. Reaper mode: the
// waiter runs completion cycles itself whenever no one else holds the
// reaping flag, yielding between them, for Config.Spin without progress;
// then it parks until the reaper, woken by the backend's completion
// signal, completes something (notify). A waiter never spins while the
// reaper reaps, so a busy engine does not burn two threads on two CPUs.
func (e *Engine) waitFor(ctx context.Context, cond func() bool) error {
	if e.cfg.Mode != ModeReaper {
		return e.waitLoop(ctx, cond)
	}
	e.reapingWaiters.Add(1)
	defer e.handBack() // also when a callback it ran panics
	return e.waitLoop(ctx, cond)
}

// handBack: a waiter leaving (it stops counting in reapingWaiters) hands
// the reaping back to a reaper that went to sleep without watching
// completions while it reaped — blind, with work still to come; or lazy,
// when that sleep would strand something (strandedLazy). Pairs with the
// reaper's look at those counts after it publishes such a sleep
// (reaperSleep, sleepLazy).
func (e *Engine) handBack() {
	e.reapingWaiters.Add(-1)
	switch e.sleeping.Load() {
	case sleepBlind:
		if e.pending() {
			e.wakeReaper(false)
		}
	case sleepLazy:
		if e.strandedLazy() {
			e.wakeLazy()
		}
	}
}

// wakeLazy cuts a lazy sleep short (at most one wake-up pending).
func (e *Engine) wakeLazy() {
	select {
	case e.lazyWake <- struct{}{}:
	default:
	}
}

// strandedLazy: a reaper asleep lazily (not watching completions) would
// leave something to its timer while no waiter reaps: on a batch-waited
// backend (standing aside, up to tick) a parked goroutine; on a device
// backend (beside waiters, lazyMin) transfers in flight — their callbacks
// may be what the leaving waiter's caller waits for next (a feeder fed by
// callbacks). Checked by a leaving waiter (handBack) and by the reaper
// after it publishes the sleep (sleepLazy).
func (e *Engine) strandedLazy() bool {
	if e.reapingWaiters.Load() != 0 {
		return false
	}
	if e.batchWaiter != nil {
		// Standing aside (up to tick), while a goroutine is parked.
		return e.waiters.Load() != 0
	}
	// Anything not done between the frontier and the reservations. A
	// lone transfer there whose slot is marked done is, in a synchronous
	// loop, the one the leaving waiter has just seen done (its slot is
	// marked before the frontier moves): rousing the reaper for it would
	// cost a wake-up per transfer. A lone one not done is somebody
	// else's (or the transfer of a waiter whose ctx ended): its callback
	// must not wait for the lazy timer.
	h := e.released.Load()
	switch n := e.reserved() - h; {
	case n == 0:
		return false
	case n > 1:
		return true
	default:
		return e.slots[h&e.mask].state.Load()&^stateFailed != (h+1)<<1|1
	}
}

// waitLoop is waitFor's loop.
func (e *Engine) waitLoop(ctx context.Context, cond func() bool) error {
	var since time.Time
	for i := 0; ; i++ {
		if cond() {
			return nil
		}
		if e.closing.Load() && e.isClosed() {
			return errClosedWhile("wait")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.cfg.Mode == ModePoll {
			// Poll; a backend that can be waited on in batches (file
			// I/O) is then waited on in the kernel, as in reaper mode,
			// rather than spun on: an application in ModePoll that
			// waits has nothing else to do on this goroutine.
			n, waited := e.pollWait(cond)
			if n == 0 && !waited && i > 16 {
				runtime.Gosched()
			}
			continue
		}
		if e.acquireReaping() {
			n, waited := 0, false
			if !e.stop.Load() {
				n, waited = e.cycleThenWait(cond)
			}
			e.releaseReaping()
			if n > 0 || waited {
				since = time.Time{}
				continue
			}
		}
		// Nothing reaped: spin (yielding) for Config.Spin, then park. The
		// clock is read only once the first cycle came back empty.
		if since.IsZero() {
			since = time.Now()
			runtime.Gosched()
			continue
		}
		if time.Since(since) < e.cfg.Spin {
			runtime.Gosched()
			continue
		}
		e.reapingWaiters.Add(-1)
		e.park(ctx, cond)
		e.reapingWaiters.Add(1)
		since = time.Time{}
	}
}

// pollWait is a ModePoll waiter's round: one completion cycle, like Poll,
// and when it completed nothing while transfers are outstanding in a
// batch-waited backend, a wait in the backend (waitBatch) until about half
// of them are done — holding the reaping flag, so a concurrent Poll
// returns 0 meanwhile, as it does beside any Poll in progress.
func (e *Engine) pollWait(cond func() bool) (n int, waited bool) {
	if !e.acquireReaping() {
		return 0, false
	}
	// A panicking callback lets the flag go (afterPanic), as in Poll.
	n, waited = e.cycleThenWait(cond)
	e.releaseReaping()
	return n, waited
}

// cycleThenWait is a waiter's completion round, under the reaping flag:
// one cycle, then — when it completed nothing while transfers are
// outstanding, or its callbacks submitted, and cond does not hold yet — a
// wait in a backend that can be waited on in batches (file I/O, tens of µs
// and more): block in the kernel rather than spin, as ReadAt would, and
// reap on waking; after callbacks that submitted, at once (the wait
// carries their doorbells). Without such a backend it only cycles.
func (e *Engine) cycleThenWait(cond func() bool) (n int, waited bool) {
	n, busy := e.cycle(e.batchWaiter != nil) // busy: computed before the callbacks ran
	if (n == 0 && busy || e.roundSubmitted()) && e.batchWaiter != nil && !cond() {
		waited = e.waitBatch()
	}
	return n, waited
}

// park blocks until the next notify (a completion cycle finished), ctx
// ends or the engine closes. The reaper is the one that wakes it: it
// sleeps on the backend's completion signal (and, without one, is woken
// by every submission), and a stall is noticed at its next timeout.
func (e *Engine) park(ctx context.Context, cond func() bool) {
	e.waiters.Add(1)
	defer e.waiters.Add(-1)
	if e.reapingWaiters.Load() == 0 {
		e.rouseReaper() // nobody else reaps for us
	}
	e.waitMu.Lock()
	ch := e.waitCh
	e.waitMu.Unlock()
	if cond() {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	case <-e.closedCh:
	}
}

// rouseReaper: a goroutine about to park (waiters already counts it, and
// no other waiter reaps for it) hands the reaping back to a reaper that
// sleeps without watching the backend's completion signal — blind (it
// went to sleep while a waiter reaped, and that waiter parks rather than
// leaving) or, on a batch-waited backend, lazy (it stood aside) — which
// would otherwise notice the
// completion the parked goroutine waits for only at its timeout (up to
// tick, 10 ms: a blocked SubmitContext loop on backend/nvme fell to a
// hundred I/Os a second). Pairs with the reaper's look at waiters and
// reapingWaiters after it publishes such a sleep (reaperSleep,
// sleepLazy): sequentially consistent atomics on both sides, so one of
// the two sees the other. Nothing when the reaper is awake or watches.
// While another waiter reaps, its cycles notify the parked one, and it
// hands back when it parks or leaves (handBack).
func (e *Engine) rouseReaper() {
	switch e.sleeping.Load() {
	case sleepBlind:
		e.wakeReaper(false)
	case sleepLazy:
		// Standing aside on a batch-waited backend: up to tick. Beside
		// a device's waiters the lazy sleep is lazyMin, and waking it
		// per park costs more than it saves: on a loaded 2-vCPU machine
		// the woken reaper's spin beside the waiters took the CPU the
		// device model needed, and 1% of synchronous DMA transfers then
		// took ~110 µs instead of ~3 µs (p99).
		if e.batchWaiter != nil {
			e.wakeLazy()
		}
	}
}

// pending says whether anything is staged, in the backend or completed
// and not yet delivered.
func (e *Engine) pending() bool {
	e.lock()
	p := e.ldLen > 0 || e.outstanding() > 0 || e.nextForward != e.head+uint64(e.stage.Len())
	e.unlock()
	return p
}

func (e *Engine) isClosed() bool {
	select {
	case <-e.closedCh:
		return true
	default:
		return false
	}
}

// notify wakes Wait, Drain and blocked submitters after completions.
// Costs one atomic load when nobody waits.
func (e *Engine) notify() {
	if e.waiters.Load() == 0 {
		return
	}
	e.waitMu.Lock()
	close(e.waitCh)
	e.waitCh = make(chan struct{})
	e.waitMu.Unlock()
}
