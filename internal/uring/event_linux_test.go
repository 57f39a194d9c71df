package uring

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func newEventfd(t *testing.T) int {
	t.Helper()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	return efd
}

func signalEventfd(t *testing.T, efd int, v uint64) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v) // eventfd(2): a host-order uint64
	if _, err := unix.Write(efd, b[:]); err != nil {
		t.Error(err)
	}
}

// TestEventfd: an 8-byte READ of an eventfd completes only once the
// eventfd is signalled, with the signalled count — how the engine sleeps on
// a device interrupt.
func TestEventfd(t *testing.T) {
	u := newTestRing(t, Config{Entries: 8})
	efd := newEventfd(t)
	counter := new(uint64)
	e, _ := u.NextSQE()
	e.PrepReadEventfd(efd, counter)
	e.SetUserData(7)
	if _, err := u.Submit(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, _ := u.PeekCQEs(make([]CQE, 1)); n != 0 {
		t.Fatal("eventfd READ completed before the eventfd was signalled")
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		signalEventfd(t, efd, 5)
	}()
	c := reap(t, u, 1)[0]
	if c.UserData() != 7 || c.Res() != 8 || *counter != 5 {
		t.Fatalf("eventfd READ: user data %d res %d (%v) counter %d, want 7, 8, 5", c.UserData(), c.Res(), c.Err(), *counter)
	}
}

// TestEINTR: signals aimed at the owner thread (40 over 400 ms) while it sleeps in
// io_uring_enter interrupt the wait (EINTR); the layer retries, and the wait
// ends normally when the eventfd fires.
func TestEINTR(t *testing.T) {
	u := newTestRing(t, Config{Entries: 8})
	efd := newEventfd(t)
	tid := unix.Gettid() // the owner goroutine is locked to this thread
	counter := new(uint64)
	e, _ := u.NextSQE()
	e.PrepReadEventfd(efd, counter)
	if _, err := u.Submit(); err != nil {
		t.Fatal(err)
	}
	start, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		<-start
		for i := 0; i < 40; i++ {
			time.Sleep(10 * time.Millisecond)
			// SIGURG: the Go runtime's own preemption signal, harmless.
			if err := unix.Tgkill(unix.Getpid(), tid, syscall.SIGURG); err != nil {
				t.Error(err)
				return
			}
		}
		signalEventfd(t, efd, 1)
	}()
	before := u.Stats().WaitEnters
	close(start)
	if _, err := u.SubmitAndWait(1); err != nil {
		t.Fatalf("SubmitAndWait interrupted by signals: %v", err)
	}
	<-done
	waits := u.Stats().WaitEnters - before
	t.Logf("%d waiting enters for one wait under 40 signals", waits)
	if waits < 2 {
		t.Fatalf("%d waiting enters: the signals never interrupted the wait, EINTR retry untested", waits)
	}
	if c := reap(t, u, 1)[0]; c.Res() != 8 {
		t.Fatalf("eventfd READ after EINTR retries: res %d (%v)", c.Res(), c.Err())
	}
}

// A signal that interrupts the wait of an io_uring_enter which has just
// submitted does not end SubmitAndWait early: the kernel then returns the
// number it submitted, not EINTR, with no completion yet, and the wait is
// made again for what it was asked to wait for. Each kind of ring, with
// and without a deadline.
func TestSubmitAndWaitSignaled(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		deadline bool
	}{
		{"bound", Config{Entries: 8}, false},
		{"bound/deadline", Config{Entries: 8}, true},
		{"unbound", Config{Entries: 8, Unbound: true, NoModernFlags: true}, false},
		{"unbound/deadline", Config{Entries: 8, Unbound: true, NoModernFlags: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newTestRing(t, tc.cfg)
			const fire = 200 * time.Millisecond
			sqe := u.GetSQE()
			if err := u.PrepTimeout(sqe, fire, 0, 0); err != nil {
				t.Fatal(err)
			}
			sqe.SetUserData(7)
			// SIGURG (the Go runtime's preemption signal: its handler
			// returns at once) at this thread, several times while it
			// waits.
			tid, pid := unix.Gettid(), unix.Getpid()
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
						_ = unix.Tgkill(pid, tid, unix.SIGURG)
					}
				}
			}()
			start := time.Now()
			var err error
			if tc.deadline {
				_, err = u.SubmitAndWaitTimeout(1, 10*time.Second)
			} else {
				_, err = u.SubmitAndWait(1)
			}
			took := time.Since(start)
			close(stop)
			<-done
			if err != nil {
				t.Fatalf("wait: %v", err)
			}
			if n := u.CQReady(); n != 1 || took < fire/2 {
				t.Fatalf("the wait returned after %v with %d completions ready, want the timeout's one after ~%v", took, n, fire)
			}
			cqes := reap(t, u, 1)
			if cqes[0].UserData() != 7 {
				t.Fatalf("completion %d, want the timeout's (7)", cqes[0].UserData())
			}
		})
	}
}

