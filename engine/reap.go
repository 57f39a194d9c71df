package engine

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
)

// cycle is one round of the completion side, shared by the reaper and
// Poll: under the owner flag it forwards what is staged, collects finished
// transfers and handles stalls; then, without the flag, it runs their
// callbacks; then it moves the release frontier. It returns how many
// transfers completed and whether any is still outstanding in the backend.
func (e *Engine) cycle() (n int, busy bool) {
	if len(e.pend) > 0 {
		// The rest of a batch whose callback panicked (see complete):
		// already collected and counted, delivered before anything new.
		p := e.pend
		e.pend = nil
		e.cycling = true
		e.complete(p)
		e.cycling = false
		e.lock()
		e.advanceLocked()
		e.unlock()
		e.notify()
		return len(p), true
	}
	if !e.inReaper && e.cfg.Mode == ModeReaper {
		// For the reaper's spin (there is none in ModePoll, whose
		// Poll loops would pay a locked add each for nobody).
		e.waiterCycles.Add(1)
	}
	e.lock()
	if e.torn {
		e.unlock()
		return 0, false
	}
	e.drainLocked()
	n = e.collectLocked(e.batch)
	// Nothing finished: let the backend look for stalls and recover —
	// when there is something to look after: transfers in it, or staged
	// ones it refused (a backend that needs recovery refuses). An idle
	// poll loop (a ping-pong waiting for its peer) then makes one
	// backend call per Poll, not three.
	if n == 0 {
		refused := e.fwd != e.head+uint64(e.stage.Len())
		checked := false
		e.forEach(func(m *member) {
			if refused || m.be.Outstanding() > 0 {
				m.be.Check()
				checked = true
			}
		})
		if checked {
			n = e.collectLocked(e.batch) // what a recovery failed
		}
	}
	count, bytes, errs := e.countLocked(e.batch[:n])
	if count > 0 {
		e.ctr.reapBatches++
	}
	// Busy: something may finish without a doorbell or a wake-up (in the
	// backend, or staged and not yet accepted by it): sleep with a timeout.
	busy = e.outstanding() > 0 || e.fwd != e.head+uint64(e.stage.Len())
	e.unlock()
	if n == 0 {
		return 0, busy
	}
	if count > 0 {
		hookReapBatch(uint32(count), bytes, errs)
	}
	e.cycling = true
	e.complete(e.batch[:n])
	e.cycling = false
	e.lock()
	e.advanceLocked()
	e.unlock()
	e.notify()
	return n, busy
}

// countLocked counts finished transfers into the statistics and returns
// how many there are, their bytes and how many failed. No-ops (reservations
// made after Close began, the rest of a batch after an invalid entry) go
// through the completion path to free their slots but are not transfers:
// they are not counted, as drainLocked does not count them either. A
// successful completion that moved fewer bytes than asked becomes
// backend.StatusShort here, for every backend. Owner only (the entries are not yet
// released).
func (e *Engine) countLocked(batch []backend.Completion) (count int, bytes uint64, errs uint32) {
	for i := range batch {
		c := &batch[i]
		ent := &e.ents[c.Tag&e.mask]
		if ent.done == opNoop {
			c.Status = statusNoop
			continue
		}
		if c.Status == backend.StatusOK && c.N != ent.op.Len {
			c.Status = backend.StatusShort
		}
		c.Status = tagStatus(c.Status, ent.be)
		count++
		bytes += uint64(c.N)
		if c.Status != backend.StatusOK {
			errs++
			e.ctr.countErr(e.statusErr(c.Status))
		}
	}
	e.ctr.completed += uint64(count)
	return count, bytes, errs
}

