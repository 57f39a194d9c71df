#include "textflag.h"

// func storeRelease32(p *uint32, v uint32)
//
// A plain 32-bit store. On amd64 (x86-TSO) every store already has release
// semantics: it becomes visible only after all earlier loads and stores of
// this CPU. Being an assembly function, the call is also a compiler barrier.
// sync/atomic.StoreUint32 compiles to XCHG, a full barrier that costs tens
// of cycles more and is not needed to publish a consumed index.
TEXT ·storeRelease32(SB), NOSPLIT, $0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, 0(AX)
	RET
