package vfio

import (
	"strconv"
)

// Region indices follow VFIO's PCI numbering (linux/vfio.h,
// VFIO_PCI_BAR0_REGION_INDEX ... VFIO_PCI_CONFIG_REGION_INDEX), so a driver
// names a BAR the same way on a kernel device and on vfio-mock.
const (
	RegionBAR0   = 0
	RegionBAR1   = 1
	RegionBAR2   = 2
	RegionBAR3   = 3
	RegionBAR4   = 4
	RegionBAR5   = 5
	RegionROM    = 6
	RegionConfig = 7
)

// IRQKind selects an interrupt type, in VFIO's IRQ index numbering
// (VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX).
type IRQKind int

const (
	IRQINTx IRQKind = 0
	IRQMSI  IRQKind = 1
	IRQMSIX IRQKind = 2
)

func (k IRQKind) String() string {
	switch k {
	case IRQINTx:
		return "INTx"
	case IRQMSI:
		return "MSI"
	case IRQMSIX:
		return "MSI-X"
	}
	return "IRQKind(" + strconv.Itoa(int(k)) + ")"
}

// Access is the permission of a DMA mapping, seen from the device.
type Access uint32

const (
	// DMARead lets the device read the mapped memory (host→device).
	DMARead Access = 1 << 0
	// DMAWrite lets the device write the mapped memory (device→host).
	DMAWrite Access = 1 << 1
	// DMAReadWrite is both.
	DMAReadWrite = DMARead | DMAWrite
)

// IOVARange is an inclusive range [Start, End] of I/O virtual addresses the
// IOMMU accepts for mappings.
type IOVARange struct {
	Start, End uint64
}

// DeviceInfo describes a device as a driver sees it.
type DeviceInfo struct {
	// Name is the device's address or label, e.g. "0000:00:03.0" or "vfio-mock0".
	Name string
	// VendorID and DeviceID are the PCI identifiers (0x1234/0x11e8 for edu).
	VendorID, DeviceID uint16
	// NumRegions and NumIRQs are the counts VFIO_DEVICE_GET_INFO reports.
	NumRegions, NumIRQs int
	// CanReset is true when Reset is supported (VFIO_DEVICE_FLAGS_RESET).
	CanReset bool
}

// Region is one region of a device: a BAR or the PCI configuration space.
//
// The register accessors perform exactly one access of exactly the named
// width at the given offset, in program order: they are MMIO accesses that
// the compiler may not merge, split, elide or reorder, and on vfio-mock a
// write to a register with side effects (a doorbell) takes effect before the
// call returns or is handed to the device model in order. Offsets must be
// naturally aligned for the width and inside the region; violations return
// ErrOutOfRange or ErrMisaligned rather than touching memory.
type Region interface {
	// Index is the VFIO region index (RegionBAR0 ...).
	Index() int
	// Size is the region's length in bytes.
	Size() uint64

	Read8(off uint64) (uint8, error)
	Read16(off uint64) (uint16, error)
	Read32(off uint64) (uint32, error)
	Read64(off uint64) (uint64, error)
	Write8(off uint64, v uint8) error
	Write16(off uint64, v uint16) error
	Write32(off uint64, v uint32) error
	Write64(off uint64, v uint64) error

	// Mapped returns the region's memory when the CPU may access it
	// directly as plain memory (a mmap-able BAR without side-effect
	// registers, e.g. HDMA device memory in BAR2), or nil when it may only
	// be reached through the accessors. Bulk CPU copies (the GDRCopy-style
	// path) use it. On arm64 vfio-pci maps BARs as Device-nGnRnE memory,
	// where an unaligned access or a DC ZVA (Go's clear of large blocks)
	// faults: copy to and from it in whole, aligned 8-byte words.
	Mapped() []byte
}

// Device is the device-facing interface that drivers (vfio/hdma, vfio/edu)
// program against. The kernel-backed device (vfio.Open*) and vfio-mock
// (vfio/mock) both implement it, so a driver cannot tell them apart.
//
// Methods are safe for concurrent use unless noted; register accesses to the
// same region from several goroutines are the driver's business to order.
type Device interface {
	// Info describes the device.
	Info() DeviceInfo
	// Region opens region index (see RegionBAR0 ...). The region stays
	// valid until Close. ErrNoRegion when the device has no such region.
	Region(index int) (Region, error)

	// IOVARanges lists the IOVA ranges the IOMMU accepts (from
	// VFIO_IOMMU_GET_INFO's IOVA-range capability, or the mock's config).
	IOVARanges() []IOVARange
	// MapDMA maps host memory mem at iova for the device with the given
	// access. mem must stay valid and must not move until UnmapDMA (it
	// must live off the Go heap, e.g. in a hugepage arena); the mapping
	// pins it. iova and len(mem) must be multiples of the IOMMU page size.
	// Overlapping an existing mapping is ErrIOVAInUse.
	MapDMA(iova uint64, mem []byte, access Access) error
	// UnmapDMA removes the mapping that starts at iova with length size,
	// exactly as it was mapped. ErrNotMapped when there is none.
	UnmapDMA(iova, size uint64) error

	// IRQCount reports how many vectors of kind the device offers (0 when
	// it has none of that kind).
	IRQCount(kind IRQKind) int
	// SetIRQs routes vectors start..start+len(eventfds)-1 of kind to the
	// given eventfds (VFIO_DEVICE_SET_IRQS with DATA_EVENTFD|ACTION_TRIGGER).
	// A nil or empty eventfds disables all vectors of kind. The caller owns
	// the eventfds and closes them after disabling.
	SetIRQs(kind IRQKind, start int, eventfds []int) error
	// UnmaskIRQ unmasks vector index of kind (needed for INTx, which the
	// kernel masks on each interrupt).
	UnmaskIRQ(kind IRQKind, index int) error

	// Reset resets the device (VFIO_DEVICE_RESET). DMA mappings survive.
	Reset() error
	// Close disables interrupts, removes every DMA mapping still present,
	// unmaps regions and releases the device. Closing twice is harmless.
	Close() error
}
