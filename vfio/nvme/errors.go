package nvme

import (
	"errors"
	"fmt"

	"github.com/hcomm-go/hcomm/internal/errs"
	"github.com/hcomm-go/hcomm/vfio/nvme/spec"
)

// Errors of the driver itself, for errors.Is.
var (
	// ErrNotNVMe: the device is not an NVMe controller this driver can run
	// (no NVM command set, a minimum page size above 4 KiB, no namespace).
	ErrNotNVMe = spec.ErrNotNVMe
	// ErrNotReady: CSTS.RDY did not follow CC.EN within CAP.TO.
	ErrNotReady = errors.New("nvme: controller did not become ready within CAP.TO")
	// ErrFatal: the controller reports a fatal status (CSTS.CFS).
	ErrFatal = errors.New("nvme: controller fatal status")
	// ErrBadTransfer: a transfer the driver refuses before building a
	// command (LBA alignment or range, MDTS, buffer alignment).
	ErrBadTransfer = spec.ErrBadTransfer
	// ErrQueueFull: no free command slot on the queue.
	ErrQueueFull = errors.New("nvme: queue full")
	// ErrTimeout: a command did not complete in time.
	ErrTimeout = errors.New("nvme: command timed out")
	// ErrReset: the command was outstanding when the controller was reset;
	// it completes with this error exactly once (its data may or may not
	// have moved).
	ErrReset = errors.New("nvme: command ended by a controller reset")
	// ErrClosed: the controller or queue is closed (hcomm's shared
	// sentinel, package internal/errs: the same value as vfio.ErrClosed).
	ErrClosed = errs.ErrClosed
	// ErrNoCMB: the controller has no usable Controller Memory Buffer.
	ErrNoCMB = errors.New("nvme: no controller memory buffer")
	// ErrNotSupported: the controller does not offer the command (ONCS) or
	// the queues asked for. hcomm's shared sentinel (package
	// internal/errs); it wraps errors.ErrUnsupported.
	ErrNotSupported = errs.ErrNotSupported

	// ErrStatus matches every error completion the controller posted
	// (StatusError); the sentinels below match particular status codes.
	ErrStatus = errors.New("nvme: error status")

	// Generic command status (SCT 0).
	ErrInvalidOpcode     = errors.New("nvme: invalid command opcode")
	ErrInvalidField      = errors.New("nvme: invalid field in command")
	ErrCommandIDConflict = errors.New("nvme: command ID conflict")
	ErrDataTransfer      = errors.New("nvme: data transfer error")
	ErrAborted           = errors.New("nvme: command aborted")
	ErrInternal          = errors.New("nvme: internal error")
	ErrInvalidNamespace  = errors.New("nvme: invalid namespace or format")
	ErrCommandSequence   = errors.New("nvme: command sequence error")
	ErrInvalidPRPOffset  = errors.New("nvme: invalid PRP offset")
	ErrLBAOutOfRange     = errors.New("nvme: LBA out of range")
	ErrCapacityExceeded  = errors.New("nvme: capacity exceeded")
	ErrNamespaceNotReady = errors.New("nvme: namespace not ready")

	// Command specific status (SCT 1): every one matches
	// ErrCommandSpecific, the queue-creation ones their own sentinel too.
	ErrCommandSpecific       = errors.New("nvme: command specific error")
	ErrInvalidQueue          = errors.New("nvme: invalid queue identifier, size or completion queue")
	ErrInvalidInterruptVec   = errors.New("nvme: invalid interrupt vector")
	ErrAbortLimitExceeded    = errors.New("nvme: abort command limit exceeded")
	ErrWriteToReadOnlyRange  = errors.New("nvme: attempted write to read only range")
	ErrConflictingAttributes = errors.New("nvme: conflicting attributes")

	// Media and data integrity errors (SCT 2): every one matches ErrMedia.
	ErrMedia           = errors.New("nvme: media or data integrity error")
	ErrWriteFault      = errors.New("nvme: write fault")
	ErrUnrecoveredRead = errors.New("nvme: unrecovered read error")
	ErrProtection      = errors.New("nvme: end-to-end protection check error")
	ErrCompareFailure  = errors.New("nvme: compare failure")
	ErrAccessDenied    = errors.New("nvme: access denied")

	// Path related status (SCT 3).
	ErrPath = errors.New("nvme: path related error")
)

