package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// cycle is one round of the completion side, shared by the reaper and
// Poll: under the owner flag it forwards what is staged, collects finished
// transfers and handles stalls; then, without the flag, it runs their
// callbacks; then it moves the release frontier. It returns how many
// transfers completed and whether any is still outstanding in the target.
func (e *Engine) cycle() (n int, busy bool) {
	e.lock()
	if e.torn {
		e.unlock()
		return 0, false
	}
	e.drainLocked()
	n = e.collectLocked(e.batch)
	if n == 0 {
		e.tgt.check(e)
		n = e.collectLocked(e.batch) // what a recovery failed
	}
	count, bytes, errs := e.countLocked(e.batch[:n])
	if count > 0 {
		e.ctr.reapBatches++
	}
	// Busy: something may finish without a doorbell or a wake-up (in the
	// target, or staged and not yet accepted by it): sleep with a timeout.
	busy = e.tgt.outstanding() > 0 || e.fwd != e.head+uint64(e.stage.Len())
	e.unlock()
	if n == 0 {
		return 0, busy
	}
	if count > 0 {
		hookReapBatch(uint32(count), bytes, errs)
	}
	e.complete(e.batch[:n])
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
// they are not counted, as drainLocked does not count them either. Owner
// only (the entries are not yet released).
func (e *Engine) countLocked(batch []completion) (count int, bytes uint64, errs uint32) {
	for _, c := range batch {
		if e.reqs[c.pos&e.mask].op == opNone {
			continue
		}
		count++
		bytes += uint64(uint32(c.res))
		if code := uint32(c.res >> 32); code != codeOK {
			errs++
			e.ctr.countErr(code)
		}
	}
	e.ctr.completed += uint64(count)
	return count, bytes, errs
}

// complete stores each result and runs each callback, exactly once, then
// marks the slot done (which lets the frontier release it).
func (e *Engine) complete(batch []completion) {
	for _, c := range batch {
		s := &e.slots[c.pos&e.mask]
		s.res.Store(c.res)
		if cb := s.cb; cb != nil {
			s.cb = nil
			cb(Result{ID: e.makeID(c.pos), User: s.user, N: int(uint32(c.res)), Err: codeErr(uint32(c.res >> 32))})
		}
		s.host = nil
		// Release: the result and the callback's effects happen before
		// a waiter or the frontier sees the slot done.
		s.state.Store((c.pos+1)<<1 | 1)
	}
}

// Poll reaps completions and runs their callbacks on the caller; it
// returns how many completed. It never blocks. In ModeReaper it does
// nothing (the reaper polls). Concurrent Polls do not wait for each other:
// all but one return 0.
func (e *Engine) Poll() int {
	if e.cfg.Mode != ModePoll || !e.reaping.CompareAndSwap(0, 1) {
		return 0
	}
	n, _ := e.cycle()
	e.reaping.Store(0)
	return n
}

// reaper is the background completion goroutine (ModeReaper). It spins for
// Config.Spin after its last completion, then sleeps until the target
// signals completions (device interrupt eventfd, io_uring fd) or a
// submitter wakes it; with transfers outstanding it wakes at least every
// 10ms to notice a stalled device.
func (e *Engine) reaper(ready chan<- struct{}) {
	defer close(e.done)
	fd, isEventfd := e.tgt.sleepFd()
	sl, err := newSleeper(fd, isEventfd, e.wakeFd)
	if err != nil {
		e.fallbacks = append(e.fallbacks, err)
	}
	close(ready)
	defer sl.close()
	tick := min(e.cfg.Timeout/4, 10*time.Millisecond)
	last := time.Now()
	for !e.stop.Load() {
		if n, _ := e.cycle(); n > 0 {
			last = time.Now()
			continue
		}
		if e.cfg.Spin > 0 && time.Since(last) < e.cfg.Spin {
			runtime.Gosched()
			continue
		}
		// Going to sleep. Publish it first, then look once more: a
		// submitter that has something for the reaper after this look
		// sees sleepIdle and writes the wake eventfd (SC atomics: one of
		// the two sees the other). With transfers outstanding, sleep
		// with a timeout instead (sleepBusy), unless a waker got in.
		e.sleeping.Store(sleepIdle)
		n, busy := e.cycle()
		if n > 0 || e.stop.Load() {
			e.sleeping.Store(awake)
			last = time.Now()
			continue
		}
		var timeout time.Duration
		if busy {
			if !e.sleeping.CompareAndSwap(sleepIdle, sleepBusy) {
				continue // woken meanwhile (the eventfd holds the wake-up too)
			}
			timeout = tick
		}
		woke := sl.sleep(timeout)
		e.sysc.Add(sl.syscalls())
		e.sleeping.Store(awake)
		if woke {
			last = time.Now()
		}
	}
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
			res = codeErr(uint32(r >> 32))
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
		r := s.res.Load()
		s2 := s.state.Load()
		if s1 != s2 {
			continue
		}
		cur := (s1 >> 1) & (1<<idPosBits - 1)
		switch {
		case cur == want:
			return s1&1 != 0, r, nil
		case cur > want || s1>>1 > want:
			return false, 0, fmt.Errorf("engine: wait for %#x: %w", uint64(id), ErrStaleID)
		default:
			return false, 0, fmt.Errorf("engine: wait for %#x: %w", uint64(id), ErrUnknownID)
		}
	}
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

// Close stops accepting transfers (Submit and Alloc return ErrClosed),
// waits for those in flight until ctx ends, then cancels the rest (a
// device reset; each gets ErrCanceled), runs every outstanding callback
// exactly once (those left at cancellation on the caller of Close, the
// reaper being stopped by then), stops the reaper, unmaps the pool from the
// device and frees everything. Closing again returns nil.
func (e *Engine) Close(ctx context.Context) error {
	first := false
	e.closeOnce.Do(func() { first = true })
	if !first {
		<-e.closedCh
		return nil
	}
	e.closing.Store(true)
	defer close(e.closedCh)

	// 1. Drain, bounded by ctx. New reservations are no-ops now.
	drainErr := e.drainAll(ctx)

	// 2. Stop the reaper.
	e.stop.Store(true)
	if e.cfg.Mode == ModeReaper {
		e.sleeping.Store(sleepIdle) // make sure the wake-up goes through
		e.wakeReaper(false)
		<-e.done
	} else {
		// Poll mode: an application goroutine (or a Wait/Drain polling
		// for it) may be inside Poll, with completions collected and
		// callbacks still to run. Take the reaping flag for good: wait
		// for that Poll to finish (it completes what it collected), and
		// every later Poll returns 0. Without this, step 4 would see
		// those slots open and complete them a second time.
		for !e.reaping.CompareAndSwap(0, 1) {
			runtime.Gosched()
		}
	}

	// 3. Tear down the staging side: wait for reservations in progress
	// to be published (a submitter never blocks between Reserve and
	// Commit), then stop every future drain.
	e.lock()
	for {
		b := e.stage.Peek(e.depth)
		if b.Len() == e.stage.Len() {
			break
		}
		e.owner.Store(0)
		runtime.Gosched()
		e.lock()
	}
	e.drainLocked()
	// The published prefix, not head+Len: a submitter may reserve after
	// the check above; it saw closing (set before the check) and is
	// writing a no-op into its slot right now. Completing that slot here
	// would race with its writes. Every reservation made before the
	// check is published, so every real transfer is in [head, end).
	b := e.stage.Peek(e.depth)
	end := b.Start() + uint64(b.Len())
	e.torn = true

	// 4. Everything still open completes now, on this goroutine: what
	// finished, what the cancelled target reports, then the rest.
	n := e.collectLocked(e.batch)
	n += e.tgt.cancel(e, e.batch[n:])
	seen := make([]bool, e.depth)
	for _, c := range e.batch[:n] {
		seen[c.pos&e.mask] = true
	}
	for pos := e.head; pos != end; pos++ {
		if !seen[pos&e.mask] && e.slots[pos&e.mask].state.Load() != (pos+1)<<1|1 && n < len(e.batch) {
			e.batch[n] = completion{pos: pos, res: packRes(codeCanceled, 0)}
			n++
		}
	}
	e.countLocked(e.batch[:n])
	e.owner.Store(0)
	e.complete(e.batch[:n])
	e.released.Store(end)
	e.notify()

	// 5. Free everything.
	errs := []error{e.tgt.close(e), e.pool.Close(), unix.Close(e.wakeFd)}
	e.closeErr = errors.Join(errs...)
	if e.closeErr != nil {
		return fmt.Errorf("engine: close: %w", e.closeErr)
	}
	if drainErr != nil {
		e.log.Info("engine: close canceled in-flight transfers", "reason", drainErr)
	}
	return nil
}

// drainAll waits until the staging ring is empty (every reservation
// released) or ctx ends.
func (e *Engine) drainAll(ctx context.Context) error {
	for e.stage.Len() > 0 {
		if err := e.Drain(ctx); err != nil {
			return err
		}
		if e.stage.Len() > 0 && e.cfg.Mode == ModePoll {
			e.Poll()
		} else if e.stage.Len() > 0 {
			runtime.Gosched()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// sleeper puts the reaper to sleep on its watched fds through io_uring
// (uringWait), falling back to poll(2) when io_uring is unavailable.
type sleeper struct {
	fds   []int
	efd   []bool // fds[i] is an eventfd (read it), not a pollable ring fd
	u     uringWait
	calls uint64
}

func newSleeper(completionFd int, eventfd bool, wakeFd int) (*sleeper, error) {
	s := &sleeper{}
	if completionFd >= 0 {
		s.fds = append(s.fds, completionFd)
		s.efd = append(s.efd, eventfd)
	}
	s.fds = append(s.fds, wakeFd)
	s.efd = append(s.efd, true)
	err := s.u.open(s.fds, s.efd)
	if err != nil {
		err = fmt.Errorf("engine: reaper sleeps in poll(2): io_uring: %w", err)
	}
	return s, err
}

// sleep blocks until a watched fd signals or timeout passes (0: no
// timeout); false when only the timeout fired.
func (s *sleeper) sleep(timeout time.Duration) bool {
	if s.u.ok() {
		woke, calls := s.u.wait(timeout)
		s.calls += calls
		return woke
	}
	pfd := make([]unix.PollFd, len(s.fds))
	for i, fd := range s.fds {
		pfd[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	ms := -1
	if timeout > 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	n, _ := unix.Poll(pfd, ms)
	s.calls++
	var buf [8]byte
	for i := range pfd {
		if s.efd[i] && pfd[i].Revents&unix.POLLIN != 0 {
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
