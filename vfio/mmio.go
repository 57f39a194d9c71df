//go:build amd64 || arm64

package vfio

// Exact-width MMIO accesses at an address inside a device mapping, in
// assembly per architecture (mmio_amd64.s, mmio_arm64.s say why and which
// barriers each carries). addr must be naturally aligned and point into
// memory that stays mapped for the duration of the call; the callers
// (kernelRegion) check both.
//
// Ordering, as Linux's readl/writel give it on every architecture: a write
// is performed after every earlier store of the calling thread to memory
// (a doorbell store never overtakes the descriptors it publishes), and a
// read completes before any later load of the calling thread (a status or
// phase read from the device is not overtaken by the loads of what the
// device wrote to host memory before it). Accesses to one device are
// performed in program order, never merged, split or elided.

func mmioRead8(addr uintptr) uint8

func mmioRead16(addr uintptr) uint16

func mmioRead32(addr uintptr) uint32

func mmioRead64(addr uintptr) uint64

func mmioWrite8(addr uintptr, v uint8)

func mmioWrite16(addr uintptr, v uint16)

func mmioWrite32(addr uintptr, v uint32)

func mmioWrite64(addr uintptr, v uint64)
