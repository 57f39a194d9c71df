package vfio

// Exact-width MMIO accesses at an address inside a device mapping (see
// mmio_amd64.s for why they are assembly). addr must be naturally aligned
// and point into memory that stays mapped for the duration of the call;
// the callers (mmioRegion) check both.

func mmioRead8(addr uintptr) uint8

func mmioRead16(addr uintptr) uint16

func mmioRead32(addr uintptr) uint32

func mmioRead64(addr uintptr) uint64

func mmioWrite8(addr uintptr, v uint8)

func mmioWrite16(addr uintptr, v uint16)

func mmioWrite32(addr uintptr, v uint32)

func mmioWrite64(addr uintptr, v uint64)
