// Package vfio is hcomm's device-facing layer: the Device and Region
// interfaces that drivers program against, and (as it grows) the kernel VFIO
// implementation of them — container/group, DMA map/unmap, BAR mmap, IRQ
// eventfds.
//
// Two implementations stand behind Device: the kernel VFIO device, and
// vfio-mock (package vfio/mock), a software device with an emulated IOMMU.
// Drivers (vfio/hdma for the HDMA model, vfio/edu for QEMU's edu device)
// cannot tell them apart.
//
// Sentinel errors for errors.Is: ErrNoRegion, ErrOutOfRange, ErrMisaligned,
// ErrIOVAInUse, ErrNotMapped, ErrBadMapping, ErrNoIRQ, ErrClosed,
// ErrUnsupported.
package vfio
