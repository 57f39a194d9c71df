package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseDuringPoll: in poll mode, Close while another goroutine's Poll
// is running callbacks. Poll has already collected the transfers; Close
// must not complete them a second time (with ErrCanceled), and it must not
// return while one of their callbacks is still running.
func TestCloseDuringPoll(t *testing.T) {
	e, err := Open(small(Config{Target: TargetMemory, Mode: ModePoll, QueueDepth: 8}))
	must(t, err)
	b := alloc(t, e, 128)
	const n = 8
	counts := make([]atomic.Int32, n)
	var canceled, running atomic.Int32
	started := make(chan struct{})
	var once sync.Once
	cb := func(r Result) {
		running.Add(1)
		defer running.Add(-1)
		counts[r.User].Add(1)
		if r.Err != nil {
			canceled.Add(1)
		}
		if r.User == 0 {
			once.Do(func() { close(started) })
			time.Sleep(100 * time.Millisecond) // Close runs meanwhile
		}
	}
	for i := range n {
		_, err := e.Submit(Transfer{Src: HostAt(b, 0), Dst: HostAt(b, 64), Len: 64, Callback: cb, User: uint64(i)})
		must(t, err)
	}
	polled := make(chan int)
	go func() { polled <- e.Poll() }()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("Poll ran no callback")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no draining: straight to cancellation
	must(t, e.Close(ctx))
	if r := running.Load(); r != 0 {
		t.Errorf("Close returned while %d callbacks were still running", r)
	}
	<-polled
	for i := range n {
		if c := counts[i].Load(); c != 1 {
			t.Errorf("transfer %d: %d callbacks", i, c)
		}
	}
	if c := canceled.Load(); c != 0 {
		t.Errorf("%d transfers that Poll had collected (completed) were reported canceled", c)
	}
	if st := e.Stats(); st.Completed != n {
		t.Errorf("Stats.Completed = %d after %d transfers", st.Completed, n)
	}
}

// TestDrainBehindReservation: Drain covers every transfer whose Submit
// returned before the call, even when another submitter's reservation
// before it is not yet published (a goroutine preempted between Reserve
// and Commit). The held reservation is made by hand here, as fill does for
// a no-op, and published 50 ms later.
func TestDrainBehindReservation(t *testing.T) {
	for _, mode := range []Mode{ModeReaper, ModePoll} {
		e := open(t, Config{Target: TargetMemory, Mode: mode, QueueDepth: 8})
		b := alloc(t, e, 128)
		held, err := e.stage.Reserve(1)
		must(t, err)
		var done atomic.Bool
		_, err = e.Submit(Transfer{Src: HostAt(b, 0), Dst: HostAt(b, 64), Len: 64, Callback: func(Result) { done.Store(true) }})
		must(t, err)
		go func() {
			time.Sleep(50 * time.Millisecond)
			pos := held.Start()
			e.slots[pos&e.mask].state.Store((pos + 1) << 1)
			e.reqs[pos&e.mask] = req{op: opNone, done: 1}
			_ = e.stage.Commit(held)
			e.kick()
		}()
		must(t, e.Drain(ctxT(t, 20*time.Second)))
		if !done.Load() {
			t.Errorf("%v: Drain returned before the callback of a transfer submitted before it ran", mode)
		}
		must(t, e.Drain(ctxT(t, 20*time.Second))) // let the helper finish before Close
	}
}

// TestCloseWhilePolling: Close in poll mode while another goroutine calls
// Poll in a tight loop (and keeps submitting): Close must get the reaping
// flag, not be starved by the loop.
func TestCloseWhilePolling(t *testing.T) {
	for range 20 {
		e, err := Open(small(Config{Target: TargetMemory, Mode: ModePoll, QueueDepth: 8}))
		must(t, err)
		b := alloc(t, e, 128)
		var calls atomic.Int64
		stop := make(chan struct{})
		loopDone := make(chan struct{})
		go func() {
			defer close(loopDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = e.Submit(Transfer{Src: HostAt(b, 0), Dst: HostAt(b, 64), Len: 64, Callback: func(Result) { calls.Add(1) }})
				e.Poll()
			}
		}()
		time.Sleep(time.Millisecond)
		closed := make(chan error, 1)
		go func() { closed <- e.Close(context.Background()) }()
		select {
		case err := <-closed:
			must(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("Close starved by a goroutine looping Poll")
		}
		close(stop)
		<-loopDone
		if st := e.Stats(); st.Completed != uint64(calls.Load()) || st.Transfers != st.Completed {
			t.Fatalf("%d callbacks, %d completions, %d transfers: Stats counts what is not a transfer", calls.Load(), st.Completed, st.Transfers)
		}
	}
}
