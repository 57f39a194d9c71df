package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadline is a context.Context that ends at a deadline, made for
// hcomm_wait_completion_timeout's waits and reused: context.WithTimeout
// allocates a context and a timer per call (about 270 bytes in 4
// allocations), which on a read handle waited for once per record is a
// steady stream of garbage for the Go heap to grow by (hcomm.data waits
// for every read with a timeout). Only the waiter uses it, and only
// through Done and Err (engine.Wait, engine.Copy.Wait: a select on Done).
type deadline struct {
	timer *time.Timer
	done  chan struct{}
	fired atomic.Bool
	at    time.Time
}

var deadlines = sync.Pool{New: func() any {
	d := &deadline{done: make(chan struct{})}
	d.timer = time.AfterFunc(time.Hour, d.fire)
	d.timer.Stop()
	return d
}}

func (d *deadline) fire() {
	d.fired.Store(true)
	close(d.done)
}

// expired is the context of a wait with timeout 0: ended already (the
// wait looks once), shared, never released.
var expired = func() *deadline {
	d := &deadline{done: make(chan struct{})}
	d.fire()
	return d
}()

// newDeadline returns a context that ends after timeout; give it back with
// release once the wait is over.
func newDeadline(timeout time.Duration) *deadline {
	if timeout <= 0 {
		return expired
	}
	d := deadlines.Get().(*deadline)
	d.at = time.Now().Add(timeout)
	d.timer.Reset(timeout)
	return d
}

// release stops the timer. A deadline whose timer had not fired goes back
// to the pool; one that fired (or is firing: Stop cannot wait for it) has a
// closed channel and is left to the garbage collector, so a wait that ran
// out costs one deadline.
func (d *deadline) release() {
	if d != expired && d.timer.Stop() {
		deadlines.Put(d)
	}
}

func (d *deadline) Deadline() (time.Time, bool) { return d.at, true }
func (d *deadline) Done() <-chan struct{}       { return d.done }
func (d *deadline) Value(any) any               { return nil }

func (d *deadline) Err() error {
	if d.fired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

var _ context.Context = (*deadline)(nil)
