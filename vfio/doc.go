// Package vfio is hcomm's device-facing layer: the Device and Region
// interfaces that drivers program against, and the kernel VFIO
// implementation of them.
//
// Two implementations stand behind Device: KernelDevice (this package), a
// PCI device driven through the kernel's VFIO container/group API with the
// type1v2 IOMMU, and vfio-mock (package vfio/mock), a software device with an
// emulated IOMMU. Drivers (vfio/hdma for the HDMA model, vfio/edu for QEMU's
// edu device) cannot tell them apart.
//
// # Kernel VFIO
//
// Container and Group wrap the VFIO ioctls (API version, extensions, group
// viability, group→container, SET_IOMMU, IOMMU info with the valid IOVA
// ranges and page sizes, MAP_DMA/UNMAP_DMA, device fd). OpenPCI does the
// whole sequence for one PCI address and returns a KernelDevice: region info
// (with the sparse mmap capability), BARs mmap'd and accessed through
// exact-width MMIO accessors (mmio_amd64.s, mmio_arm64.s: one load or store
// each, which the compiler cannot merge, split or reorder, with Linux's
// readl/writel barriers on arm64; DMAReadBarrier is its dma_rmb), config space through pread/pwrite, IRQ
// info, SET_IRQS with eventfds (MSI, MSI-X, INTx and INTx unmask), reset.
// The VFIO structs and ioctl numbers are generated from linux/vfio.h with
// `go tool cgo -godefs` (types_linux.go → zvfio_linux_amd64.go and
// zvfio_linux_arm64.go, `make generate`): no offset is typed by hand. The
// kernel side builds for linux/amd64 and linux/arm64, where the layouts
// were generated.
//
// Sysfs finds a device's IOMMU group and binds it to vfio-pci through
// driver_override (and back); EnableBusMaster sets the command register's
// bus-master bit, without which a device cannot DMA.
//
// # DMA
//
// DMASpace maps hugepage arenas (package hugepage) into the device's IOMMU
// domain once each, at IOVAs from an IOVAAllocator that stays inside the
// IOMMU's valid ranges and below the device's DMA mask; a block's IOVA is its
// arena's IOVA plus its offset. Close unmaps what is left.
//
// EventFD is the eventfd that SetIRQs routes interrupts to (blocking, so
// io_uring can read it). Package internal/vfiotest holds the test helpers that
// open a real device in the VM tests and skip elsewhere.
//
// # Errors
//
// Sentinel errors for errors.Is (errors.go): ErrNoRegion, ErrOutOfRange,
// ErrMisaligned, ErrIOVAInUse, ErrNotMapped, ErrBadMapping, ErrNoIRQ,
// ErrIOVAExhausted (shared by every Device), and for the kernel side
// ErrNoVFIO (no VFIO in this kernel), ErrBadAddress, ErrNoIOMMUGroup,
// ErrBadInfo (malformed INFO answer). ErrClosed and ErrNotSupported (which
// wraps errors.ErrUnsupported) are hcomm's shared sentinels, the same
// values as engine.ErrClosed and engine.ErrNotSupported: one errors.Is test
// holds whichever layer was closed or lacks the feature.
package vfio
