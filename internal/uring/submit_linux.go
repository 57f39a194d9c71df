package uring

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/atomicrel"
)

// GetSQE hands out the next free submission entry, or nil when the
// submission queue is full (submit, then retry; or use NextSQE). The entry
// is the kernel-shared slot itself: fill it with one of the Prep methods.
// It is published by the next Submit or SubmitAndWait. No system call.
func (u *Ring) GetSQE() *SQE {
	if u.closed {
		return nil
	}
	if u.sqeTail-u.sqHeadCache >= u.sqEntries {
		// Acquire: the kernel advances the SQ head once it has consumed
		// (copied) an SQE; only then may the slot be rewritten.
		u.sqHeadCache = atomic.LoadUint32(u.sqHead)
		if u.sqeTail-u.sqHeadCache >= u.sqEntries {
			return nil
		}
	}
	e := &u.sqes[u.sqeTail&u.sqMask]
	u.sqeTail++
	return e
}

// NextSQE is GetSQE that, when the queue is full, submits what is queued
// (one io_uring_enter) and tries again. With SQPOLL it then waits for the
// SQ thread to make room; otherwise ErrSQFull if there is still none.
func (u *Ring) NextSQE() (*SQE, error) {
	if e := u.GetSQE(); e != nil {
		return e, nil
	}
	if _, err := u.Submit(); err != nil {
		return nil, err
	}
	if e := u.GetSQE(); e != nil {
		return e, nil
	}
	if u.sqpoll {
		// The SQ thread has not consumed the queue yet: wait until it
		// has made room (IORING_ENTER_SQ_WAIT), as liburing does. The
		// kernel ends that wait early, returning 0 rather than EINTR,
		// when a signal is pending (Go's runtime signals its threads),
		// so wait again until there is room; wake the thread first if
		// it sleeps, or the wait would never end.
		for {
			flags := uint32(enterSQWait)
			if atomic.LoadUint32(u.sqFlags)&sqNeedWakeup != 0 {
				flags |= enterSQWakeup
			}
			if _, err := u.enterWait(0, 0, flags, time.Time{}); err != nil {
				return nil, err
			}
			if e := u.GetSQE(); e != nil {
				return e, nil
			}
		}
	}
	return nil, ErrSQFull
}

// flushSQ publishes the SQEs handed out since the last flush with one store
// of the SQ tail and returns how many SQEs the kernel has yet to consume.
// With SQPOLL, where no enter reports what was submitted, the newly
// published SQEs are counted as submissions here.
func (u *Ring) flushSQ() uint32 {
	if u.sqeHead != u.sqeTail {
		if u.sqpoll {
			u.stats.Submissions += uint64(u.sqeTail - u.sqeHead)
		}
		u.sqeHead = u.sqeTail
		if u.sqpoll {
			// Release, and a full barrier before the NEED_WAKEUP check
			// that follows (liburing's io_uring_smp_mb): the SQ thread
			// reads the tail concurrently and must see complete SQEs.
			// XCHG on amd64; on arm64 STLR, which the flags' LDAR
			// below cannot pass (acquire after release is ordered).
			atomic.StoreUint32(u.sqTail, u.sqeTail)
		} else {
			// Without SQPOLL the kernel reads the tail only inside an
			// io_uring_enter — this thread's, after the store, or
			// another thread's after Publish: a release store (a plain
			// MOV on amd64, STLR on arm64), so that the SQEs' contents are visible to
			// whichever thread's enter reads the tail.
			atomicrel.StoreUint32(u.sqTail, u.sqeTail)
		}
	}
	return u.sqeTail - atomic.LoadUint32(u.sqHead)
}

// Publish makes the SQEs handed out since the last flush visible to the
// kernel — one store of the SQ tail — without a system call, and returns
// how many published SQEs the kernel has not consumed yet. The kernel
// takes them at the next io_uring_enter with to_submit covering them, made
// by any thread (Submit, SubmitAndWait, or a raw enter on another thread
// with to_submit from PublishedShared: an enter that finds fewer SQEs than
// to_submit returns without waiting). Not for SQPOLL rings (a sleeping SQ
// thread needs the wake-up Submit makes).
func (u *Ring) Publish() int {
	if u.closed {
		return 0
	}
	return int(u.flushSQ())
}

