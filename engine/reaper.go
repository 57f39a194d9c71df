package engine

// The reaper (ModeReaper's completion goroutine), its sleep states and its
// sleep over the backends' readiness fds; waking it.

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
)

// Reaper sleep states (Engine.sleeping).
const (
	awake     = 0
	sleepBusy = 1 // asleep with a timeout: transfers are outstanding
	// asleep with a timeout, not watching the backend's completion fd: a
	// waiter was reaping (waitFor wakes the reaper when it leaves)
	sleepBlind = 3
	sleepIdle  = 2 // asleep until woken: nothing was outstanding
	// asleep blind with a timeout while waiters reap; unlike sleepBlind,
	// a waiter does not wake it when it returns (see sleepLazy)
	sleepLazy = 4
)

// wakeReaper wakes a sleeping reaper with one eventfd write — only when it
// sleeps (idleOnly: only when it sleeps without a timeout), and only once
// per sleep: the swap to awake lets one waker through. Never on a busy
// engine, whose reaper is awake.
//
// idleOnly wake-ups (work forwarded to the backend while the reaper sleeps
// idle) are skipped when the backend has a ReadyFD: its signal wakes the
// reaper when that work completes, and the idle sleep's timeout bounds how
// late a stall is noticed; a wake-up per synchronous submission would cost
// a system call and a thread hand-off each time. (A reaper asleep without
// watching that signal, sleepBlind, is woken by the waiter that made it
// so, when it leaves with work pending; waking it per submission instead
// tripled the CPU per I/O of a file workload.)
func (e *Engine) wakeReaper(idleOnly bool) {
	if e.cfg.Mode != ModeReaper {
		return
	}
	s := e.sleeping.Load()
	// A reaper in sleepLazy reads no eventfd: it wakes on its timer (and
	// a waiter's cycles collect what it would), so a write would only be
	// a system call in the submitter's path.
	if s == awake || s == sleepLazy || idleOnly && (s != sleepIdle || e.readyFD.Load()) || !e.sleeping.CompareAndSwap(s, awake) {
		return
	}
	var one = [8]byte{1}
	_, _ = unix.Write(e.wakeFd, one[:])
	e.engineSyscalls.Add(1)
}

// startCompletions starts the reaper (ModeReaper); in ModePoll the
// application's Poll calls do its work.
func (e *Engine) startCompletions() {
	// Waiters wait in a batch-waited backend in both modes (waitFor).
	// The first backend's batched waits and deferred doorbell (reap.go):
	// the other backends' doorbells ring at once, and a goroutine waits in
	// the first backend only while the others have nothing outstanding.
	be := e.first.be
	e.batchWaiter, _ = be.(backend.BatchWaiter)
	if c, ok := be.(backend.BatchWaitChooser); ok && !c.BatchWaits() {
		e.batchWaiter = nil
	}
	if e.batchWaiter != nil {
		e.deferrable, _ = be.(backend.LazyDoorbell)
	}
	if e.cfg.Mode != ModeReaper {
		close(e.done)
		return
	}
	ready := make(chan struct{})
	go e.reaper(ready)
	<-ready
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
	r := &reaperState{sl: e.newSleeper(), bw: e.batchWaiter, last: time.Now(), lazy: e.lazyFirst(), lazyTimer: time.NewTimer(time.Hour)}
	r.lazyTimer.Stop()
	close(ready)
	defer func() { r.sl.close() }()
	// On the way out, take the reaping flag for good: a waiter reaping
	// inline finishes the cycle it is in (completing what it collected),
	// and no later one starts, so Close's cancelOutstanding is the only
	// one left to complete what is open.
	defer func() {
		for i := 0; !e.reaping.CompareAndSwap(0, 1); i++ {
			backoff(i) // a waiter's callback may block: do not spin
		}
	}()
	// The backends' completion signals are on only while the reaper
	// sleeps on them (reaperSleep); on again when it ends (last out,
	// first done).
	e.gateInterrupts(r, false)
	defer e.gateInterrupts(r, true)
	r.timeouts(e)
	r.seen = e.waiterCycles.Load()
	r.spinSeen = r.seen
	for !e.stop.Load() {
		if e.sleepStale.Load() {
			// The backends changed (AddBackend, RemoveBackend): sleep
			// on the readiness fds of those there are now.
			r.sl.close()
			r.sl = e.newSleeper()
			r.timeouts(e)
		}
		if e.standBesideWaiters(r) {
			continue
		}
		n, busy, ok := e.reaperCycle()
		if n > 0 {
			r.last = time.Now()
			continue
		}
		if e.standAsideWaiters(r, busy, ok) || e.reaperWaitBatch(busy, ok) {
			continue
		}
		if e.cfg.Spin > 0 && time.Since(r.last) < e.cfg.Spin {
			runtime.Gosched()
			continue
		}
		e.reaperSleep(r)
	}
}

