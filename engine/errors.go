package engine

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/hcomm-go/hcomm/vfio/hdma"
)

// Errors callers can test for with errors.Is (listed in doc.go).
var (
	// Configuration and life cycle.
	ErrBadConfig   = errors.New("engine: invalid configuration")
	ErrClosed      = errors.New("engine: closed")
	ErrUnsupported = errors.New("engine: not supported by this target")

	// Submission.
	ErrQueueFull    = errors.New("engine: queue full")
	ErrBadTransfer  = errors.New("engine: invalid transfer")
	ErrForeignBlock = errors.New("engine: block belongs to another engine (or is the zero Block)")
	ErrFreedBlock   = errors.New("engine: block was freed")
	ErrOutOfBounds  = errors.New("engine: transfer exceeds its block or device memory")
	ErrAlignment    = errors.New("engine: O_DIRECT needs 4096-byte aligned address, length and offset")

	// IDs.
	ErrStaleID   = errors.New("engine: stale transfer ID (its slot was reused; use the callback or Wait sooner)")
	ErrUnknownID = errors.New("engine: unknown transfer ID")

	// Completion errors (Result.Err); each wraps the cause where there is one.
	ErrDevice   = errors.New("engine: device reported an error")
	ErrTimeout  = errors.New("engine: transfer timed out")
	ErrCanceled = errors.New("engine: transfer canceled by Close")
	ErrIO       = errors.New("engine: file I/O failed")
	ErrShortIO  = errors.New("engine: short file I/O")
)

// Completion results travel as a small code (a transfer's slot holds it in
// one atomic word next to the byte count), so that reaping and Wait never
// allocate. code → error is a fixed table of preformatted errors.
const (
	codeOK = iota
	codeIOMMU
	codeDevMemBound
	codeBadDesc
	codeReset
	codeDevErr
	codeUnknownStatus
	codeTimeout
	codeCanceled
	codeCanceledReset
	codeShort
	codeNoRoute
	nCodes
	// codeErrnoBase + errno: a file operation failed with errno.
	codeErrnoBase = 0x10000
)

var codeErrs = [nCodes]error{
	codeOK:            nil,
	codeIOMMU:         fmt.Errorf("%w: %w", ErrDevice, hdma.ErrIOMMUFault),
	codeDevMemBound:   fmt.Errorf("%w: %w", ErrDevice, hdma.ErrDevMemBounds),
	codeBadDesc:       fmt.Errorf("%w: %w", ErrDevice, hdma.ErrBadDescriptor),
	codeReset:         fmt.Errorf("%w: %w", ErrDevice, hdma.ErrDeviceReset),
	codeDevErr:        fmt.Errorf("%w: %w", ErrDevice, hdma.ErrDeviceError),
	codeUnknownStatus: fmt.Errorf("%w: %w", ErrDevice, hdma.ErrUnknownStatus),
	codeTimeout:       fmt.Errorf("%w: %w", ErrTimeout, hdma.ErrTimeout),
	codeCanceled:      ErrCanceled,
	codeCanceledReset: fmt.Errorf("%w: %w", ErrCanceled, hdma.ErrDeviceReset),
	codeShort:         ErrShortIO,
	codeNoRoute:       fmt.Errorf("%w: no path for this transfer", ErrBadTransfer),
}

// errnoErrs are preformatted ErrIO errors for the common errnos, so that a
// failed file transfer does not allocate either.
var errnoErrs [256]error

func init() {
	for i := 1; i < len(errnoErrs); i++ {
		errnoErrs[i] = fmt.Errorf("%w: %w", ErrIO, syscall.Errno(i))
	}
}

// codeErr turns a result code into the error callers see.
func codeErr(code uint32) error {
	if code < nCodes {
		return codeErrs[code]
	}
	if code >= codeErrnoBase {
		if en := code - codeErrnoBase; en < uint32(len(errnoErrs)) {
			return errnoErrs[en]
		}
		return fmt.Errorf("%w: %w", ErrIO, syscall.Errno(code-codeErrnoBase))
	}
	return codeErrs[codeUnknownStatus]
}

// hdmaCode maps a driver completion error to a result code.
func hdmaCode(err error) uint32 {
	switch err {
	case nil:
		return codeOK
	case hdma.ErrIOMMUFault:
		return codeIOMMU
	case hdma.ErrDevMemBounds:
		return codeDevMemBound
	case hdma.ErrBadDescriptor:
		return codeBadDesc
	case hdma.ErrDeviceReset:
		return codeReset
	case hdma.ErrDeviceError:
		return codeDevErr
	case hdma.ErrTimeout:
		return codeTimeout
	}
	return codeUnknownStatus
}