// TestTimeouts: TIMEOUT fires on time (generous upper bound), each of
// several timeouts in one batch uses its own duration (its own timespec
// memory), a count-based timeout completes early, and LINK_TIMEOUT cancels
// a read that never completes.
func TestTimeouts(t *testing.T) {
	u := newTestRing(t, Config{Entries: 16})
	durations := []time.Duration{300 * time.Millisecond, 60 * time.Millisecond, 150 * time.Millisecond}
	start := time.Now()
	for i, d := range durations {
		e, _ := u.NextSQE()
		if err := u.PrepTimeout(e, d, 0, 0); err != nil {
			t.Fatal(err)
		}
		e.SetUserData(uint64(i))
	}
	if _, err := u.Submit(); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < len(durations); k++ {
		c := reap(t, u, 1)[0]
		elapsed := time.Since(start)
		d := durations[c.UserData()]
		if !errors.Is(c.Err(), unix.ETIME) {
			t.Fatalf("timeout %v: res %d (%v), want -ETIME", d, c.Res(), c.Err())
		}
		if elapsed < d-time.Millisecond || elapsed > d+5*time.Second {
			t.Fatalf("timeout %v fired after %v", d, elapsed)
		}
		// Completion order must follow durations: 60, 150, 300 ms.
		if want := []uint64{1, 2, 0}[k]; c.UserData() != want {
			t.Fatalf("completion %d is timeout %v, want %v", k, d, durations[want])
		}
		t.Logf("timeout %v fired after %v", d, elapsed.Round(time.Millisecond))
	}

	// Count-based: completes (res 0) as soon as one other completion posts.
	e, _ := u.NextSQE()
	if err := u.PrepTimeout(e, time.Hour, 1, 0); err != nil {
		t.Fatal(err)
	}
	e.SetUserData(10)
	e, _ = u.NextSQE()
	e.PrepNop()
	e.SetUserData(11)
	got := byUserData(t, reap(t, u, 2))
	if got[10].Res() != 0 || got[11].Res() != 0 {
		t.Fatalf("count timeout res %d, NOP res %d, want 0, 0", got[10].Res(), got[11].Res())
	}

	// LINK_TIMEOUT: a read of a never-signalled eventfd, cancelled after 50 ms.
	efd := newEventfd(t)
	counter := new(uint64)
	start = time.Now()
	e, _ = u.NextSQE()
	e.PrepReadEventfd(efd, counter)
	e.SetFlags(SQEIOLink)
	e.SetUserData(20)
	e, _ = u.NextSQE()
	if err := u.PrepLinkTimeout(e, 50*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	e.SetUserData(21)
	got = byUserData(t, reap(t, u, 2))
	elapsed := time.Since(start)
	if !errors.Is(got[20].Err(), unix.ECANCELED) || !errors.Is(got[21].Err(), unix.ETIME) {
		t.Fatalf("linked read res %d (%v), link timeout res %d (%v): want -ECANCELED, -ETIME",
			got[20].Res(), got[20].Err(), got[21].Res(), got[21].Err())
	}
	if elapsed < 49*time.Millisecond || elapsed > 5*time.Second {
		t.Fatalf("link timeout of 50ms fired after %v", elapsed)
	}

	// A bounded wait on nothing returns ErrTimeout.
	start = time.Now()
	if _, err := u.SubmitAndWaitTimeout(1, 40*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("SubmitAndWaitTimeout with nothing in flight: %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el < 39*time.Millisecond {
		t.Fatalf("40ms wait returned after %v", el)
	}
}

// TestBufferSurvivesStackGrowth: memory handed to the kernel stays where
// the kernel writes it even when the submitting goroutine's stack grows
// (and is copied elsewhere) before the completion. A counter the compiler
// may keep on the stack is what the test gives PrepReadEventfd and
// PrepRead; before the Prep functions made their memory escape, the kernel
// wrote into the abandoned stack and the counter still read 0.
func TestBufferSurvivesStackGrowth(t *testing.T) {
	u := newTestRing(t, Config{Entries: 8})
	efd := newEventfd(t)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	counter, data := readAcrossStackGrowth(t, u, efd, p)
	if counter != 9 || data != "stack" {
		t.Fatalf("after the stack grew: counter %d, pipe data %q; want 9, %q", counter, data, "stack")
	}
}

//go:noinline
func readAcrossStackGrowth(t *testing.T, u *Ring, efd int, pipe [2]int) (uint64, string) {
	counter := new(uint64)
	buf := make([]byte, 5)
	e, _ := u.NextSQE()
	e.PrepReadEventfd(efd, counter)
	e, _ = u.NextSQE()
	e.PrepRead(pipe[0], buf, ^uint64(0))
	if _, err := u.Submit(); err != nil {
		t.Fatal(err)
	}
	growStack(64)
	signalEventfd(t, efd, 9)
	if _, err := unix.Write(pipe[1], []byte("stack")); err != nil {
		t.Fatal(err)
	}
	for _, c := range reap(t, u, 2) {
		if c.Err() != nil {
			t.Fatalf("read: %v", c.Err())
		}
	}
	return *counter, string(buf)
}

// growStack needs about depth KiB of stack, more than a goroutine starts
// with, so the runtime copies the stack to a larger one.
//
//go:noinline
func growStack(depth int) byte {
	var frame [1024]byte
	frame[depth%len(frame)] = byte(depth)
	if depth == 0 {
		return frame[0]
	}
	return growStack(depth-1) + frame[depth%len(frame)]
}
