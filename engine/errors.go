package engine

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/internal/errs"
)

// Errors callers can test for with errors.Is (listed in doc.go).
var (
	// Configuration and life cycle.
	ErrBadConfig = backend.ErrBadConfig
	// ErrClosed: the engine (or the device or ring under it) was closed.
	// ErrClosed and ErrNotSupported are hcomm's shared sentinels (package
	// internal/errs): every package that returns them re-exports the same
	// value, so errors.Is(err, engine.ErrClosed) also holds for
	// vfio.ErrClosed, hugepage.ErrClosed, ...
	ErrClosed = errs.ErrClosed
	// ErrNotSupported: the backend or this machine cannot do what was
	// asked. It wraps errors.ErrUnsupported.
	ErrNotSupported = errs.ErrNotSupported
	// ErrCloseInBackground: Shutdown returned when its context ended
	// before the engine had closed — a callback was still running, or the
	// backends still held transfers they could not take back. Every
	// transfer was canceled for the caller (each callback runs once); the
	// engine finishes closing when that callback returns or those
	// transfers end, and a later Shutdown waits for it. The error also
	// wraps the context's.
	ErrCloseInBackground = errors.New("engine: shutdown goes on in the background")

	// Submission.
	ErrQueueFull    = errors.New("engine: queue full")
	ErrBadTransfer  = backend.ErrBadTransfer
	ErrForeignBlock = errors.New("engine: block belongs to another engine (or is the zero Block)")
	ErrFreedBlock   = errors.New("engine: block was freed")
	ErrOutOfBounds  = backend.ErrOutOfBounds
	ErrAlignment    = backend.ErrAlignment

	// IDs.
	ErrStaleID   = errors.New("engine: stale transfer ID (its slot was reused; use the callback or Wait sooner)")
	ErrUnknownID = errors.New("engine: unknown transfer ID")

	// Completion errors (Result.Err); each wraps the cause where there is one.
	ErrDevice   = backend.ErrDevice
	ErrTimeout  = backend.ErrTimeout
	ErrCanceled = backend.ErrCanceled
	ErrIO       = backend.ErrIO
	ErrShortIO  = backend.ErrShortIO
)

// Completion results travel as a backend.Status (a transfer's slot holds it in one
// atomic word next to the byte count), so that reaping and Wait never
// allocate: the engine's own statuses and the common errnos map to
// preformatted errors, a backend's own through Backend.Err.
var statusErrs = [nCoreStatus]error{
	backend.StatusOK:       nil,
	backend.StatusCanceled: ErrCanceled,
	backend.StatusTimeout:  ErrTimeout,
	backend.StatusShort:    ErrShortIO,
	statusNoop:             fmt.Errorf("%w: a no-op staged after Close began", ErrCanceled),
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

// A backend-specific status (StatusBackend up to StatusErrno) carries the
// index of the backend that reported it in bits memberShift and up, from
// the moment it is reaped (countLocked), so that the backend's Err explains
// it after the staging entry is gone (Wait).
const (
	memberShift = 28
	memberMask  = (MaxBackends - 1) << memberShift
)

// tagStatus marks a backend-specific status with backend be.
func tagStatus(s backend.Status, be uint8) backend.Status {
	if s >= backend.StatusBackend && s < backend.StatusErrno {
		s |= backend.Status(be) << memberShift
	}
	return s
}

// statusErr turns a completion status into the error callers see.
func (e *Engine) statusErr(s backend.Status) error {
	switch {
	case s < nCoreStatus:
		return statusErrs[s]
	case s >= backend.StatusErrno && s < 1<<memberShift:
		return ErrnoStatusErr(s)
	case s >= backend.StatusBackend:
		m := e.members[s>>memberShift&(MaxBackends-1)].Load()
		if m == nil {
			break // removed since
		}
		if err := m.be.Err(s &^ memberMask); err != nil {
			return err
		}
	}
	return errUnknownStatus
}

// ErrnoStatusErr is the error of backend.StatusErrno+errno: ErrIO wrapping the
// errno, preformatted for errnos below 256.
func ErrnoStatusErr(s backend.Status) error {
	en := uint32(s - backend.StatusErrno)
	if en < uint32(len(errnoErrs)) && en != 0 {
		return errnoErrs[en]
	}
	return fmt.Errorf("%w: %w", ErrIO, syscall.Errno(en))
}
