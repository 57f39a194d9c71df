package hdmadev

import (
	"fmt"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/vfio/hdma"
)

// The backend's completion statuses (backend.StatusBackend and up).
const (
	statusIOMMU = backend.StatusBackend + iota
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
var statusErrs = [nStatus - backend.StatusBackend]error{
	statusIOMMU - backend.StatusBackend:         fmt.Errorf("%w: %w", backend.ErrDevice, hdma.ErrIOMMUFault),
	statusDevMemBound - backend.StatusBackend:   fmt.Errorf("%w: %w", backend.ErrDevice, hdma.ErrDevMemBounds),
	statusBadDesc - backend.StatusBackend:       fmt.Errorf("%w: %w", backend.ErrDevice, hdma.ErrBadDescriptor),
	statusReset - backend.StatusBackend:         fmt.Errorf("%w: %w", backend.ErrDevice, hdma.ErrDeviceReset),
	statusDevErr - backend.StatusBackend:        fmt.Errorf("%w: %w", backend.ErrDevice, hdma.ErrDeviceError),
	statusUnknown - backend.StatusBackend:       fmt.Errorf("%w: %w", backend.ErrDevice, hdma.ErrUnknownStatus),
	statusTimeout - backend.StatusBackend:       fmt.Errorf("%w: %w", backend.ErrTimeout, hdma.ErrTimeout),
	statusCanceledReset - backend.StatusBackend: fmt.Errorf("%w: %w", backend.ErrCanceled, hdma.ErrDeviceReset),
}

// Err implements backend.Backend.
func (b *Backend) Err(s backend.Status) error {
	if s >= backend.StatusBackend && s < nStatus {
		return statusErrs[s-backend.StatusBackend]
	}
	return nil
}

// statusOf maps a driver completion error to a status.
func statusOf(err error) backend.Status {
	switch err {
	case nil:
		return backend.StatusOK
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
