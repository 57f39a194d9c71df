//go:build linux && !amd64

package uring

import "sync/atomic"

// storeRelease32 stores v at *p with (at least) release ordering; other
// architectures use the sequentially consistent atomic store.
func storeRelease32(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
