#include "textflag.h"

// MMIO accessors: each is exactly one plain MOV of the named width. They are
// assembly so the compiler can neither inline them nor merge, split, elide or
// reorder the access relative to other memory operations of the caller (a
// call is opaque to it). A plain MOV, not sync/atomic: on amd64 atomic
// stores compile to XCHG, a locked read-modify-write that also READS the
// register, which on a device register with read side effects is a second,
// unwanted access. BAR mappings are uncached (UC), so the CPU itself keeps
// the accesses in program order and does not combine them.

// func DMAReadBarrier(): x86-TSO performs loads in order, so Linux's
// dma_rmb is a compiler barrier there; being a call, this is one.
TEXT ·DMAReadBarrier(SB), NOSPLIT, $0-0
	RET

// func mmioRead8(addr uintptr) uint8
TEXT ·mmioRead8(SB), NOSPLIT, $0-9
	MOVQ addr+0(FP), AX
	MOVB (AX), BX
	MOVB BX, ret+8(FP)
	RET

// func mmioRead16(addr uintptr) uint16
TEXT ·mmioRead16(SB), NOSPLIT, $0-10
	MOVQ addr+0(FP), AX
	MOVW (AX), BX
	MOVW BX, ret+8(FP)
	RET

// func mmioRead32(addr uintptr) uint32
TEXT ·mmioRead32(SB), NOSPLIT, $0-12
	MOVQ addr+0(FP), AX
	MOVL (AX), BX
	MOVL BX, ret+8(FP)
	RET

// func mmioRead64(addr uintptr) uint64
TEXT ·mmioRead64(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ (AX), BX
	MOVQ BX, ret+8(FP)
	RET

// func mmioWrite8(addr uintptr, v uint8)
TEXT ·mmioWrite8(SB), NOSPLIT, $0-9
	MOVQ addr+0(FP), AX
	MOVB v+8(FP), BX
	MOVB BX, (AX)
	RET

// func mmioWrite16(addr uintptr, v uint16)
TEXT ·mmioWrite16(SB), NOSPLIT, $0-10
	MOVQ addr+0(FP), AX
	MOVW v+8(FP), BX
	MOVW BX, (AX)
	RET

// func mmioWrite32(addr uintptr, v uint32)
TEXT ·mmioWrite32(SB), NOSPLIT, $0-12
	MOVQ addr+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET

// func mmioWrite64(addr uintptr, v uint64)
TEXT ·mmioWrite64(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET
