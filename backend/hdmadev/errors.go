package hdmadev

import (
	"fmt"

	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/hdma"
)

// The backend's completion statuses (engine.StatusBackend and up).
const (
	statusIOMMU = engine.StatusBackend + iota
	statusDevMemBound
	statusBadDesc
	statusReset
	statusDevErr
	statusUnknown
	statusTimeout
	statusCanceledReset
	nStatus
)

// statusErrs are preformatted, so that reaping never allocates.
var statusErrs = [nStatus - engine.StatusBackend]error{
	statusIOMMU - engine.StatusBackend:         fmt.Errorf("%w: %w", engine.ErrDevice, hdma.ErrIOMMUFault),
	statusDevMemBound - engine.StatusBackend:   fmt.Errorf("%w: %w", engine.ErrDevice, hdma.ErrDevMemBounds),
	statusBadDesc - engine.StatusBackend:       fmt.Errorf("%w: %w", engine.ErrDevice, hdma.ErrBadDescriptor),
	statusReset - engine.StatusBackend:         fmt.Errorf("%w: %w", engine.ErrDevice, hdma.ErrDeviceReset),
	statusDevErr - engine.StatusBackend:        fmt.Errorf("%w: %w", engine.ErrDevice, hdma.ErrDeviceError),
	statusUnknown - engine.StatusBackend:       fmt.Errorf("%w: %w", engine.ErrDevice, hdma.ErrUnknownStatus),
	statusTimeout - engine.StatusBackend:       fmt.Errorf("%w: %w", engine.ErrTimeout, hdma.ErrTimeout),
	statusCanceledReset - engine.StatusBackend: fmt.Errorf("%w: %w", engine.ErrCanceled, hdma.ErrDeviceReset),
}

// Err implements engine.Backend.
func (b *Backend) Err(s engine.Status) error {
	if s >= engine.StatusBackend && s < nStatus {
		return statusErrs[s-engine.StatusBackend]
	}
	return nil
}

// statusOf maps a driver completion error to a status.
func statusOf(err error) engine.Status {
	switch err {
	case nil:
		return engine.StatusOK
	case hdma.ErrIOMMUFault:
		return statusIOMMU
	case hdma.ErrDevMemBounds:
		return statusDevMemBound
	case hdma.ErrBadDescriptor:
		return statusBadDesc
	case hdma.ErrDeviceReset:
		return statusReset
	case hdma.ErrDeviceError:
		return statusDevErr
	case hdma.ErrTimeout:
		return statusTimeout
	}
	return statusUnknown
}
