package engine

// The owner protocol (group commit): who may drain the staging ring into
// the backends, and how a submitter that loses the race leaves its entry to
// the one that won; then the drain itself (forward, one doorbell per
// backend, the release frontier, collecting completions).
//
// Invariant: every committed staging entry is drained by some owner. A
// submitter commits, then tries the owner CAS. If it loses, it stores
// dirty=1 and tries once more. An owner clears dirty before each drain and,
// after storing owner=0, loads dirty: if it is set, it takes the owner back
// (if it can) and drains again. All of these are sequentially consistent
// atomics, so for a commit C that a drain D missed (D's Peek before C):
// clear < D < C < dirty=1; either the owner's final load sees dirty=1 and
// someone drains again after it, or the load precedes dirty=1 and then the
// submitter's second CAS comes after owner=0 and succeeds (or loses to
// another owner that will drain after taking it).

import (
	"math/bits"
	"runtime"

	"github.com/hcomm-go/hcomm/backend"
)

// crowdMemory is how many solo drains the group-commit heuristic remembers
// a collision between submitters for.
const crowdMemory = 16

// probeMin and probeMax bound the group-commit heuristic's probe interval
// (drains; see kick).
const (
	probeMin = 64
	probeMax = 4096
)

// kick makes sure freshly committed entries reach the backend; own is how
// many entries the caller committed.
func (e *Engine) kick(own int) {
	// In a completion round (a callback submitting, or a submitter beside
	// a reaping waiter) the round's holder drains what is staged — once,
	// before it waits or leaves (roundDrain, releaseReaping) — so the
	// round's submissions are one batch and one doorbell, carried by its
	// wait. dirty tells the holder; if the round ended meanwhile, the
	// protocol below drains (the holder clears inRound before its last
	// look at dirty: one of the two sees the other).
	if e.deferrable != nil && e.inRound.Load() {
		e.dirty.Store(1)
		if e.inRound.Load() {
			return
		}
	} else if e.inCallback.Load() {
		// Callbacks are running (a pipeline's next transfers, submitted
		// from its completions): their batch's holder drains once when
		// they are done — the owner flag it takes right after them
		// (cycle, runCallbacks), whose unlock drains for dirty — so the
		// submissions of one batch of callbacks are one doorbell per
		// backend, not one each. complete clears inCallback before
		// that unlock looks at dirty: one of the two sees the other.
		// Callbacks are short (they must not block), so another
		// goroutine's submission held back meanwhile waits that long.
		e.dirty.Store(1)
		if e.inCallback.Load() {
			return
		}
	}
	if e.owner.CompareAndSwap(0, 1) {
		// Group commit: when other submitters were active a moment ago
		// (crowd), give the runnable ones a chance to stage their
		// transfers first, so that one doorbell carries them all. Now and
		// then a drain probes the same way, so that a crowd is noticed
		// even when the scheduler runs submitters one after another and
		// they never collide: every 64th drain, backing off (doubling up
		// to every 4096th) while probes find nobody — a yield wakes an
		// idle P's thread (futex wake and sleep, microseconds), which a
		// lone submitter would pay for nothing. (Plain fields: we hold
		// the owner.)
		e.drainsSinceProbe++
		probing := e.crowdLeft == 0 && e.drainsSinceProbe >= e.probeEvery
		if e.crowdLeft > 0 || probing {
			runtime.Gosched()
		}
		e.ownEntries = own
		e.drainLocked()
		e.ownEntries = 0
		if probing {
			e.drainsSinceProbe = 0
			if e.crowdLeft == 0 && e.probeEvery < probeMax {
				e.probeEvery *= 2
			}
		}
		e.unlock()
		return
	}
	e.dirty.Store(1)
	if e.owner.CompareAndSwap(0, 1) {
		e.drainLocked()
		e.unlock()
	}
}

// lock takes the owner flag, waiting for the current holder (short: it
// drains at most one ring's worth). Not for the submit path. It leaves
// dirty alone: only a drain may clear it (see drainLocked), and unlock
// drains if it is set.
func (e *Engine) lock() {
	for i := 0; !e.owner.CompareAndSwap(0, 1); i++ {
		if i >= 8 {
			runtime.Gosched()
		}
	}
}

// unlock releases the owner flag, draining again for submitters that lost
// the CAS meanwhile.
func (e *Engine) unlock() {
	for {
		// Release: everything the owner wrote (backend state, counters,
		// slots) happens before the next owner's CAS.
		e.owner.Store(0)
		if e.dirty.Load() == 0 || !e.owner.CompareAndSwap(0, 1) {
			return
		}
		e.crowdLeft = crowdMemory // someone lost the CAS to us: a crowd
		e.probeEvery = probeMin
		e.drainLocked()
	}
}

