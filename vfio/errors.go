package vfio

import (
	"errors"
	"fmt"

	"github.com/hcomm-go/hcomm/internal/errs"
)

// Errors callers can test for with errors.Is (listed in doc.go).
var (
	// Shared by every hcomm package that returns them (package
	// internal/errs): errors.Is(err, vfio.ErrClosed) and
	// errors.Is(err, engine.ErrClosed) are the same test.

	// ErrClosed: the device (or DMA space) was closed.
	ErrClosed = errs.ErrClosed
	// ErrNotSupported: the device or the kernel cannot do what was asked
	// (a register width, a reset, an IOMMU type, the VFIO API version). It
	// wraps errors.ErrUnsupported.
	ErrNotSupported = errs.ErrNotSupported

	// Every Device, kernel or mock.
	ErrNoRegion   = errors.New("no such region")
	ErrOutOfRange = errors.New("access out of region bounds")
	ErrMisaligned = errors.New("misaligned register access")
	ErrIOVAInUse  = errors.New("IOVA range overlaps an existing mapping")
	ErrNotMapped  = errors.New("no DMA mapping at that IOVA")
	ErrBadMapping = errors.New("invalid DMA mapping request")
	ErrNoIRQ      = errors.New("no such interrupt")

	// ErrIOVAExhausted: no free IOVA range is large enough.
	ErrIOVAExhausted = errors.New("IOVA space exhausted")

	// The kernel side.

	// ErrNoVFIO: the kernel has no VFIO (no /dev/vfio/vfio: the vfio module
	// is not loaded or not built).
	ErrNoVFIO = errors.New("no VFIO in this kernel")
	// ErrBadAddress: a malformed PCI address.
	ErrBadAddress = errors.New("malformed PCI address")
	// ErrNoIOMMUGroup: the device has no IOMMU group (the kernel runs
	// without an IOMMU, or the device is not behind one).
	ErrNoIOMMUGroup = errors.New("device has no IOMMU group")
	// ErrBadInfo: the kernel's answer to an INFO ioctl does not parse (a
	// capability chain that leaves the buffer, loops, or is truncated).
	ErrBadInfo = errors.New("malformed VFIO info")
)

// errDeviceClosed is ErrClosed as a closed device returns it, made once so
// that a register access after Close allocates nothing.
var errDeviceClosed = fmt.Errorf("vfio: device %w", ErrClosed)

// inner is an error of this package as the cause in another of its
// messages, which keeps the "vfio: " prefix to one.
func inner(err error) error { return errs.Nested("vfio: ", err) }
