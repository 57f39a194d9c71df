package engine

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/uring"
)

// uringWait is the reaper's own small io_uring, used only by the reaper
// goroutine (created and closed there; not bound to its OS thread). It keeps one request armed per watched
// fd — a READ of each eventfd (the device's interrupt eventfd, the engine's
// wake eventfd; the READ consumes the count when it completes) or a POLL_ADD
// of an io_uring fd (the file backend's ring) — re-arming a request only
// after it fired, plus a TIMEOUT while transfers are outstanding. One
// io_uring_enter per sleep submits what needs arming and waits.
type uringWait struct {
	u            *uring.Ring
	fds          []int
	efd          []bool
	armed        []bool
	counters     []uint64 // READ targets (heap memory, stable while armed)
	timeoutArmed bool
	cqes         [8]uring.CQE
}

const timeoutTag = 1 << 32

func (w *uringWait) open(fds []int, efd []bool) error {
	// Unbound: the reaper goroutine is not locked to an OS thread. A
	// locked goroutine that yields (the reaper's spin) makes the runtime
	// hand its P to another thread and park its own on a futex each time
	// another goroutine is runnable: 0.8 futex calls per I/O in the
	// file-4k reaper benchmark. The features a bound ring would add
	// (SINGLE_ISSUER, DEFER_TASKRUN, a registered ring fd) save nothing
	// here: this ring makes one io_uring_enter per sleep.
	u, err := uring.New(uring.Config{Entries: 8, Unbound: true, NoModernFlags: true})
	if err != nil {
		return err
	}
	w.u, w.fds, w.efd = u, fds, efd
	w.armed = make([]bool, len(fds))
	w.counters = make([]uint64, len(fds))
	return nil
}

func (w *uringWait) ok() bool { return w.u != nil }

// wait arms what is not armed and waits for one completion; it reports
// whether a watched fd (rather than the timeout) fired and the system calls
// made. The first skip fds are not armed this time.
func (w *uringWait) wait(timeout time.Duration, skip int) (bool, uint64) {
	before := w.u.Stats().Enters
	for i, fd := range w.fds {
		if w.armed[i] || i < skip {
			continue
		}
		sqe := w.u.GetSQE()
		if sqe == nil {
			break
		}
		if w.efd[i] {
			sqe.PrepReadEventfd(fd, &w.counters[i])
		} else {
			sqe.PrepPollAdd(fd, unix.POLLIN)
		}
		sqe.SetUserData(uint64(i))
		w.armed[i] = true
	}
	if timeout > 0 && !w.timeoutArmed {
		if sqe := w.u.GetSQE(); sqe != nil && w.u.PrepTimeout(sqe, timeout, 0, 0) == nil {
			sqe.SetUserData(timeoutTag)
			w.timeoutArmed = true
		}
	}
	woke := false
	if _, err := w.u.SubmitAndWait(1); err == nil {
		n, _ := w.u.PeekCQEs(w.cqes[:])
		for i := range n {
			ud := w.cqes[i].UserData()
			if ud == timeoutTag {
				w.timeoutArmed = false
				continue
			}
			if ud < uint64(len(w.armed)) {
				w.armed[ud] = false
				woke = true
			}
		}
	}
	return woke, w.u.Stats().Enters - before
}

func (w *uringWait) close() {
	if w.u != nil {
		_ = w.u.Close()
		w.u = nil
	}
}