// complete stores each result and runs each callback, exactly once, then
// marks the slot done (which lets the frontier release it).
//
// A callback that panics has run: its slot is marked done with its result,
// the rest of the batch is kept in e.pend for the next cycle (or Close),
// and the frontier moves on; then the panic goes on up to whoever called
// Poll (or crashes the program on the reaper goroutine, as any panic on a
// goroutine does). The engine is never left half-way through a batch.
func (e *Engine) complete(batch []backend.Completion) {
	// inCallback tells Shutdown that the completion side is running
	// application code, which may block: Shutdown waits for it only until
	// its context ends. Two stores per batch, not per transfer.
	e.inCallback.Store(true)
	finished := false
	defer func() {
		if !finished {
			e.afterPanic(batch)
		}
		e.inCallback.Store(false)
	}()
	for i, c := range batch {
		e.cbAt = i
		s := &e.slots[c.Tag&e.mask]
		if c.Status != backend.StatusOK {
			s.res.Store(resOf(c)) // before the done state (seqlock)
		}
		if s.reg != 0 {
			e.releaseRegistered(s)
		}
		if cb := s.cb; cb != nil {
			s.cb = nil
			e.cbSeq.Add(1) // which callback runs: Shutdown tells a blocked one from many short ones
			cb(Result{ID: e.makeID(c.Tag), User: s.user, N: int(c.N), Err: e.statusErr(c.Status)})
		}
		// Release: the result and the callback's effects happen before
		// a waiter or the frontier sees the slot done. Release ordering
		// is all this store needs (a plain MOV on amd64, where the
		// sequentially consistent XCHG cost ~5 ns per transfer): nothing
		// in the loop loads a word a waiter stores, and before notify
		// reads e.waiters (Dekker's pattern with a waiter that counts
		// itself, then looks at the state) come the deferred
		// inCallback.Store and the owner flag's CAS, both full barriers.
		s.state.StoreRelease(doneState(c.Tag, c.Status))
	}
	finished = true
}

// afterPanic repairs the completion side after batch[e.cbAt]'s callback
// panicked: that transfer is done (its callback ran, once), the rest of the
// batch waits in e.pend for the next cycle, and the release frontier moves
// over what is done. Inside a cycle it lets the reaping flag go, which
// whoever ran the cycle (Poll, a waiter, the reaper) holds and, the panic
// going up past it, would not release.
func (e *Engine) afterPanic(batch []backend.Completion) {
	if e.cycling {
		e.cycling = false
		defer e.releaseReaping()
	}
	i := e.cbAt
	c := batch[i]
	e.slots[c.Tag&e.mask].state.Store(doneState(c.Tag, c.Status))
	// batch may be e.pend's own array: append moves the tail down (memmove).
	e.pend = append(e.pendBuf[:0], batch[i+1:]...)
	if len(e.pend) == 0 {
		e.pend = nil
	}
	e.lock()
	e.advanceLocked()
	e.unlock()
	e.notify()
}

// Poll reaps completions and runs their callbacks on the caller; it
// returns how many completed. It never blocks (unless a callback does). In
// ModeReaper it does nothing (the reaper polls). Concurrent Polls do not
// wait for each other: all but one return 0.
//
// A callback that panics: the panic propagates out of Poll (or out of the
// Wait, Drain, SubmitContext or Shutdown that polled) once the engine has
// recorded that callback as run; the callbacks after it in the same batch
// run on the next Poll. The engine stays usable.
func (e *Engine) Poll() int {
	if e.cfg.Mode != ModePoll || !e.acquireReaping() {
		return 0
	}
	n, _ := e.cycle() // a panicking callback lets the flag go (afterPanic)
	e.polls++
	yield := e.polls%pollClockEvery == 0 && e.yieldDue()
	e.releaseReaping()
	if yield {
		// A poll loop never enters the Go scheduler by itself. After
		// 10 ms on one scheduling tick the runtime's monitor (sysmon)
		// preempts it, and when that finds the loop inside a system call
		// or a call into C (a backend that progresses UCX over tcp does
		// both in every Poll) it retakes the P and starts over at its
		// shortest sleep: a nanosleep(20 µs) and a wake-up, for a
		// millisecond and more, every 10 ms — on a machine whose CPUs
		// are all polling, each wake-up takes one of them from a poll
		// loop (docs/engine.md, "Poll loops and the runtime's monitor").
		// A yield every yieldEvery gives the monitor its new tick first,
		// after the flag is let go (another goroutine may take it).
		runtime.Gosched()
	}
	return n
}

// pollClockEvery: Poll reads the clock (yieldDue) once every this many
// calls; an empty Poll is tens of nanoseconds, a clock read about as much.
const pollClockEvery = 64

