package engine

// Completion rounds: the reaping flag a goroutine holds while it runs
// cycles (the reaper, Poll, a waiter), the doorbells deferred inside a round
// (backend.LazyDoorbell) and the batched wait that carries them
// (backend.BatchWaiter).

import (
	"runtime"
	"time"
)

// waitBatch blocks in the backend until about half of what is outstanding
// has completed (backend.BatchWaiter), and reports whether it waited. Called with
// the reaping flag held, so that completions are reaped by whoever waited.
func (e *Engine) waitBatch() bool {
	if e.batchWaiter == nil {
		return false
	}
	// The round's deferred doorbells go with the wait: from here on
	// submitters ring their own (inRound false), and the lock below waits
	// for one that read true to finish publishing, so the wait's
	// io_uring_enter carries everything deferred so far.
	e.lock()
	if e.deferrable != nil {
		e.drainLocked() // in the round still: deferred (FlushDeferred)
		e.inRound.Store(false)
		e.lazyPending.Store(false)
	}
	// Only while the other backends have nothing outstanding: their
	// completions would wait for this wait's end.
	out := e.first.be.Outstanding()
	if e.outstanding() != out {
		out = 0
	}
	e.unlock() // drains (at once) what was staged after the drain above
	if out == 0 {
		return false
	}
	e.engineSyscalls.Add(uint64(e.batchWaiter.WaitCompletions((out+1)/2, batchWait, e.tick())))
	// A goroutine that only ever waits here and reaps (WaitIdle over a
	// pipeline, a loop of Waits) never enters the Go scheduler: after
	// 10 ms on one scheduling tick the runtime's monitor preempts it
	// (tgkill, a signal) and, the P being in a system call, retakes the
	// P — and then polls every 20 µs again for a millisecond or more
	// (nanosleep), waking threads (futex): 0.02–0.05 system calls per
	// I/O in hcomm-bench's file pipeline. A yield every yieldEvery gives
	// the monitor its new tick for the price of one idle-P wake-up.
	if e.yieldDue() {
		runtime.Gosched()
	}
	if e.deferrable != nil {
		// What the wait did not take (its enter failed, or found
		// fewer than it was told): start it now.
		e.lock()
		e.deferrable.SubmitDeferred()
		e.unlock()
	}
	return true
}

// yieldEvery is how often a goroutine that waits in the backend yields
// (waitBatch): well within the runtime's 10 ms preemption slice.
const yieldEvery = 8 * time.Millisecond

// roundSubmitted says whether the current completion round has
// submissions to start: deferred doorbells, or entries staged for the
// holder to drain (dirty).
func (e *Engine) roundSubmitted() bool {
	return e.lazyPending.Load() || e.deferrable != nil && e.dirty.Load() != 0
}

// acquireReaping takes the reaping flag for a completion round.
func (e *Engine) acquireReaping() bool {
	if !e.reaping.CompareAndSwap(0, 1) {
		return false
	}
	if e.deferrable != nil {
		e.inRound.Store(true)
	}
	return true
}

// releaseReaping ends a completion round: doorbells deferred in it are
// rung (one system call, none when nothing was deferred or a wait carried
// it), then the reaping flag goes. A drain that read inRound true holds
// the owner flag while it publishes, so the lock here comes after it.
func (e *Engine) releaseReaping() {
	if e.deferrable != nil && e.inRound.Swap(false) {
		e.lazyPending.Store(false)
		e.lock()
		// What submitters staged in the round (they left it to us) goes
		// out now, with what was deferred: one Flush submits every
		// published SQE; SubmitDeferred covers a round with nothing new.
		e.drainLocked()
		e.deferrable.SubmitDeferred()
		e.unlock()
	}
	if e.cfg.Mode == ModePoll {
		// No reaper, and no parked waiters (ModePoll's poll): nobody
		// stores a word and then looks at this one (see below), so
		// release ordering is enough — one locked instruction fewer
		// per Poll.
		e.reaping.StoreRelease(0)
		return
	}
	// Sequentially consistent: a waiter that leaves stores 0 here and
	// then reads e.sleeping (waitFor); the reaper going to sleep stores
	// e.sleeping and then tries this flag. One of the two must see the
	// other, or the reaper sleeps blind while work is left.
	e.reaping.Store(0)
}