// Unsubmitted is how many published SQEs the kernel has not consumed yet
// (no system call; 0 once closed).
func (u *Ring) Unsubmitted() int {
	if u.closed {
		return 0
	}
	// Acquire: the kernel advances the head once it has consumed an SQE.
	return int(u.sqeHead - atomic.LoadUint32(u.sqHead))
}

// PublishedShared is how many published SQEs the kernel has not consumed
// yet, read from the kernel-shared tail and head: unlike Unsubmitted it may
// be called from any goroutine, concurrently with the ring's user (the
// answer may be stale by the time it is used).
func (u *Ring) PublishedShared() int {
	if u.closed {
		return 0
	}
	// Acquire both: the tail pairs with Publish's release store.
	return int(atomic.LoadUint32(u.sqTail) - atomic.LoadUint32(u.sqHead))
}

// SQShared reads the kernel-shared SQ tail (what was published) and head
// (what the kernel has consumed). Like PublishedShared it may be called
// from any goroutine; a position p is consumed once int32(head-p) >= 0.
func (u *Ring) SQShared() (tail, head uint32) {
	if u.closed {
		return 0, 0
	}
	return atomic.LoadUint32(u.sqTail), atomic.LoadUint32(u.sqHead)
}

// cqNeedsEnter reports kernel-side work only an enter with GETEVENTS will
// finish: deferred task work (TASKRUN, set thanks to TASKRUN_FLAG) or
// completions that overflowed into the kernel's backlog.
func (u *Ring) cqNeedsEnter() bool {
	return atomic.LoadUint32(u.sqFlags)&(sqCQOverflow|sqTaskrun) != 0
}

// Submit publishes the queued SQEs and, when needed, makes one
// non-blocking io_uring_enter: it returns as soon as the kernel has taken
// the batch, without waiting for completions. With SQPOLL it makes no
// system call unless the SQ thread sleeps. Returns the SQEs submitted.
func (u *Ring) Submit() (int, error) {
	if u.closed {
		return 0, errRingClosed
	}
	pending := u.flushSQ()
	var flags uint32
	if u.sqpoll {
		if atomic.LoadUint32(u.sqFlags)&sqNeedWakeup == 0 {
			return int(pending), nil
		}
		flags |= enterSQWakeup
		pending = 0 // the SQ thread submits; to_submit is ignored
	}
	if u.cqNeedsEnter() {
		flags |= enterGetevents // min_complete 0: runs task work, never sleeps
	}
	if pending == 0 && flags == 0 {
		return 0, nil
	}
	n, err := u.enterNoWait(pending, flags)
	if !u.sqpoll {
		u.stats.Submissions += uint64(n)
	}
	return n, err
}

// SubmitAndWait publishes the queued SQEs and waits, in the same
// io_uring_enter, until at least waitNr completions are ready (reap them
// with PeekCQEs). It makes no system call when nothing is queued and
// waitNr completions are already there.
func (u *Ring) SubmitAndWait(waitNr int) (int, error) {
	if u.closed {
		return 0, errRingClosed
	}
	if waitNr <= 0 {
		return u.Submit()
	}
	return u.submitWait(waitNr, enterGetevents, time.Time{})
}

// SubmitAndWaitTimeout is SubmitAndWait bounded by d: it returns ErrTimeout
// (wrapping ETIME) when fewer than waitNr completions are ready once d has
// passed. A retry after a signal waits only for what is left of d. Needs
// IORING_FEAT_EXT_ARG (Linux 5.11; ErrNotSupported otherwise).
func (u *Ring) SubmitAndWaitTimeout(waitNr int, d time.Duration) (int, error) {
	if u.closed {
		return 0, errRingClosed
	}
	if u.features&FeatExtArg == 0 {
		return 0, fmt.Errorf("uring: wait with timeout: needs IORING_FEAT_EXT_ARG (Linux 5.11): %w", ErrNotSupported)
	}
	if waitNr <= 0 {
		return u.Submit()
	}
	return u.submitWait(waitNr, enterGetevents|enterExtArg, time.Now().Add(d))
}

