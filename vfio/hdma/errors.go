package hdma

import (
	"errors"
	"fmt"

	"github.com/hcomm-go/hcomm/internal/errs"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
)

// Errors callers can test for with errors.Is.
var (
	// Device-level errors.
	ErrNotHDMA   = errors.New("hdma: device is not an HDMA device")
	ErrVersion   = errors.New("hdma: unsupported HDMA model version")
	ErrBadConfig = errors.New("hdma: invalid configuration")
	ErrNotReady  = errors.New("hdma: device did not become ready")
	ErrFatal     = errors.New("hdma: device halted on a fatal fault")
	ErrEnabled   = errors.New("hdma: device is enabled; queues are configured while it is disabled")
	// ErrClosed: the driver was closed. It is hcomm's one ErrClosed
	// (package internal/errs), the same value as vfio.ErrClosed and
	// engine.ErrClosed.
	ErrClosed = errs.ErrClosed

	// Submission errors.
	ErrQueueFull = errors.New("hdma: submission queue full")
	// ErrRecoveryNeeded: the device was reset (a status-4 completion was
	// seen, or a descriptor timed out); call Driver.Recover before
	// submitting again.
	ErrRecoveryNeeded = errors.New("hdma: device needs recovery")

	// Completion errors (Completion.Err), one per model status, plus the
	// driver's own timeout.
	ErrIOMMUFault    = errors.New("hdma: IOMMU fault")                        // status 1
	ErrDevMemBounds  = errors.New("hdma: device-memory access out of bounds") // status 2
	ErrBadDescriptor = errors.New("hdma: device refused the descriptor")      // status 3
	ErrDeviceReset   = errors.New("hdma: aborted by a device reset")          // status 4, or failed by recovery
	ErrDeviceError   = errors.New("hdma: internal device error")              // status 5
	ErrUnknownStatus = errors.New("hdma: unknown completion status")
	ErrTimeout       = errors.New("hdma: descriptor timed out (device stalled)")
)

// errDriverClosed is ErrClosed as Enqueue returns it after Close, made once
// so that the refusal allocates nothing.
var errDriverClosed = fmt.Errorf("hdma: driver %w", ErrClosed)

// nested is an error of this package as the cause in another of its
// messages, which keeps the "hdma: " prefix to one. The sentinels carry the
// prefix because the queues return them bare (ErrQueueFull, the completion
// errors): the hot path allocates no wrapper.
func nested(err error) error { return errs.Nested("hdma: ", err) }

// statusErrs maps a completion status to its error; nil for OK.
var statusErrs = [...]error{
	model.StatusOK:          nil,
	model.StatusIOMMUFault:  ErrIOMMUFault,
	model.StatusDevMemBound: ErrDevMemBounds,
	model.StatusBadDesc:     ErrBadDescriptor,
	model.StatusReset:       ErrDeviceReset,
	model.StatusDeviceError: ErrDeviceError,
}

// StatusErr is the error for completion status s (nil for status 0).
func StatusErr(s uint16) error {
	if int(s) < len(statusErrs) {
		return statusErrs[s]
	}
	return ErrUnknownStatus
}
