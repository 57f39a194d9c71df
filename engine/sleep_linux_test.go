package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/uring"
)

// TestSleepSurvivesArmingThreadExit: the reaper's sleep arms its requests
// (a POLL_ADD of a backend's ring fd, a READ of an eventfd) from whatever
// thread the reaper runs on, and keeps them armed across sleeps. When that
// thread exits, the kernel cancels the POLL_ADD at once (a request on an
// io_uring fd is tracked, REQ_F_INFLIGHT, and canceled at its submitter's
// exit) and ends the READ with ECANCELED when the eventfd fires (its
// wake-up runs as task work of a task that is gone). Each such end must
// wake the sleep, which then arms the request again from its own thread,
// and every later signal must still be seen.
func TestSleepSurvivesArmingThreadExit(t *testing.T) {
	watched, err := uring.New(uring.Config{Entries: 8, Unbound: true, NoModernFlags: true})
	if err != nil {
		t.Skipf("no io_uring: %v", err)
	}
	defer watched.Close()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	var w uringWait
	if err := w.open([]int{watched.Fd(), efd}, []bool{false, true}); err != nil {
		t.Skipf("no io_uring: %v", err)
	}
	defer w.close()

	// Arm everything from a thread that exits. A signal to that thread
	// while it sleeps (the Go runtime's preemption signal) does not cut
	// the sleep short: the io_uring_enter that armed the requests then
	// returns how many it submitted, and the sleep waits again, for its
	// timeout — whose completion is then not left behind for a later
	// sleep to take for its own.
	var first bool
	const firstSleep = 100 * time.Millisecond
	var took time.Duration
	onExitingThread(t, func() {
		tid, pid := unix.Gettid(), unix.Getpid()
		go func() {
			for range 3 {
				time.Sleep(firstSleep / 5)
				_ = unix.Tgkill(pid, tid, unix.SIGURG)
			}
		}()
		start := time.Now()
		first, _ = w.wait(firstSleep, 0)
		took = time.Since(start)
	})
	if first || took < firstSleep/2 {
		t.Fatalf("the first sleep ended after %v (woke %v) with nothing signalled, want its %v timeout", took, first, firstSleep)
	}
	wakes := func(what string, signal func()) {
		t.Helper()
		if signal != nil {
			signal()
		}
		start := time.Now()
		woke, _ := w.wait(time.Second, 0)
		if !woke || time.Since(start) > 900*time.Millisecond {
			t.Fatalf("%s: the sleep did not wake (woke %v after %v)", what, woke, time.Since(start))
		}
	}
	// The POLL_ADD's cancellation at the thread's exit wakes the sleep.
	wakes("POLL_ADD canceled at its thread's exit", nil)
	// The eventfd fires: the READ armed by the gone thread ends
	// (ECANCELED) without consuming the count; the sleep wakes and arms
	// a new READ, which finds the count and completes at once.
	signalEventfd := func() {
		if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	wakes("eventfd READ armed by a gone thread", signalEventfd)
	// From here everything is armed by this goroutine's threads, which
	// live: each signal wakes exactly one sleep.
	for i := range 3 {
		wakes("eventfd", signalEventfd)
		sqe := watched.GetSQE()
		sqe.PrepNop()
		sqe.SetUserData(uint64(i))
		if _, err := watched.Submit(); err != nil {
			t.Fatal(err)
		}
		wakes("a completion on the watched ring", nil)
		var cqe [1]uring.CQE
		if n, _ := watched.PeekCQEs(cqe[:]); n != 1 {
			t.Fatalf("watched ring: %d completions, want 1", n)
		}
	}
	if woke, _ := w.wait(50*time.Millisecond, 0); woke {
		t.Fatal("the sleep woke with nothing signalled")
	}
}

// The main goroutine keeps the process's main thread for itself, so that
// no test goroutine runs there: Go never ends that thread (a goroutine
// locked to it that exits leaves it parked for ever instead), and
// onExitingThread needs threads that end.
func init() { runtime.LockOSThread() }

// onExitingThread runs f on a goroutine locked to an OS thread that exits
// when f returns (runtime.LockOSThread without Unlock), and returns once
// the thread is gone.
func onExitingThread(t *testing.T, f func()) {
	t.Helper()
	tid := make(chan int)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			tid <- 0 // cannot happen: init holds the main thread
			return
		}
		f()
		tid <- unix.Gettid()
	}()
	id := <-tid
	if id == 0 {
		t.Fatal("a test goroutine ran on the main thread, which never exits")
	}
	task := fmt.Sprintf("/proc/self/task/%d", id)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if _, err := os.Stat(task); errors.Is(err, fs.ErrNotExist) {
			return
		}
	}
	t.Fatalf("thread %d did not exit", id)
}