// submitWait is the body of SubmitAndWait(Timeout): publish, wake an
// SQPOLL thread that sleeps (it submits; to_submit is ignored), skip the
// system call when nothing is queued and enough completions are there, else
// one waiting enter with flags (deadline used with enterExtArg).
func (u *Ring) submitWait(waitNr int, flags uint32, deadline time.Time) (int, error) {
	pending := u.flushSQ()
	if u.sqpoll {
		if atomic.LoadUint32(u.sqFlags)&sqNeedWakeup != 0 {
			flags |= enterSQWakeup
		}
		pending = 0
	}
	if pending == 0 && u.CQReady() >= waitNr && !u.cqNeedsEnter() {
		return 0, nil
	}
	n, err := u.enterWait(pending, uint32(waitNr), flags, deadline)
	if !u.sqpoll {
		u.stats.Submissions += uint64(n)
	}
	return n, err
}

// CQReady is the number of completions ready to reap (no system call; 0
// once closed).
func (u *Ring) CQReady() int {
	if u.closed {
		return 0
	}
	// Acquire on the kernel's tail: pairs with its release when posting.
	return int(atomic.LoadUint32(u.cqTail) - *u.cqHead)
}

// PeekCQEs copies up to len(dst) ready completions into dst, oldest first,
// consumes them with one store of the CQ head, and returns how many. It
// makes one non-blocking io_uring_enter only when the queue is empty and the
// kernel flags work that only such an enter finishes (deferred task work,
// overflowed completions). Never blocks, never allocates.
func (u *Ring) PeekCQEs(dst []CQE) (int, error) {
	if u.closed {
		return 0, errRingClosed
	}
	head := *u.cqHead // written only by this thread
	// Acquire: the kernel fills a CQE before it publishes the tail.
	tail := atomic.LoadUint32(u.cqTail)
	if tail == head && u.cqNeedsEnter() {
		if _, err := u.enterNoWait(0, enterGetevents); err != nil {
			return 0, err
		}
		tail = atomic.LoadUint32(u.cqTail)
	}
	n := tail - head
	if n > uint32(len(dst)) {
		n = uint32(len(dst))
	}
	for i := uint32(0); i < n; i++ {
		dst[i] = u.cqes[(head+i)&u.cqMask]
	}
	// Release: the copies above are done before the kernel may reuse the
	// slots (pairs with the kernel's smp_load_acquire of the head). A
	// release store (MOV on amd64, STLR on arm64), not
	// atomic.StoreUint32's full barrier (XCHG on amd64): nothing after it
	// needs ordering against it. The CQ tail load above is acquire (LDAR on
	// arm64), pairing with the kernel's smp_store_release of the tail, so
	// the entries copied are the ones the kernel wrote.
	atomicrel.StoreUint32(u.cqHead, head+n)
	u.stats.Completions += uint64(n)
	return int(n), nil
}

// WaitCQEs waits until at least n completions are ready (a waiting
// io_uring_enter unless they already are), then reaps up to len(dst).
func (u *Ring) WaitCQEs(dst []CQE, n int) (int, error) {
	if _, err := u.SubmitAndWait(n); err != nil {
		return 0, err
	}
	return u.PeekCQEs(dst)
}

