//go:build arm64 && !race

#include "textflag.h"

// Store-release (STLR): every load and store of this CPU before it in
// program order is observed before it, by any observer that sees the
// store (a reader's LDAR, which sync/atomic's loads are, then sees them
// too); a plain store, which arm64's weak memory model lets pass earlier
// accesses, would not do. sync/atomic's Store compiles to the same STLR
// on arm64; written here, the instruction is this file's choice rather
// than the compiler's lowering, the call is opaque to the compiler as on
// amd64, and the disassembly test (disasm_test.go) holds both.
// STLR followed by LDAR is also ordered (RCsc), so on arm64 even the
// Dekker pattern the package comment warns about holds; code must not
// rely on it, amd64 gives no such order.

// func StoreUint32(p *uint32, v uint32)
TEXT ·StoreUint32(SB), NOSPLIT, $0-12
	MOVD p+0(FP), R0
	MOVWU v+8(FP), R1
	STLRW R1, (R0)
	RET

// func StoreUint64(p *uint64, v uint64)
TEXT ·StoreUint64(SB), NOSPLIT, $0-16
	MOVD p+0(FP), R0
	MOVD v+8(FP), R1
	STLR R1, (R0)
	RET
