package uring

import (
	"errors"
	"fmt"

	"github.com/hcomm-go/hcomm/internal/errs"
)

// Sentinel errors, for errors.Is (listed in doc.go). Kernel errors are
// wrapped as unix.Errno values beside them.
var (
	// ErrClosed: the Ring was closed. hcomm's shared sentinel (package
	// internal/errs), the same value as engine.ErrClosed.
	ErrClosed = errs.ErrClosed
	// ErrWrongThread: a call came from a thread other than the ring's owner
	// (the kernel refuses it: EEXIST for SINGLE_ISSUER, EBADF for a
	// registered ring fd, which is per thread).
	ErrWrongThread = errors.New("uring: used from a thread other than its owner")
	// ErrSQFull: no submission entry is free even after submitting.
	ErrSQFull = errors.New("uring: submission queue full")
	// ErrBusy: the kernel refused to take more work now (EBUSY/EAGAIN:
	// completion queue overflow backlog); reap completions and retry.
	ErrBusy = errors.New("uring: busy: reap completions first")
	// ErrNotFromRing: an SQE that this ring did not hand out.
	ErrNotFromRing = errors.New("uring: SQE does not belong to this ring")
	// ErrNotSupported: the kernel lacks an io_uring feature, opcode or
	// register operation; the message names it and the release that added
	// it. hcomm's shared sentinel (package internal/errs), the same value
	// as engine.ErrNotSupported; it wraps errors.ErrUnsupported.
	ErrNotSupported = errs.ErrNotSupported
	// ErrConfig: a Config that cannot work (checked before the kernel is
	// asked).
	ErrConfig = errors.New("uring: invalid config")
	// ErrTimeout: SubmitAndWaitTimeout's timeout expired first (ETIME).
	ErrTimeout = errors.New("uring: wait timed out")
	// ErrMemlock: registering buffers exceeded RLIMIT_MEMLOCK without
	// CAP_IPC_LOCK.
	ErrMemlock = errors.New("uring: registered buffers exceed RLIMIT_MEMLOCK")
)

// errRingClosed is ErrClosed as a closed Ring returns it, made once so that
// the refusal allocates nothing.
var errRingClosed = fmt.Errorf("uring: ring %w", ErrClosed)
