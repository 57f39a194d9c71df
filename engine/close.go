package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
)

// Close closes the engine at once: transfers still in flight are canceled
// (each callback runs once, with ErrCanceled where the transfer did not
// complete), the backend is closed and the pool unmapped. It satisfies
// io.Closer. To let transfers finish first, use Shutdown.
func (e *Engine) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return e.Shutdown(ctx)
}

// Shutdown closes the engine gracefully, as net/http.Server.Shutdown does:
// it stops accepting transfers (Submit and Alloc return ErrClosed), waits
// for those in flight until ctx ends, then cancels the rest (each gets
// ErrCanceled), runs every outstanding callback exactly once (those left at
// cancellation on the caller, the reaper being stopped by then), stops the
// reaper, unmaps the pool from the backend, closes the backend and frees
// everything. A canceled ctx is not an error: Shutdown still closes
// everything and logs what it canceled. Closing again returns nil.
//
// Shutdown honours ctx in what it waits for that the engine does not
// control. When ctx ends while a callback is still running (on the reaper,
// or in another goroutine's Poll) and it goes on running for
// CallbackGrace, or while the backend still holds
// transfers it could not take back (file I/O the kernel cannot cancel),
// Shutdown returns an error wrapping ctx's error at once: the transfers
// are canceled for the caller (every callback still runs once, with
// ErrCanceled), and the engine finishes closing in the background — the
// reaper stops when the callback returns, the pool is unmapped and the
// backend closed once the backend has nothing outstanding. Until then a
// later Shutdown waits for that (or for its own ctx and returns the same
// error). Close, whose context has already ended, waits CallbackGrace for
// a blocked callback (Close called from inside a callback returns that
// way instead of deadlocking).
//
// A callback that panics while Shutdown runs it (poll mode drains on the
// caller; cancellations run on the caller in both modes): Shutdown still
// closes the engine, running every other callback once, and then panics
// with the first such value.
func (e *Engine) Shutdown(ctx context.Context) error {
	first := false
	e.closeOnce.Do(func() { first = true })
	if !first {
		select {
		case <-e.closedCh:
			return nil
		case <-e.stuckCh:
		}
		select {
		case <-e.closedCh:
			return nil
		case <-ctx.Done():
			return e.stuckErr
		}
	}
	e.closing.Store(true)

	var drainErr error
	for e.safely(func() { drainErr = e.drainAll(ctx) }) {
		// a callback polled by drainAll panicked: the engine is whole,
		// drain on (the panic goes up at the end).
	}
	if !e.stopCompletions(ctx) {
		e.goStuck(fmt.Errorf("engine: shutdown: a callback was still running when the context ended; the engine finishes closing when it returns: %w: %w", ErrCloseInBackground, ctxErr(ctx)))
		go func() {
			e.stopCompletions(context.Background())
			e.finishClose(ctx, drainErr)
		}()
		return e.stuckErr
	}
	return e.finishClose(ctx, drainErr)
}

// ctxErr is ctx's error: its cause when it has one.
func ctxErr(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return context.Canceled
}

// goStuck records what Shutdown returns when it leaves before the engine
// has closed, and lets a later Shutdown return it too.
func (e *Engine) goStuck(err error) {
	e.stuckErr = err
	close(e.stuckCh)
}

// finishClose cancels what is left, runs every outstanding callback once
// and releases everything, with the completion side stopped (the reaping
// flag held, or the reaper gone).
func (e *Engine) finishClose(ctx context.Context, drainErr error) error {
	e.runPending()
	end := e.tearDownStaging()
	batch := e.cancelOutstanding(end)
	canceled := 0
	for _, c := range batch {
		if c.Status == backend.StatusCanceled {
			canceled++
		}
	}
	e.runCallbacks(batch)
	e.released.Store(end)
	e.notify()
	if drainErr != nil && canceled > 0 {
		// drainErr alone is no news: Close's context has always ended, and
		// what had completed by then got its real result above.
		e.log.Info("engine: close canceled in-flight transfers", "canceled", canceled, "reason", drainErr)
	}
	var err error
	if held := e.outstanding(); held > 0 {
		// The backend could not take these back (the kernel still holds
		// file I/O): their callbacks have run with ErrCanceled, but the
		// memory they read or write must stay mapped until they end.
		stuck := fmt.Errorf("engine: shutdown: the backends (%s) still hold %d transfers they could not cancel (canceled for the caller); the pool is released when they end: %w: %w",
			e.memberNames(), held, ErrCloseInBackground, ctxErr(ctx))
		e.log.Warn("engine: close: transfers the backends could not cancel", "backends", e.memberNames(), "held", held)
		select {
		case <-e.stuckCh: // already returned (a blocked callback)
		default:
			e.goStuck(stuck)
		}
		err = stuck
		go func() {
			e.waitBackend()
			e.closeRelease()
		}()
	} else {
		err = e.closeRelease()
	}
	if p := e.cbPanic; p != nil {
		panic(p)
	}
	return err
}

// closeRelease releases everything and marks the engine closed.
func (e *Engine) closeRelease() error {
	defer close(e.closedCh)
	return e.release()
}