// yieldDue reports, under the reaping flag, whether yieldEvery passed
// since the last yield of a goroutine holding it (Poll, waitBatch), and
// if so starts the next period.
func (e *Engine) yieldDue() bool {
	now := time.Now()
	if now.Sub(e.yieldAt) <= yieldEvery {
		return false
	}
	e.yieldAt = now
	return true
}

// reaper is the background completion goroutine (ModeReaper). It reaps
// what nobody waiting reaps: callbacks of transfers nobody waits on, and
// completions that arrive while waiters are parked. A goroutine blocked in
// Wait, Drain or SubmitContext reaps for itself (waitFor), so the reaper
// takes the reaping flag like they do and steps aside when one of them
// holds it — on a backend waited on in batches (the file backend) it then
// sleeps blind for a while, see sleepLazy. It spins for Config.Spin after the last completion it reaped
// itself (a wake-up that found the work already done by a waiter does not
// restart the spin), then sleeps until the backend signals completions
// (device interrupt eventfd, io_uring fd) or a submitter wakes it for
// inline completions; while it sleeps it wakes every tick with transfers
// outstanding, and every half Timeout without, so that a stall is noticed
// without a wake-up per submission.
func (e *Engine) reaper(ready chan<- struct{}) {
	defer close(e.done)
	sl := e.newSleeper()
	close(ready)
	defer func() { sl.close() }()
	// On the way out, take the reaping flag for good: a waiter reaping
	// inline finishes the cycle it is in (completing what it collected),
	// and no later one starts, so Close's cancelOutstanding is the only
	// one left to complete what is open.
	defer func() {
		for i := 0; !e.reaping.CompareAndSwap(0, 1); i++ {
			backoff(i) // a waiter's callback may block: do not spin
		}
	}()
	tick := e.tick()
	// Idle, the reaper needs a timeout only to notice a stall of work
	// submitted while it slept (submissions do not wake it): half the
	// backends' shortest Timeout is early enough; without a Timeout, none.
	idleTick := e.timeout() / 2
	bw := e.bw
	last := time.Now()
	lazy := lazyMin
	lazyTimer := time.NewTimer(time.Hour)
	lazyTimer.Stop()
	seen := e.waiterCycles.Load()
	spinSeen, lastWaiter := seen, time.Time{}
	var standSince time.Time // when the reaper began to stand back
	for !e.stop.Load() {
		if e.sleepStale.Load() {
			// The backends changed (AddBackend, RemoveBackend): sleep
			// on the readiness fds of those there are now.
			sl.close()
			sl = e.newSleeper()
			tick, idleTick = e.tick(), e.timeout()/2
		}
		// Waiters reap for themselves (a synchronous Submit+Wait): while
		// one does, and within Spin of its last cycle, the reaper stays
		// awake — so submitters need not wake it — but takes no
		// completions from them: a reaper cycling beside a waiter wins
		// its completion, and the waiter then waits for the reaper to
		// publish it, a hand-off between threads (2.6 µs instead of
		// 0.25 µs per 4 KiB Submit+Wait on vfio-mock). Not for batch-waited
		// backends, where the reaper stands aside asleep (below).
		//
		// Standing back for a whole Spin (a loop that keeps waiting, or
		// a pipeline whose submitter reaps each time its queue fills),
		// the reaper sleeps (sleepLazy, lazyMin at a time) instead of
		// spinning: a thread that only yields is a busy thread, and
		// beside a busy waiter it left nothing of a 2-CPU machine to a
		// third — every wake-up of anything else then waited for a
		// scheduler tick (4 ms), in the middle of the waiter's work
		// (docs/engine.md, "The reaper beside waiters"). Not while
		// others are parked: they count on the reaper's cycles.
		if bw == nil && e.cfg.Spin > 0 {
			if w := e.waiterCycles.Load(); w != spinSeen {
				spinSeen, lastWaiter = w, time.Now()
			}
			if e.reapingWaiters.Load() > 0 || time.Since(lastWaiter) < e.cfg.Spin {
				if standSince.IsZero() {
					standSince = time.Now()
				} else if time.Since(standSince) >= e.cfg.Spin && e.waiters.Load() == 0 {
					e.sleepLazy(lazyTimer, lazyMin)
					continue
				}
				runtime.Gosched()
				continue
			}
			standSince = time.Time{}
		}
		n, busy, ok := e.reaperCycle()
		if n > 0 {
			last = time.Now()
			continue
		}
		// A waiter reaps (it holds the reaping flag, or ran a cycle since
		// our last look): stand aside (sleepLazy) — unless other waiters
		// are parked: they count on the reaper (or the reaping waiter's
		// cycles) to notify them, and the reaping one may leave first.
		if bw != nil && e.waiters.Load() == 0 && (!ok || busy && e.waiterCycles.Load() != seen) {
			seen = e.waiterCycles.Load()
			if e.sleepLazy(lazyTimer, lazy) {
				continue
			}
			if now := e.waiterCycles.Load(); now != seen {
				lazy = min(2*lazy, tick)
			} else {
				lazy = lazyMin
			}
			continue
		}
		// A backend that can be waited on in batches (the io_uring file
		// backend): with transfers outstanding, sleep in the kernel until
		// half of them are done (or batchWait passed with some done)
		// instead of spinning: one system call per batch and no CPU burnt
		// between completions.
		// Not while a waiter is parked: the reaper, holding the flag in
		// the kernel, would keep it parked (a wake-up per batch), where
		// asleep on the completion fd below it lets it reap again.
		if bw != nil && ok && busy && e.waiters.Load() == 0 && e.acquireReaping() {
			e.inReaper = true
			waited := e.waitBatch()
			e.inReaper = false
			e.releaseReaping()
			if waited {
				continue
			}
		}
		if e.cfg.Spin > 0 && time.Since(last) < e.cfg.Spin {
			runtime.Gosched()
			continue
		}
		// Going to sleep. Publish it first, then look once more: a
		// submitter that has something for the reaper after this look
		// sees sleepIdle and writes the wake eventfd (SC atomics: one of
		// the two sees the other). With transfers outstanding, or when a
		// waiter held the reaping flag (it may leave work behind), sleep
		// with the shorter timeout (sleepBusy), unless a waker got in.
		e.sleeping.Store(sleepIdle)
		n, busy, ok = e.reaperCycle()
		if n > 0 || e.stop.Load() {
			e.sleeping.Store(awake)
			last = time.Now()
			continue
		}
		timeout := idleTick
		if busy || !ok {
			// !ok: a waiter holds the reaping flag and reaps; sleep
			// without the completion fd (sleepBlind), and the waiter
			// wakes us when it leaves.
			state := uint32(sleepBusy)
			if !ok {
				state = sleepBlind
			}
			if !e.sleeping.CompareAndSwap(sleepIdle, state) {
				continue // woken meanwhile (the eventfd holds the wake-up too)
			}
			timeout = tick
		}
		sl.sleep(timeout, ok)
		e.sysc.Add(sl.syscalls())
		e.sleeping.Store(awake)
	}
}