// drainLocked forwards every published staging entry to its backend and
// publishes them with one doorbell per backend touched (one Flush each),
// then reports the batch to the submit hook. Entries completed by their
// submitter (Inline, no-ops) go straight to the local completion list for
// the reaper.
func (e *Engine) drainLocked() {
	// Clear dirty first: what was committed before this point is drained
	// below; a dirty=1 stored after it is seen by unlock (the invariant
	// above). Only a drain clears dirty.
	if e.dirty.Load() != 0 {
		e.dirty.Store(0)
	}
	if e.tornDown {
		return
	}
	e.advanceLocked()
	// Nothing reserved beyond what went out (a cycle of a Wait or a Poll,
	// most of the time): nothing can be published either.
	if e.stage.Tail() == e.nextForward {
		return
	}
	b := e.stage.Peek(e.depth)
	end := b.Start() + uint64(b.Len())
	if e.nextForward == end {
		return
	}
	var d drained
	e.forwardStaged(end, e.interruptMarks(end), &d)
	e.ringDoorbells(d.touched)
	e.countDrained(&d)
	if d.finished > 0 {
		e.totals.completed += uint64(d.finished)
		e.totals.reapBatches++
		hookReapBatch(d.finished, d.finishedBytes, d.finishedErrs)
		e.advanceLocked()
		e.notify()
	}
	// Wake a sleeping reaper for completions only it delivers (Inline,
	// no-ops), when a backend refused entries (it may need recovery,
	// which the reaper runs), and when work reaches a backend while the
	// reaper sleeps idle, without the timeout that notices a stall.
	switch {
	case d.local || e.nextForward != end:
		e.wakeReaper(false)
	case d.touched != 0:
		e.wakeReaper(true)
	}
}

// drained is what one drain did: transfers and bytes by path, whether
// entries went to the local completion list, and which backends were
// forwarded to (bit i: backend i).
type drained struct {
	count   [backend.NumPaths]uint32
	bytes   [backend.NumPaths]uint64
	paths   uint32 // bit p: count[p] > 0
	local   bool
	touched uint32
	// Entries the drain completed itself (finishInline): how many, their
	// bytes, how many failed.
	finished, finishedErrs uint32
	finishedBytes          uint64
}

// interruptMarks returns, per backend, the position of the last entry to
// forward to it before end, which asks for an interrupt when it
// completes: one per batch, which is what wakes a sleeping reaper (or a
// waiter). In ModePoll nobody sleeps on a backend's signal: no interrupt
// (one eventfd write per batch saved).
func (e *Engine) interruptMarks(end uint64) [MaxBackends]uint64 {
	if !e.interruptPerBatch {
		return [MaxBackends]uint64{}
	}
	last := noLastFwd
	for p := e.nextForward; p != end; p++ {
		if ent := &e.ents[p&e.mask]; ent.done == opForward {
			last[ent.be&(MaxBackends-1)] = p
		}
	}
	return last
}

// forwardStaged hands the entries up to end to their backends in order
// (Forward), or to the local completion list, until a backend refuses one
// (no room now: the rest waits for a later drain).
func (e *Engine) forwardStaged(end uint64, last [MaxBackends]uint64, d *drained) {
	for e.nextForward != end {
		pos := e.nextForward
		ent := &e.ents[pos&e.mask]
		op := &ent.op
		done, path, n := ent.done, op.Path&(backend.NumPaths-1), op.Len
		if done == opNoop {
			e.pushLocalLocked(pos)
			d.local = true
			e.nextForward++
			continue
		}
		i := ent.be & (MaxBackends - 1)
		m := e.members[i].Load()
		switch {
		case m == nil:
			// Its backend was removed (RemoveBackend canceled what it
			// held; this one was staged before and reached it after).
			ent.done, ent.res = opDone, packRes(backend.StatusCanceled, 0)
			e.pushLocalLocked(pos)
			d.local = true
		case done == opForward:
			if !m.be.Forward(pos, op, pos == last[i]) {
				return
			}
			d.touched |= 1 << i
		case e.finishAtDrain && e.slots[pos&e.mask].quiet():
			e.finishInline(pos, d)
		default:
			e.pushLocalLocked(pos)
			d.local = true
		}
		if m != nil {
			m.transfers++
			m.bytes += uint64(n)
		}
		d.count[path]++
		d.bytes[path] += uint64(n)
		d.paths |= 1 << path
		e.nextForward++
	}
}

// ringDoorbells publishes what was forwarded: one doorbell per backend
// touched. In a completion round (a callback submitting, or a submitter
// beside a waiter that reaps) the first backend's doorbell waits for the
// round's holder when it can be deferred: its batched wait carries it, or
// it rings it when it lets the reaping flag go (releaseReaping).
func (e *Engine) ringDoorbells(touched uint32) {
	for t := touched; t != 0; t &= t - 1 {
		m := e.members[bits.TrailingZeros32(t)].Load()
		if m == e.first && e.deferrable != nil && e.inRound.Load() {
			e.deferrable.FlushDeferred()
			e.lazyPending.Store(true)
		} else {
			m.be.Flush()
		}
	}
}

