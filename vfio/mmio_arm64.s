#include "textflag.h"

// MMIO accessors for arm64: each is one load or store of the named width
// (LDRB/LDRH/LDR W/LDR X, STRB/STRH/STR W/STR X) with the barrier Linux puts
// around readl/writel on arm64 (arch/arm64/include/asm/io.h):
//
//   write: DMB OSHST, then the store. Every earlier store of this CPU to
//          memory (descriptors, ring entries in host memory the device
//          reads by DMA) is observable in the outer-shareable domain, where
//          the device's DMA lives, before the device observes the doorbell
//          (writel's __io_bw: dma_wmb).
//   read:  the load, then DMB OSHLD. The device register load completes
//          before any later load or store of this CPU, so what the device
//          wrote to host memory before the register said so (a completion
//          it posted before raising a status bit) is what later loads see
//          (readl's __io_ar: dma_rmb). Linux adds a dummy control
//          dependency (EOR; CBNZ) after it for udelay's ISB-based timing;
//          nothing here times against a register read, so it is left out.
//
// A store that releases ring slots after loading them (a completion
// queue's head doorbell after reading the entries) needs those loads
// performed first: their values feed stores the consumer makes before the
// doorbell (the completion it hands on), a data dependency that arm64
// orders, and the DMB OSHST orders those stores before the doorbell.
//
// vfio-pci maps BARs Device-nGnRnE (pgprot_noncached): the CPU neither
// gathers, reorders nor speculates accesses to them, and faults an
// unaligned one, so the callers check alignment first. Being assembly, the
// functions are opaque to the compiler: it can neither inline them nor
// merge, split, elide or move the access relative to other memory
// operations of the caller. Not sync/atomic: its loads and stores are
// LDAR/STLR, which order only against normal memory accesses of this CPU
// in the inner-shareable domain and say nothing about the device's view.

// func DMAReadBarrier()
TEXT ·DMAReadBarrier(SB), NOSPLIT, $0-0
	DMB $1 // OSHLD: dma_rmb
	RET

// func mmioRead8(addr uintptr) uint8
TEXT ·mmioRead8(SB), NOSPLIT, $0-9
	MOVD addr+0(FP), R0
	MOVBU (R0), R1
	DMB $1 // OSHLD
	MOVB R1, ret+8(FP)
	RET

// func mmioRead16(addr uintptr) uint16
TEXT ·mmioRead16(SB), NOSPLIT, $0-10
	MOVD addr+0(FP), R0
	MOVHU (R0), R1
	DMB $1 // OSHLD
	MOVH R1, ret+8(FP)
	RET

// func mmioRead32(addr uintptr) uint32
TEXT ·mmioRead32(SB), NOSPLIT, $0-12
	MOVD addr+0(FP), R0
	MOVWU (R0), R1
	DMB $1 // OSHLD
	MOVW R1, ret+8(FP)
	RET

// func mmioRead64(addr uintptr) uint64
TEXT ·mmioRead64(SB), NOSPLIT, $0-16
	MOVD addr+0(FP), R0
	MOVD (R0), R1
	DMB $1 // OSHLD
	MOVD R1, ret+8(FP)
	RET

// func mmioWrite8(addr uintptr, v uint8)
TEXT ·mmioWrite8(SB), NOSPLIT, $0-9
	MOVD addr+0(FP), R0
	MOVBU v+8(FP), R1
	DMB $2 // OSHST
	MOVB R1, (R0)
	RET

// func mmioWrite16(addr uintptr, v uint16)
TEXT ·mmioWrite16(SB), NOSPLIT, $0-10
	MOVD addr+0(FP), R0
	MOVHU v+8(FP), R1
	DMB $2 // OSHST
	MOVH R1, (R0)
	RET

// func mmioWrite32(addr uintptr, v uint32)
TEXT ·mmioWrite32(SB), NOSPLIT, $0-12
	MOVD addr+0(FP), R0
	MOVWU v+8(FP), R1
	DMB $2 // OSHST
	MOVW R1, (R0)
	RET

// func mmioWrite64(addr uintptr, v uint64)
TEXT ·mmioWrite64(SB), NOSPLIT, $0-16
	MOVD addr+0(FP), R0
	MOVD v+8(FP), R1
	DMB $2 // OSHST
	MOVD R1, (R0)
	RET
