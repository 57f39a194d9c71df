package atomicrel

import (
	"sync/atomic"
	"unsafe"
)

// Uint64 is a sync/atomic.Uint64 (same alignment guarantee, same Load and
// Store) that can also be stored with release ordering.
type Uint64 struct {
	v atomic.Uint64
}

// Load atomically loads the value (acquire ordering and more).
func (x *Uint64) Load() uint64 { return x.v.Load() }

// Store atomically stores v, sequentially consistent.
func (x *Uint64) Store(v uint64) { x.v.Store(v) }

// StoreRelease stores v with release ordering (see the package comment for
// when that is enough).
func (x *Uint64) StoreRelease(v uint64) {
	// atomic.Uint64 is its uint64 and zero-sized fields (TestLayout).
	StoreUint64((*uint64)(unsafe.Pointer(&x.v)), v)
}

// Uint32 is a sync/atomic.Uint32 that can also be stored with release
// ordering.
type Uint32 struct {
	v atomic.Uint32
}

// Load atomically loads the value (acquire ordering and more).
func (x *Uint32) Load() uint32 { return x.v.Load() }

// Store atomically stores v, sequentially consistent.
func (x *Uint32) Store(v uint32) { x.v.Store(v) }

// CompareAndSwap executes the compare-and-swap operation for x.
func (x *Uint32) CompareAndSwap(old, new uint32) bool { return x.v.CompareAndSwap(old, new) }

// StoreRelease stores v with release ordering (see the package comment for
// when that is enough).
func (x *Uint32) StoreRelease(v uint32) {
	// atomic.Uint32 is its uint32 and a zero-sized field (TestLayout).
	StoreUint32((*uint32)(unsafe.Pointer(&x.v)), v)
}