// reaperState is the reaper goroutine's own: its sleep, its timeouts, and
// the clocks of its spin and of its standing beside waiters.
type reaperState struct {
	sl *sleeper
	// tick is the sleep's timeout with transfers outstanding; idleTick
	// without: the reaper needs one only to notice a stall of work
	// submitted while it slept (submissions do not wake it), and half the
	// backends' shortest Timeout is early enough (without a Timeout, none).
	tick, idleTick time.Duration
	bw             backend.BatchWaiter
	last           time.Time // the reaper's last completion (its spin)
	// gatedOff: the reaper turned the backends' completion signals off
	// (gateInterrupts).
	gatedOff  bool
	lazy      time.Duration
	lazyTimer *time.Timer
	// seen and spinSeen are waiterCycles as last looked at; lastWaiter is
	// when it last moved; standSince is when the reaper began to stand
	// back beside reaping waiters.
	seen, spinSeen         uint64
	lastWaiter, standSince time.Time
}

func (r *reaperState) timeouts(e *Engine) {
	r.tick, r.idleTick = e.tick(), e.timeout()/2
}

// standBesideWaiters keeps the reaper out of the way of waiters that reap
// for themselves (a synchronous Submit+Wait), on a backend without batched
// waits; true: it stood back (the loop goes round again). While one does,
// and within Spin of its last cycle, the reaper stays awake — so
// submitters need not wake it — but takes no completions from them: a
// reaper cycling beside a waiter wins its completion, and the waiter then
// waits for the reaper to publish it, a hand-off between threads (2.6 µs
// instead of 0.25 µs per 4 KiB Submit+Wait on vfio-mock). For batch-waited
// backends the reaper stands aside asleep instead (standAsideWaiters).
//
// Standing back for a whole Spin (a loop that keeps waiting, or a
// pipeline whose submitter reaps each time its queue fills), the reaper
// sleeps (sleepLazy, lazyMin at a time) instead of spinning: a thread that
// only yields is a busy thread, and beside a busy waiter it left nothing
// of a 2-CPU machine to a third — every wake-up of anything else then
// waited for a scheduler tick (4 ms), in the middle of the waiter's work
// (docs/engine.md, "The reaper beside waiters"). Not while others are
// parked: they count on the reaper's cycles.
func (e *Engine) standBesideWaiters(r *reaperState) bool {
	if r.bw != nil || e.cfg.Spin <= 0 {
		return false
	}
	if w := e.waiterCycles.Load(); w != r.spinSeen {
		r.spinSeen, r.lastWaiter = w, time.Now()
	}
	if e.reapingWaiters.Load() == 0 && time.Since(r.lastWaiter) >= e.cfg.Spin {
		r.standSince = time.Time{}
		return false
	}
	if r.standSince.IsZero() {
		r.standSince = time.Now()
	} else if time.Since(r.standSince) >= e.cfg.Spin && e.waiters.Load() == 0 {
		e.sleepLazy(r.lazyTimer, e.lazyFirst())
		return true
	}
	runtime.Gosched()
	return true
}

// standAsideWaiters: on a batch-waited backend, while a waiter reaps (it
// holds the reaping flag, or ran a cycle since our last look), the reaper
// sleeps aside (sleepLazy), doubling its sleep while they keep reaping —
// unless other waiters are parked: they count on the reaper (or the
// reaping waiter's cycles) to notify them, and the reaping one may leave
// first. true: it stood aside.
func (e *Engine) standAsideWaiters(r *reaperState, busy, ok bool) bool {
	if r.bw == nil || e.waiters.Load() != 0 || ok && !(busy && e.waiterCycles.Load() != r.seen) {
		return false
	}
	r.seen = e.waiterCycles.Load()
	if e.sleepLazy(r.lazyTimer, r.lazy) {
		return true
	}
	if now := e.waiterCycles.Load(); now != r.seen {
		r.lazy = min(2*r.lazy, r.tick)
	} else {
		r.lazy = e.lazyFirst()
	}
	return true
}

// reaperWaitBatch: on a backend that can be waited on in batches (the
// io_uring file backend), with transfers outstanding, the reaper sleeps in
// the kernel until half of them are done (or batchWait passed with some
// done) instead of spinning: one system call per batch and no CPU burnt
// between completions. Not while a waiter is parked: the reaper, holding
// the flag in the kernel, would keep it parked (a wake-up per batch), where
// asleep on the completion fd it lets it reap again. true: it waited.
func (e *Engine) reaperWaitBatch(busy, ok bool) bool {
	if e.batchWaiter == nil || !ok || !busy || e.waiters.Load() != 0 || !e.acquireReaping() {
		return false
	}
	e.inReaper = true
	waited := e.waitBatch()
	e.inReaper = false
	e.releaseReaping()
	return waited
}