// errControllerClosed is ErrClosed as a closed controller returns it, made
// once so that the refusal allocates nothing.
var errControllerClosed = fmt.Errorf("nvme: controller %w", ErrClosed)

// Status is the completion status field (package spec): its type, the
// code types and the field accessors are the specification's; the two
// statuses below and the errors a status stands for are this driver's.
type Status = spec.Status

// Statuses the driver posts itself.
const (
	StatusOK Status = 0
	// StatusReset: outstanding when the controller was reset (ErrReset).
	StatusReset Status = 1<<15 | 1
	// StatusTimeout: given up on (ErrTimeout).
	StatusTimeout Status = 1<<15 | 2
)

// StatusErr is nil for success, else the error the status stands for (a
// *StatusError, or ErrReset / ErrTimeout for the driver's own).
func StatusErr(s Status) error {
	switch {
	case s.OK():
		return nil
	case s == StatusReset:
		return ErrReset
	case s == StatusTimeout:
		return ErrTimeout
	}
	return &StatusError{Status: s}
}

// StatusError is an error completion posted by the controller. errors.Is
// matches ErrStatus, the sentinel of its code (see Sentinel) and, for
// command specific and media errors, the class sentinel.
type StatusError struct {
	Status Status
	// Opcode and CID say which command, when known (0 otherwise).
	Opcode uint8
	CID    uint16
}

func (e *StatusError) Error() string {
	s := e.Status
	msg := "nvme: status"
	if sent := Sentinel(s); sent != nil {
		msg = sent.Error()
	}
	dnr := ""
	if s.DNR() {
		dnr = ", do not retry"
	}
	return fmt.Sprintf("%s (SCT %#x SC %#02x%s)", msg, s.SCT(), s.SC(), dnr)
}

// Is matches ErrStatus, the status's sentinel and its class sentinel.
func (e *StatusError) Is(target error) bool {
	if target == ErrStatus {
		return true
	}
	if target == Sentinel(e.Status) {
		return true
	}
	switch e.Status.SCT() {
	case spec.SCTCommandSpecific:
		return target == ErrCommandSpecific
	case spec.SCTMedia:
		return target == ErrMedia
	}
	return false
}

// Sentinel returns the sentinel error for a status code, or nil when the
// driver has none for it (the error still matches ErrStatus).
func Sentinel(s Status) error {
	sc := s.SC()
	switch s.SCT() {
	case spec.SCTGeneric:
		switch sc {
		case 0x01:
			return ErrInvalidOpcode
		case 0x02:
			return ErrInvalidField
		case 0x03:
			return ErrCommandIDConflict
		case 0x04:
			return ErrDataTransfer
		case 0x05, 0x07, 0x08, 0x1b: // power loss, requested, SQ deletion, preempt and abort
			return ErrAborted
		case 0x06:
			return ErrInternal
		case 0x0b:
			return ErrInvalidNamespace
		case 0x0c:
			return ErrCommandSequence
		case 0x13:
			return ErrInvalidPRPOffset
		case 0x80:
			return ErrLBAOutOfRange
		case 0x81:
			return ErrCapacityExceeded
		case 0x82:
			return ErrNamespaceNotReady
		}
	case spec.SCTCommandSpecific:
		switch sc {
		case 0x00, 0x01, 0x02:
			return ErrInvalidQueue
		case 0x03:
			return ErrAbortLimitExceeded
		case 0x08:
			return ErrInvalidInterruptVec
		case 0x80:
			return ErrConflictingAttributes
		case 0x82:
			return ErrWriteToReadOnlyRange
		}
		return ErrCommandSpecific
	case spec.SCTMedia:
		switch sc {
		case 0x80:
			return ErrWriteFault
		case 0x81:
			return ErrUnrecoveredRead
		case 0x82, 0x83, 0x84:
			return ErrProtection
		case 0x85:
			return ErrCompareFailure
		case 0x86:
			return ErrAccessDenied
		}
		return ErrMedia
	case spec.SCTPath:
		return ErrPath
	}
	return nil
}
