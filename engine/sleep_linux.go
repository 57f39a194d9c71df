package engine

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/ring"
)

// uringWait is the reaper's own small io_uring, bound to the reaper's OS
// thread (created and closed there): one POLL_ADD per watched fd, re-armed
// only after it fired, and a TIMEOUT while transfers are outstanding. One
// io_uring_enter per sleep submits what needs arming and waits.
type uringWait struct {
	u            *ring.Uring
	armed        []bool
	timeoutArmed bool
	cqes         [8]ring.CQE
}

const timeoutTag = 1 << 32

func (w *uringWait) open(nfds int) error {
	u, err := ring.NewUring(ring.UringConfig{Entries: 8})
	if err != nil {
		return err
	}
	w.u, w.armed = u, make([]bool, nfds)
	return nil
}

func (w *uringWait) ok() bool { return w.u != nil }

// wait arms what is not armed and waits for one completion; it reports
// whether an fd (rather than the timeout) fired and the system calls made.
func (w *uringWait) wait(fds []int, timeout time.Duration) (bool, uint64) {
	before := w.u.Stats().Enters
	for i, fd := range fds {
		if w.armed[i] {
			continue
		}
		sqe := w.u.GetSQE()
		if sqe == nil {
			break
		}
		sqe.PrepPollAdd(fd, unix.POLLIN)
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
