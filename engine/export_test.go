package engine

import "time"

// HoldReservation reserves one staging entry by hand and returns the
// function that publishes it as a no-op, as a submitter preempted between
// Reserve and Commit would (TestDrainBehindReservation).
func (e *Engine) HoldReservation() (publish func(), err error) {
	held, err := e.stage.Reserve(1)
	if err != nil {
		return nil, err
	}
	return func() {
		e.fillNoop(held.Start())
		_ = e.stage.Commit(held)
		e.kick(1)
	}, nil
}

// Debug reports whether the package was built with -tags hcommdebug.
const Debug = debug

// ReaperStandsAside reports whether the reaper sleeps beside reaping
// waiters (sleepLazy) at this moment.
func (e *Engine) ReaperStandsAside() bool { return e.sleeping.Load() == sleepLazy }

// LastYield is when Poll or a batched wait last yielded to the Go
// scheduler (yieldEvery); read it on the goroutine that polls.
func (e *Engine) LastYield() time.Time { return e.yieldAt }

// SetReaperTick makes d the reaper's timeout while transfers are
// outstanding (and a batched wait's), in place of tick: with an hour, a
// completion that only that timeout would notice shows as a hang.
func (e *Engine) SetReaperTick(d time.Duration) {
	e.tickOverride.Store(int64(d))
	e.sleepStale.Store(true) // the reaper re-reads its timeouts
}

// SetReaperLazy makes d the reaper's first lazy sleep beside waiters, in
// place of lazyMin.
func (e *Engine) SetReaperLazy(d time.Duration) { e.lazyOverride.Store(int64(d)) }
