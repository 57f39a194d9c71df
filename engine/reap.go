package engine

import (
	"runtime"
	"time"

	"github.com/hcomm-go/hcomm/backend"
)

// cycle is one round of the completion side, shared by the reaper and
// Poll: under the owner flag it forwards what is staged, collects finished
// transfers and handles stalls; then, without the flag, it runs their
// callbacks; then it moves the release frontier. It returns how many
// transfers completed and, when wantBusy, whether any is still outstanding
// in the backend (a look at every backend, which Poll does not need).
func (e *Engine) cycle(wantBusy bool) (n int, busy bool) {
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
	if e.tornDown {
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
		refused := e.nextForward != e.head+uint64(e.stage.Len())
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
		e.totals.reapBatches++
	}
	// Busy: something may finish without a doorbell or a wake-up (in the
	// backend, or staged and not yet accepted by it): sleep with a timeout.
	busy = wantBusy && (e.outstanding() > 0 || e.nextForward != e.head+uint64(e.stage.Len()))
	if n > 0 && e.quiet(e.batch[:n]) {
		// No application code to run: done, and the frontier moved,
		// in this one hold of the owner flag.
		if count > 0 {
			hookReapBatch(uint32(count), bytes, errs)
		}
		e.markDone(e.batch[:n])
		e.advanceLocked()
		e.unlock()
		e.notify()
		return n, busy
	}
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
			e.totals.countErr(e.statusErr(c.Status))
		}
	}
	e.totals.completed += uint64(count)
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
	// its context ends. Two stores per batch with callbacks, not per
	// transfer; none for a batch without (a Wait or Drain loop).
	finished, inCallback := false, false
	defer func() {
		if !finished {
			e.afterPanic(batch)
		}
		if inCallback {
			e.inCallback.Store(false)
			// What the callbacks submitted waits for a drain (kick):
			// a cycle takes the owner flag after us and its unlock
			// drains; elsewhere (Close's callbacks) drain here.
			if !e.cycling && e.dirty.Load() != 0 {
				e.lock()
				e.unlock()
			}
		}
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
			if !inCallback {
				inCallback = true
				e.inCallback.Store(true)
			}
			s.cb = nil
			e.cbSeq.Add(1) // which callback runs: Shutdown tells a blocked one from many short ones
			cb(Result{ID: e.makeID(c.Tag), User: s.user, N: int(c.N), Err: e.statusErr(c.Status)})
		}
		// Release: the result and the callback's effects happen before
		// a waiter or the frontier sees the slot done. Release ordering
		// is all this store needs (a plain MOV on amd64, where the
		// sequentially consistent XCHG cost ~5 ns per transfer; STLR on
		// arm64, which the waiter's acquiring load pairs with): nothing
		// in the loop loads a word a waiter stores, and before notify
		// reads e.waiters (Dekker's pattern with a waiter that counts
		// itself, then looks at the state) comes the owner flag's CAS
		// of the frontier's advance, a full barrier.
		s.state.StoreRelease(doneState(c.Tag, c.Status))
	}
	finished = true
}

// quiet says whether completing batch runs no application code and
// releases no registration: no callbacks (a Wait or Drain loop), nothing
// Registered. Such a batch is completed under the owner flag (markDone).
func (e *Engine) quiet(batch []backend.Completion) bool {
	for i := range batch {
		if !e.slots[batch[i].Tag&e.mask].quiet() {
			return false
		}
	}
	return true
}

// markDone is complete for a quiet batch: each result stored, each slot
// marked done (release ordering, as in complete; the owner flag's release
// that follows is the full barrier before notify).
func (e *Engine) markDone(batch []backend.Completion) {
	for _, c := range batch {
		s := &e.slots[c.Tag&e.mask]
		if c.Status != backend.StatusOK {
			s.res.Store(resOf(c))
		}
		s.state.StoreRelease(doneState(c.Tag, c.Status))
	}
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
	n, _ := e.cycle(false) // a panicking callback lets the flag go (afterPanic)
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