// waitBackend waits until the backend holds nothing more: it asks it to
// cancel again and again (uringfile's Cancel waits a while for the kernel)
// and drops what comes back, whose callbacks have already run.
func (e *Engine) waitBackend() {
	for e.outstanding() > 0 {
		e.forEach(func(m *member) {
			if m.be.Outstanding() > 0 {
				m.be.Cancel(e.batch)
			}
		})
		if e.outstanding() > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// safely runs f and recovers a panic of a callback f ran, keeping the first
// one for Shutdown to raise again; it reports whether f panicked.
func (e *Engine) safely(f func()) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			if e.cbPanic == nil {
				e.cbPanic = p
			}
			panicked = true
		}
	}()
	f()
	return false
}

// runPending runs what a panicking callback left of its batch.
func (e *Engine) runPending() {
	for len(e.pend) > 0 {
		e.safely(func() {
			p := e.pend
			e.pend = nil
			e.complete(p)
		})
	}
}

// runCallbacks completes batch on the caller, every callback once even when
// some panic.
func (e *Engine) runCallbacks(batch []backend.Completion) {
	if e.safely(func() { e.complete(batch) }) {
		e.runPending()
	}
}

// stopCompletions stops the reaper, or in poll mode takes the reaping flag
// for good. It waits for a callback in progress only until ctx ends, and
// then returns false: the completion side is not stopped yet.
func (e *Engine) stopCompletions(ctx context.Context) bool {
	e.stop.Store(true)
	if e.cfg.Mode == ModeReaper {
		e.sleeping.Store(sleepIdle) // make sure the wake-up goes through
		e.wakeReaper(false)
		e.wakeLazy() // a reaper in sleepLazy waits on lazyWake
		return e.waitStopped(ctx, func() bool {
			select {
			case <-e.done:
				return true
			default:
				return false
			}
		})
	}
	// Poll mode: an application goroutine (or a Wait/Drain polling for
	// it) may be inside Poll, with completions collected and callbacks
	// still to run. Take the reaping flag for good: wait for that Poll to
	// finish (it completes what it collected), and every later Poll
	// returns 0. Without this, cancelOutstanding would see those slots
	// open and complete them a second time.
	return e.waitStopped(ctx, func() bool { return e.reaping.CompareAndSwap(0, 1) })
}

// CallbackGrace is how long Shutdown (or Close) whose context has ended
// still waits for one callback in progress before it takes it as blocked
// and returns (the engine then finishes closing when the callback
// returns). Callbacks are meant to be short: many of them running one
// after another are always waited for.
const CallbackGrace = 100 * time.Millisecond

// waitStopped waits until stopped holds. The completion side's own work is
// short and always waited for; a callback (application code) until ctx
// ends, and then for CallbackGrace more: a callback still running by then
// is blocked, and waitStopped returns false.
func (e *Engine) waitStopped(ctx context.Context, stopped func() bool) bool {
	var seq uint64
	var since time.Time
	for i := 0; ; i++ {
		if stopped() {
			return true
		}
		if ctx.Err() != nil && e.inCallback.Load() {
			switch s := e.cbSeq.Load(); {
			case since.IsZero() || s != seq:
				seq, since = s, time.Now()
			case time.Since(since) >= CallbackGrace:
				return false
			}
		} else {
			since = time.Time{}
		}
		backoff(i)
	}
}

// backoff yields, then sleeps up to 1ms: for waits on application code
// (a callback) that may take long, without burning a CPU.
func backoff(i int) {
	if i < 64 {
		runtime.Gosched()
		return
	}
	time.Sleep(time.Duration(min(i-63, 10)) * 100 * time.Microsecond)
}

// tearDownStaging waits for reservations in progress to be published (a
// submitter never blocks between Reserve and Commit), forwards them, stops
// every future drain and returns the end of the published prefix. It
// returns holding the owner flag.
func (e *Engine) tearDownStaging() (end uint64) {
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
	e.tornDown = true
	e.tornEnd = b.Start() + uint64(b.Len())
	return e.tornEnd
}

// cancelOutstanding collects everything still open: what finished, what
// the canceled backend reports, then the rest (ErrCanceled); it counts them
// and returns them for the caller to complete. It is entered holding the
// owner flag and lets it go.
func (e *Engine) cancelOutstanding(end uint64) []backend.Completion {
	n := e.collectLocked(e.batch)
	e.forEach(func(m *member) {
		n += m.be.Cancel(e.batch[n:])
	})
	seen := make([]bool, e.depth)
	for _, c := range e.batch[:n] {
		seen[c.Tag&e.mask] = true
	}
	for pos := e.head; pos != end; pos++ {
		if !seen[pos&e.mask] && e.slots[pos&e.mask].state.Load()&^stateFailed != (pos+1)<<1|1 && n < len(e.batch) {
			e.batch[n] = backend.Completion{Tag: pos, Status: backend.StatusCanceled}
			n++
		}
	}
	e.countLocked(e.batch[:n])
	e.owner.Store(0)
	return e.batch[:n]
}

// release unmaps the pool from the backend and frees everything.
func (e *Engine) release() error {
	e.unmapped.Store(true)
	errs := []error{e.unmapArenas(), e.pool.Close()}
	e.forEach(func(m *member) {
		if err := m.be.Close(); err != nil {
			errs = append(errs, fmt.Errorf("engine: close the %s backend: %w", m.desc.Name, err))
		}
	})
	errs = append(errs, unix.Close(e.wakeFd))
	e.closeErr = errors.Join(errs...)
	if e.closeErr != nil {
		return fmt.Errorf("engine: close: %w", e.closeErr)
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
