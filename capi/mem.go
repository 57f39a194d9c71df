package main

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hcomm-go/hcomm/engine"
)

// hostBlock is one live hcomm_alloc_host_mem allocation, or one
// registration (hcomm_register_host_mem).
type hostBlock struct {
	addr, n uintptr
	blk     engine.Block
	reg     bool
}

// hostIndex resolves C pointers to live host blocks. The blocks are a
// slice sorted by address, published as an immutable snapshot behind an
// atomic pointer: submit loads it once and binary-searches it (no lock, no
// allocation, no shared write); alloc and free copy it under a mutex
// (O(live blocks) each, fine for the few large buffers C programs keep).
// Only pointers inside a block hcomm handed out and has not taken back
// resolve: anything else (stack, malloc, freed or foreign memory) is
// refused. A submit racing with the free of its own block may see either
// snapshot; the engine then refuses the freed block by its generation.
type hostIndex struct {
	mu   sync.Mutex // writers
	snap atomic.Pointer[[]hostBlock]
}

func (x *hostIndex) load() []hostBlock {
	if p := x.snap.Load(); p != nil {
		return *p
	}
	return nil
}

func (x *hostIndex) add(b engine.Block, reg bool) {
	hb := hostBlock{addr: b.Addr(), n: uintptr(b.Len()), blk: b, reg: reg}
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.load()
	i := sort.Search(len(old), func(i int) bool { return old[i].addr >= hb.addr })
	bs := make([]hostBlock, 0, len(old)+1)
	bs = append(append(append(bs, old[:i]...), hb), old[i:]...)
	x.snap.Store(&bs)
}

// remove takes the block that starts exactly at addr out of the index.
func (x *hostIndex) remove(addr uintptr) (engine.Block, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.load()
	i := sort.Search(len(old), func(i int) bool { return old[i].addr >= addr })
	if i == len(old) || old[i].addr != addr {
		return engine.Block{}, false
	}
	b := old[i].blk
	bs := make([]hostBlock, 0, len(old)-1)
	bs = append(append(bs, old[:i]...), old[i+1:]...)
	x.snap.Store(&bs)
	return b, true
}

// at returns the block that starts exactly at addr.
func (x *hostIndex) at(addr uintptr) (engine.Block, bool, bool) {
	bs := x.load()
	i := sort.Search(len(bs), func(i int) bool { return bs[i].addr >= addr })
	if i == len(bs) || bs[i].addr != addr {
		return engine.Block{}, false, false
	}
	return bs[i].blk, bs[i].reg, true
}

// overlaps reports whether [addr, addr+n) overlaps a block of the index.
func (x *hostIndex) overlaps(addr, n uintptr) bool {
	for _, b := range x.load() {
		if addr < b.addr+b.n && b.addr < addr+n {
			return true
		}
	}
	return false
}

// find returns the block holding [p, p+n) and p's offset in it.
func (x *hostIndex) find(p, n uintptr) (*engine.Block, int, bool) {
	bs := x.load()
	// Last block starting at or before p (hand-written search: sort.Search
	// with a closure would cost a call per probe on the submit path).
	lo, hi := 0, len(bs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bs[m].addr <= p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil, 0, false
	}
	b := &bs[lo-1]
	off := p - b.addr
	if off >= b.n || n > b.n-off {
		return nil, 0, false
	}
	// The snapshot is immutable: the pointer stays valid.
	return &b.blk, int(off), true
}

func (x *hostIndex) len() int { return len(x.load()) }
