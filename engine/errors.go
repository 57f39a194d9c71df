package engine

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/hcomm-go/hcomm/internal/errs"
)

// Errors callers can test for with errors.Is (listed in doc.go).
var (
	// Configuration and life cycle.
	ErrBadConfig = errors.New("engine: invalid configuration")
	// ErrClosed: the engine (or the device or ring under it) was closed.
	// ErrClosed and ErrNotSupported are hcomm's shared sentinels (package
	// internal/errs): every package that returns them re-exports the same
	// value, so errors.Is(err, engine.ErrClosed) also holds for
	// vfio.ErrClosed, hugepage.ErrClosed, ...
	ErrClosed = errs.ErrClosed
	// ErrNotSupported: the backend or this machine cannot do what was
	// asked. It wraps errors.ErrUnsupported.
	ErrNotSupported = errs.ErrNotSupported

	// Submission.
	ErrQueueFull    = errors.New("engine: queue full")
	ErrBadTransfer  = errors.New("engine: invalid transfer")
	ErrForeignBlock = errors.New("engine: block belongs to another engine (or is the zero Block)")
	ErrFreedBlock   = errors.New("engine: block was freed")
	ErrOutOfBounds  = errors.New("engine: transfer exceeds its block, the device memory or the backend's limit")
	ErrAlignment    = errors.New("engine: transfer is not aligned as the backend needs (O_DIRECT: 4096-byte address, length and offset)")

	// IDs.
	ErrStaleID   = errors.New("engine: stale transfer ID (its slot was reused; use the callback or Wait sooner)")
	ErrUnknownID = errors.New("engine: unknown transfer ID")

	// Completion errors (Result.Err); each wraps the cause where there is one.
	ErrDevice   = errors.New("engine: device reported an error")
	ErrTimeout  = errors.New("engine: transfer timed out")
	ErrCanceled = errors.New("engine: transfer canceled by Close")
	ErrIO       = errors.New("engine: I/O failed")
	ErrShortIO  = errors.New("engine: short transfer (fewer bytes than asked)")
)

// Completion results travel as a Status (a transfer's slot holds it in one
// atomic word next to the byte count), so that reaping and Wait never
// allocate: the engine's own statuses and the common errnos map to
// preformatted errors, a backend's own through Backend.Err.
var statusErrs = [nCoreStatus]error{
	StatusOK:       nil,
	StatusCanceled: ErrCanceled,
	StatusTimeout:  ErrTimeout,
	StatusShort:    ErrShortIO,
	statusNoop:     fmt.Errorf("%w: a no-op staged after Close began", ErrCanceled),
}

// errnoErrs are preformatted ErrIO errors for the common errnos, so that a
// failed file transfer does not allocate either.
var errnoErrs [256]error

func init() {
	for i := 1; i < len(errnoErrs); i++ {
		errnoErrs[i] = fmt.Errorf("%w: %w", ErrIO, syscall.Errno(i))
	}
}

// errUnknownStatus is a status no one defined.
var errUnknownStatus = fmt.Errorf("%w: unknown completion status", ErrDevice)

// statusErr turns a completion status into the error callers see.
func (e *Engine) statusErr(s Status) error {
	switch {
	case s < nCoreStatus:
		return statusErrs[s]
	case s >= StatusErrno:
		return ErrnoStatusErr(s)
	case s >= StatusBackend:
		if err := e.be.Err(s); err != nil {
			return err
		}
	}
	return errUnknownStatus
}

// ErrnoStatusErr is the error of StatusErrno+errno: ErrIO wrapping the
// errno, preformatted for errnos below 256.
func ErrnoStatusErr(s Status) error {
	en := uint32(s - StatusErrno)
	if en < uint32(len(errnoErrs)) && en != 0 {
		return errnoErrs[en]
	}
	return fmt.Errorf("%w: %w", ErrIO, syscall.Errno(en))
}