// reaperSleep puts the reaper to sleep. It publishes that first, then
// looks once more: a submitter that has something for the reaper after
// this look sees sleepIdle and writes the wake eventfd (SC atomics: one of
// the two sees the other). With transfers outstanding, or when a waiter
// held the reaping flag (it may leave work behind), it sleeps with the
// shorter timeout (sleepBusy), unless a waker got in.
func (e *Engine) reaperSleep(r *reaperState) {
	e.sleeping.Store(sleepIdle)
	// The backends' completion signals on before the look below (a
	// completion the look misses signals), off again once the reaper is
	// awake: nobody else sleeps on them, and a signal while it is awake
	// costs the device its interrupt and the reaper a wake-up for nothing
	// at its next sleep.
	e.gateInterrupts(r, true)
	defer e.gateInterrupts(r, false)
	n, busy, ok := e.reaperCycle()
	if n > 0 || e.stop.Load() {
		e.sleeping.Store(awake)
		r.last = time.Now()
		return
	}
	timeout := r.idleTick
	if busy || !ok {
		// !ok: a waiter holds the reaping flag and reaps; sleep without
		// the completion fd (sleepBlind), and the waiter wakes us when it
		// leaves.
		state := uint32(sleepBusy)
		if !ok {
			state = sleepBlind
		}
		if !e.sleeping.CompareAndSwap(sleepIdle, state) {
			return // woken meanwhile (the eventfd holds the wake-up too)
		}
		if state == sleepBlind && e.reapingWaiters.Load() == 0 {
			// Sleeping blind is for while a waiter reaps (it hands
			// back when it leaves or parks); none does now — it left,
			// or parked counting on our cycles (rouseReaper), or the
			// flag's holder is not a waiter: watch the completion
			// signal after all.
			if !e.sleeping.CompareAndSwap(sleepBlind, sleepBusy) {
				return // woken meanwhile
			}
			ok = true
		}
		timeout = r.tick
	}
	r.sl.sleep(timeout, ok)
	e.engineSyscalls.Add(r.sl.syscalls())
	e.sleeping.Store(awake)
}

// gateInterrupts turns on or off the completion signal of every backend
// that can switch it (backend.InterruptGate). Reaper goroutine only. A
// backend added while the signals are off starts with its own on, which
// only costs it signals until the next switch; one whose switch fails
// keeps its signal on from then on.
func (e *Engine) gateInterrupts(r *reaperState, on bool) {
	if r.gatedOff != on {
		return
	}
	for set := e.memberSet.Load(); set != 0; set &= set - 1 {
		m := e.members[bits.TrailingZeros32(set)].Load()
		if m == nil || m.gate == nil || m.gateFailed || !on && m.removing.Load() {
			continue
		}
		if err := m.gate.GateInterrupts(on); err != nil {
			m.gateFailed = true
			if !on {
				_ = m.gate.GateInterrupts(true)
			}
			if !errors.Is(err, ErrClosed) {
				e.log.Warn("engine: switching a backend's completion signal failed; it stays on", "backend", m.desc.Name, "on", on, "err", err)
			}
		}
	}
	r.gatedOff = !on
}

// batchWait is how long the reaper lets a batch of completions grow once
// the first is ready: the most a callback waits for its neighbours.
const batchWait = 200 * time.Microsecond

// tick is how often a sleeping reaper (or a waiter blocked in the
// backend) looks again while transfers are outstanding: a quarter of the
// backend's Timeout, at most 10 ms.
func (e *Engine) tick() time.Duration {
	if o := e.tickOverride.Load(); o > 0 {
		return time.Duration(o)
	}
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
	if e.strandedLazy() {
		// Since our caller looked, the waiters left or parked: nobody
		// reaps what is to come (handBack, rouseReaper).
		e.sleeping.Store(awake)
		return false
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

// lazyFirst is lazyMin, or its test override (a lazy sleep that nothing
// cuts short then shows as a hang).
func (e *Engine) lazyFirst() time.Duration {
	if o := e.lazyOverride.Load(); o > 0 {
		return time.Duration(o)
	}
	return lazyMin
}

// reaperCycle runs one cycle on the reaper goroutine unless another
// goroutine (a waiter reaping for itself) holds the reaping flag; ok says
// whether it ran. The cycle is not counted as a waiter's (waiterCycles).
func (e *Engine) reaperCycle() (n int, busy, ok bool) {
	if !e.acquireReaping() {
		return 0, false, false
	}
	e.inReaper = true
	n, busy = e.cycle(true)
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
