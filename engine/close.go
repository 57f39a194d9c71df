package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
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
func (e *Engine) Shutdown(ctx context.Context) error {
	first := false
	e.closeOnce.Do(func() { first = true })
	if !first {
		<-e.closedCh
		return nil
	}
	e.closing.Store(true)
	defer close(e.closedCh)

	drainErr := e.drainAll(ctx) // new reservations are no-ops now
	e.stopCompletions()
	end := e.tearDownStaging()
	e.cancelOutstanding(end)
	if err := e.release(); err != nil {
		return err
	}
	if drainErr != nil {
		e.log.Info("engine: close canceled in-flight transfers", "reason", drainErr)
	}
	return nil
}

// stopCompletions stops the reaper, or in poll mode takes the reaping flag
// for good.
func (e *Engine) stopCompletions() {
	e.stop.Store(true)
	if e.cfg.Mode == ModeReaper {
		e.sleeping.Store(sleepIdle) // make sure the wake-up goes through
		e.wakeReaper(false)
		<-e.done
		return
	}
	// Poll mode: an application goroutine (or a Wait/Drain polling for
	// it) may be inside Poll, with completions collected and callbacks
	// still to run. Take the reaping flag for good: wait for that Poll to
	// finish (it completes what it collected), and every later Poll
	// returns 0. Without this, cancelOutstanding would see those slots
	// open and complete them a second time.
	for !e.reaping.CompareAndSwap(0, 1) {
		runtime.Gosched()
	}
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
	e.torn = true
	return b.Start() + uint64(b.Len())
}

// cancelOutstanding completes everything still open, on this goroutine:
// what finished, what the canceled backend reports, then the rest (with
// ErrCanceled). It is entered holding the owner flag and lets it go.
func (e *Engine) cancelOutstanding(end uint64) {
	n := e.collectLocked(e.batch)
	n += e.be.Cancel(e.batch[n:])
	seen := make([]bool, e.depth)
	for _, c := range e.batch[:n] {
		seen[c.Tag&e.mask] = true
	}
	for pos := e.head; pos != end; pos++ {
		if !seen[pos&e.mask] && e.slots[pos&e.mask].state.Load() != (pos+1)<<1|1 && n < len(e.batch) {
			e.batch[n] = Completion{Tag: pos, Status: StatusCanceled}
			n++
		}
	}
	e.countLocked(e.batch[:n])
	e.owner.Store(0)
	e.complete(e.batch[:n])
	e.released.Store(end)
	e.notify()
}

// release unmaps the pool from the backend and frees everything.
func (e *Engine) release() error {
	errs := []error{e.unmapArenas(), e.pool.Close(), e.be.Close(), unix.Close(e.wakeFd)}
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