// countDrained counts a drain's batch (Stats, the submit hook) and feeds
// the group-commit heuristic: a drain that carried transfers of others
// (beyond what the kicking submitter committed itself: one SubmitBatch is
// no crowd) means submitters are colliding.
func (e *Engine) countDrained(d *drained) {
	total := uint32(0)
	for ps := d.paths; ps != 0; ps &= ps - 1 {
		p := bits.TrailingZeros32(ps)
		total += d.count[p]
		e.totals.batches++
		e.totals.transfers[p] += uint64(d.count[p])
		e.totals.bytes[p] += d.bytes[p]
		hookSubmitBatch(d.count[p], d.bytes[p], uint8(p))
	}
	if total > uint32(max(e.ownEntries, 1)) {
		e.crowdLeft = crowdMemory
		e.probeEvery = probeMin
	} else if e.crowdLeft > 0 {
		e.crowdLeft--
	}
}

// noLastFwd is drainLocked's "no entry asks for an interrupt", per backend.
var noLastFwd = [MaxBackends]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}

// finishInline completes staged entry pos, which its submitter executed
// (an Inline transfer: the CPU path into device memory, memory → memory)
// and which has no callback and nothing Registered: no application code
// to run, so the drain marks it done at once — with what countLocked and
// complete would do, result and counters — and a Wait that follows its
// Submit finds it done without a completion round. ModeReaper only
// (finishAtDrain): in ModePoll, Poll's count is how an application without
// callbacks learns of completions.
func (e *Engine) finishInline(pos uint64, d *drained) {
	ent := &e.ents[pos&e.mask]
	st, n := backend.Status(ent.res>>32), uint32(ent.res)
	if st == backend.StatusOK && n != ent.op.Len {
		st = backend.StatusShort
	}
	st = tagStatus(st, ent.be)
	s := &e.slots[pos&e.mask]
	if st != backend.StatusOK {
		d.finishedErrs++
		e.totals.countErr(e.statusErr(st))
		s.res.Store(packRes(st, n)) // before the done state (seqlock)
	}
	d.finished++
	d.finishedBytes += uint64(n)
	// Sequentially consistent, unlike complete's: the full barrier
	// between this store and notify's look at the waiters (Dekker's
	// pattern with a waiter that counts itself, then looks at the state).
	s.state.Store(doneState(pos, st))
}

// quiet says whether completing the slot's transfer runs no application
// code and releases no registration (no callback, nothing Registered).
func (s *slot) quiet() bool { return s.cb == nil && s.reg == 0 }

func (e *Engine) pushLocalLocked(pos uint64) {
	e.localDone[(e.ldHead+e.ldLen)%len(e.localDone)] = pos
	e.ldLen++
}

// advanceLocked moves the release frontier over every transfer whose
// callback has run, giving their staging slots back to submitters.
func (e *Engine) advanceLocked() {
	h := e.head
	for h != e.nextForward {
		// Acquire: pairs with the reaper's done store, which follows the
		// callback; a submitter reusing the slot comes after our Release.
		if e.slots[h&e.mask].state.Load()&^stateFailed != (h+1)<<1|1 {
			break
		}
		h++
	}
	if n := h - e.head; n > 0 {
		e.head = h
		// Cannot fail: these entries were peeked.
		_ = e.stage.Release(int(n))
		// After Release: a submitter that reads released = h and then
		// finds the ring full is sure that the ring's head was already h,
		// so the room it waits for needs a later advance (which notifies).
		// Release ordering is all that takes; the owner flag's release
		// (unlock, sequentially consistent) comes before notify looks
		// for waiters.
		e.released.StoreRelease(h)
	}
}

// collectLocked gathers finished transfers: those completed at submit
// time, then the backend's.
func (e *Engine) collectLocked(out []backend.Completion) int {
	n := 0
	for e.ldLen > 0 && n < len(out) {
		pos := e.localDone[e.ldHead]
		e.ldHead = (e.ldHead + 1) % len(e.localDone)
		e.ldLen--
		res := e.ents[pos&e.mask].res
		out[n] = backend.Completion{Tag: pos, N: uint32(res), Status: backend.Status(res >> 32)}
		n++
	}
	for set := e.memberSet.Load(); set != 0 && n < len(out); set &= set - 1 {
		if m := e.members[bits.TrailingZeros32(set)].Load(); m != nil {
			n += m.be.Reap(out[n:])
		}
	}
	return n
}
