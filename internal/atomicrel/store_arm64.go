//go:build arm64 && !race

package atomicrel

// StoreUint32 stores v at *p with release ordering: one STLR (store_arm64.s).
//
//go:noescape
func StoreUint32(p *uint32, v uint32)

// StoreUint64 stores v at *p with release ordering: one STLR
// (store_arm64.s). p must be 8-byte aligned.
//
//go:noescape
func StoreUint64(p *uint64, v uint64)