// enterNoWait makes an io_uring_enter that cannot sleep: submission only,
// or GETEVENTS with min_complete 0 (run task work, post what is done). It
// uses RawSyscall6, skipping the Go scheduler's entersyscall/exitsyscall
// bookkeeping (tens of ns per call, a large share of a NOP batch of 1): the
// call returns after bounded in-kernel work, so not handing the P to another
// thread costs nothing. Operations that would block are punted by the
// kernel to its io-wq workers, never executed by this call.
func (u *Ring) enterNoWait(toSubmit, flags uint32) (int, error) {
	for {
		u.stats.Enters++
		r, _, errno := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, u.enterFd, uintptr(toSubmit), 0,
			uintptr(flags|u.enterFlags), 0, 0)
		if errno == unix.EINTR {
			// The kernel returns EINTR only when it submitted nothing in
			// this call: retry with what is still pending.
			if toSubmit != 0 {
				toSubmit = u.sqeTail - atomic.LoadUint32(u.sqHead)
			}
			continue
		}
		if errno != 0 {
			return 0, u.enterErr("submit", toSubmit, 0, errno)
		}
		return int(r), nil
	}
}

// enterWait makes an io_uring_enter that may sleep until minComplete
// completions are ready. It uses Syscall6 so that the Go scheduler hands
// this thread's P to other goroutines while it sleeps; RawSyscall6 would
// stall them for the whole wait. A signal (e.g. SIGCHLD or the runtime's
// preemption signal) during the wait does not end it: the kernel returns
// EINTR when it submitted nothing in that call, and the number submitted
// when it did — with fewer than minComplete completions ready; either way
// enterWait waits again. It returns the SQEs submitted over all its calls.
//
// With IORING_ENTER_EXT_ARG in flags, deadline bounds the wait: the
// kernel reads the timeout from u.waitArg/u.waitTS (heap memory of the
// Ring, valid for the whole call) and answers ETIME when it expires.
func (u *Ring) enterWait(toSubmit, minComplete, flags uint32, deadline time.Time) (int, error) {
	submitted := 0
	for {
		var arg, argSz uintptr
		if flags&enterExtArg != 0 {
			left := max(time.Until(deadline), 0)
			u.waitTS = kernelTimespec{Sec: int64(left / time.Second), Nsec: int64(left % time.Second)}
			u.waitArg = geteventsArg{Ts: uint64(uintptr(unsafe.Pointer(&u.waitTS)))}
			arg, argSz = uintptr(unsafe.Pointer(&u.waitArg)), unsafe.Sizeof(u.waitArg)
		}
		u.stats.Enters++
		u.stats.WaitEnters++
		r, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, u.enterFd, uintptr(toSubmit), uintptr(minComplete),
			uintptr(flags|u.enterFlags), arg, argSz)
		if errno == unix.EINTR {
			toSubmit = u.sqeTail - atomic.LoadUint32(u.sqHead)
			if u.sqpoll {
				toSubmit = 0
			}
			continue
		}
		if errno == unix.ETIME {
			return 0, fmt.Errorf("uring: io_uring_enter (wait %d): %w: %w", minComplete, ErrTimeout, errno)
		}
		if errno != 0 {
			return submitted, u.enterErr("submit and wait", toSubmit, minComplete, errno)
		}
		submitted += int(r)
		// A call that submitted returns how many it took even when a
		// signal (or the deadline) ended its wait before minComplete
		// completions were there: the kernel reports EINTR (or ETIME)
		// only when it submitted nothing. Wait again for the rest.
		// (The kernel waits for at most a full CQ.)
		if toSubmit == 0 || u.CQReady() >= min(int(minComplete), int(u.cqEntries)) {
			return submitted, nil
		}
		toSubmit = 0
		if !u.sqpoll {
			toSubmit = u.sqeTail - atomic.LoadUint32(u.sqHead)
		}
		if flags&enterExtArg != 0 && !time.Now().Before(deadline) {
			return submitted, fmt.Errorf("uring: io_uring_enter (wait %d): %w: %w", minComplete, ErrTimeout, unix.ETIME)
		}
	}
}

func (u *Ring) enterErr(what string, toSubmit, minComplete uint32, errno unix.Errno) error {
	err := fmt.Errorf("uring: io_uring_enter (%s %d, wait %d): %w", what, toSubmit, minComplete, errno)
	if errno == unix.EBUSY || errno == unix.EAGAIN {
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return u.threadErr(err)
}