// batchWait is how long the reaper lets a batch of completions grow once
// the first is ready: the most a callback waits for its neighbours.
const batchWait = 200 * time.Microsecond

// tick is how often a sleeping reaper (or a waiter blocked in the
// backend) looks again while transfers are outstanding: a quarter of the
// backend's Timeout, at most 10 ms.
func (e *Engine) tick() time.Duration {
	t := 10 * time.Millisecond
	if to := e.timeout(); to > 0 {
		t = min(to/4, t)
	}
	return t
}

// timeout is the shortest Timeout of the backends (0: none has one).
func (e *Engine) timeout() time.Duration {
	var t time.Duration
	e.forEach(func(m *member) {
		if to := m.desc.Timeout; to > 0 && (t == 0 || to < t) {
			t = to
		}
	})
	return t
}

// waitBatch blocks in the backend until about half of what is outstanding
// has completed (backend.BatchWaiter), and reports whether it waited. Called with
// the reaping flag held, so that completions are reaped by whoever waited.
func (e *Engine) waitBatch() bool {
	if e.bw == nil {
		return false
	}
	// The round's deferred doorbells go with the wait: from here on
	// submitters ring their own (inRound false), and the lock below waits
	// for one that read true to finish publishing, so the wait's
	// io_uring_enter carries everything deferred so far.
	e.lock()
	if e.lazy != nil {
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
	e.sysc.Add(uint64(e.bw.WaitCompletions((out+1)/2, batchWait, e.tick())))
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
	if e.lazy != nil {
		// What the wait did not take (its enter failed, or found
		// fewer than it was told): start it now.
		e.lock()
		e.lazy.SubmitDeferred()
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
	return e.lazyPending.Load() || e.lazy != nil && e.dirty.Load() != 0
}

// acquireReaping takes the reaping flag for a completion round.
func (e *Engine) acquireReaping() bool {
	if !e.reaping.CompareAndSwap(0, 1) {
		return false
	}
	if e.lazy != nil {
		e.inRound.Store(true)
	}
	return true
}

// releaseReaping ends a completion round: doorbells deferred in it are
// rung (one system call, none when nothing was deferred or a wait carried
// it), then the reaping flag goes. A drain that read inRound true holds
// the owner flag while it publishes, so the lock here comes after it.
func (e *Engine) releaseReaping() {
	if e.lazy != nil && e.inRound.Swap(false) {
		e.lazyPending.Store(false)
		e.lock()
		// What submitters staged in the round (they left it to us) goes
		// out now, with what was deferred: one Flush submits every
		// published SQE; SubmitDeferred covers a round with nothing new.
		e.drainLocked()
		e.lazy.SubmitDeferred()
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

// sleepLazy puts the reaper to sleep for d without watching the backend's
// completion fd, while waiters reap for themselves (a backend waited on in
// batches: a waiter blocks in it until half its I/O is done). Spinning, or
// waiting in the backend, the reaper would only race the waiter for the
// same completions; sleeping on the completion fd it would wake per
// completion (the fd stays readable until the waiter reaps: 2–3 system
// calls per I/O); sleeping blind until the waiter wakes it on leaving
// (sleepBlind) costs an eventfd write, a wake-up and a thread hand-off per
// round of a loop that submits and waits, with the Go runtime's futex
// calls around them (docs/engine.md, "File backend"). So the
// waiter does not wake it (sleepLazy is not sleepBlind): it sleeps lazyMin,
// doubling while waiters keep reaping, up to tick, and takes over when a
// sleep went by without a waiter's cycle. The price: a callback nobody
// waits on is delivered at the latest that long (≤ tick, 10 ms) after the
// last waiter left. Wake-ups for inline completions and Close still go
// through. It reports whether it did not sleep (stopping).
//
// It sleeps on a Go timer, not in a system call: a goroutine blocked in a
// system call keeps its P (in _Psyscall), so with GOMAXPROCS 2 a waiter
// blocking in io_uring_enter at the same time leaves no idle P, and the
// runtime's monitor retakes one after 20 µs — a futex wake-up of another
// thread, which finds nothing to do and sleeps again, and the monitor
// polling every 20 µs again (nanosleep). Parked on a channel, the reaper
// gives its P back at once. A wake-up for inline completions (the wake
// eventfd) waits for the timeout, or for a waiter's cycle, which collects
// them too; Close sends on lazyWake.
func (e *Engine) sleepLazy(t *time.Timer, d time.Duration) bool {
	e.sleeping.Store(sleepLazy)
	if e.stop.Load() {
		e.sleeping.Store(awake)
		return true
	}
	t.Reset(d)
	select {
	case <-t.C:
	case <-e.lazyWake:
		t.Stop()
	}
	e.sleeping.Store(awake)
	return false
}

// lazyMin is the reaper's first blind sleep while waiters reap.
const lazyMin = time.Millisecond

// sleepLazy: the reaper sleeps blind with a timeout while waiters reap;
// unlike sleepBlind, a waiter does not wake it when it returns.
const sleepLazy = 4

// reaperCycle runs one cycle on the reaper goroutine unless another
// goroutine (a waiter reaping for itself) holds the reaping flag; ok says
// whether it ran. The cycle is not counted as a waiter's (waiterCycles).
func (e *Engine) reaperCycle() (n int, busy, ok bool) {
	if !e.acquireReaping() {
		return 0, false, false
	}
	e.inReaper = true
	n, busy = e.cycle()
	if e.roundSubmitted() && e.waiters.Load() == 0 && e.reapingWaiters.Load() == 0 {
		// Callbacks submitted: wait for the next completions now, in
		// the same system call that starts those (waitBatch) — unless a
		// goroutine waits: then it reaps (a reaper blocked in the
		// kernel with the flag would make it park, and wake it with a
		// futex per round, for as long as it keeps waiting).
		e.waitBatch()
	}
	e.inReaper = false
	e.releaseReaping()
	return n, busy, true
}

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

// reserved is at least the staging ring's reservation counter when the
// call began: every position below it was handed to a submitter. (Len,
// then Head: the sum can only overshoot, by reservations made meanwhile —
// positions that exist by then.)
func (e *Engine) reserved() uint64 {
	n := uint64(e.stage.Len())
	return e.stage.Head() + n
}

// Drain waits until every transfer submitted before the call has
// completed and its callback has run, or ctx ends.
func (e *Engine) Drain(ctx context.Context) error {
	e.lock()
	e.drainLocked()
	// Every reservation made so far, published or not: a transfer whose
	// Submit returned may sit behind another submitter's reservation that
	// is not yet committed (Peek stops there). Submitters never block
	// between Reserve and Commit, so the frontier gets past it. (We hold
	// the owner: the ring's head is e.head.)
	end := e.head + uint64(e.stage.Len())
	e.unlock()
	return e.waitReleased(ctx, end)
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

// sleeper puts the reaper to sleep on its watched fds through io_uring
// (uringWait), falling back to poll(2) when io_uring is unavailable.
type sleeper struct {
	completionFds int // fds[:completionFds] are the backends'
	fds           []int
	efd           []bool // fds[i] is an eventfd (read it), not a pollable ring fd
	u             uringWait
	calls         uint64
}

// newSleeper builds the reaper's sleep over every backend's readiness fd
// and the wake eventfd, and says whether it watches every backend.
func (e *Engine) newSleeper() *sleeper {
	e.sleepStale.Store(false)
	s := &sleeper{}
	e.forEach(func(m *member) {
		if m.fd >= 0 && !m.removing.Load() {
			s.fds = append(s.fds, m.fd)
			s.efd = append(s.efd, m.efd)
		}
	})
	s.completionFds = len(s.fds)
	s.fds = append(s.fds, e.wakeFd)
	s.efd = append(s.efd, true)
	if err := s.u.open(s.fds, s.efd); err != nil {
		e.addFallback(fmt.Errorf("engine: reaper sleeps in poll(2): io_uring: %w", err))
	}
	// Published after the sleep watches them all (wakeReaper skips
	// wake-ups a backend's signal makes): a membership change meanwhile
	// set sleepStale again and the next rebuild settles it.
	e.readyFD.Store(e.allReady() && !e.sleepStale.Load())
	return s
}

// sleep blocks until a watched fd signals or timeout passes (0: no
// timeout); false when only the timeout fired. completions false leaves
// the backend's completion fd out (not re-armed): a waiter holding the
// reaping flag is blocked in the backend for those completions, and the
// fd, readable until it reaps them, would wake the reaper over and over.
func (s *sleeper) sleep(timeout time.Duration, completions bool) bool {
	skip := 0 // how many of the first fds (the backends') not to arm
	if !completions {
		skip = s.completionFds
	}
	if s.u.ok() {
		woke, calls := s.u.wait(timeout, skip)
		s.calls += calls
		return woke
	}
	pfd := make([]unix.PollFd, 0, len(s.fds))
	for i, fd := range s.fds {
		if i >= skip {
			pfd = append(pfd, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
	}
	ms := -1
	if timeout > 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	n, _ := unix.Poll(pfd, ms)
	s.calls++
	var buf [8]byte
	for _, p := range pfd {
		i := slices.Index(s.fds, int(p.Fd))
		if s.efd[i] && p.Revents&unix.POLLIN != 0 {
			_, _ = unix.Read(s.fds[i], buf[:]) // readable: does not block
			s.calls++
		}
	}
	return n > 0
}

func (s *sleeper) syscalls() uint64 {
	n := s.calls
	s.calls = 0
	return n
}

func (s *sleeper) close() { s.u.close() }
