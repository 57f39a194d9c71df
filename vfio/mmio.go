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

// DMAReadBarrier orders the calling thread's loads from memory a device
// writes by DMA: every load before it (the phase word that says a
// completion entry is new) is performed, as the device observes it, before
// every load after it (the rest of the entry). It is Linux's dma_rmb: DMB
// OSHLD on arm64, where an acquire load (sync/atomic's LDAR) orders only
// within the inner-shareable domain that the CPUs share and the device's
// writes may be observed outside it; on amd64 loads are not reordered with
// older loads, and it is a call the compiler cannot move loads across.
// Drivers call it once per batch of entries whose phase they have read,
// before reading the entries.
func DMAReadBarrier()

func mmioRead8(addr uintptr) uint8

func mmioRead16(addr uintptr) uint16

func mmioRead32(addr uintptr) uint32

func mmioRead64(addr uintptr) uint64

func mmioWrite8(addr uintptr, v uint8)

func mmioWrite16(addr uintptr, v uint16)

func mmioWrite32(addr uintptr, v uint32)

func mmioWrite64(addr uintptr, v uint64)
