//go:build (!amd64 && !arm64) || race

package atomicrel

import "sync/atomic"

// StoreUint32 stores v at *p with (at least) release ordering: here, and
// under the race detector, sync/atomic's sequentially consistent store.
func StoreUint32(p *uint32, v uint32) { atomic.StoreUint32(p, v) }

// StoreUint64 stores v at *p with (at least) release ordering: here, and
// under the race detector, sync/atomic's sequentially consistent store.
func StoreUint64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
