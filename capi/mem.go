package main

import (
	"sort"
	"sync"

	"github.com/hcomm-go/hcomm/engine"
)

// hostBlock is one live hcomm_alloc_host_mem allocation.
type hostBlock struct {
	addr, n uintptr
	blk     engine.Block
}

// hostIndex resolves C pointers to live host blocks: a slice sorted by
// address behind a RWMutex. Submit does a binary search under the read lock
// (no allocation); alloc and free insert and delete (O(live blocks)). Only
// pointers inside a block hcomm handed out and has not taken back resolve:
// anything else (stack, malloc, freed or foreign memory) is refused.
type hostIndex struct {
	mu sync.RWMutex
	bs []hostBlock
}

func (x *hostIndex) add(b engine.Block) {
	hb := hostBlock{addr: b.Addr(), n: uintptr(b.Len()), blk: b}
	x.mu.Lock()
	i := sort.Search(len(x.bs), func(i int) bool { return x.bs[i].addr >= hb.addr })
	x.bs = append(x.bs, hostBlock{})
	copy(x.bs[i+1:], x.bs[i:])
	x.bs[i] = hb
	x.mu.Unlock()
}

// remove takes the block that starts exactly at addr out of the index.
func (x *hostIndex) remove(addr uintptr) (engine.Block, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	i := sort.Search(len(x.bs), func(i int) bool { return x.bs[i].addr >= addr })
	if i == len(x.bs) || x.bs[i].addr != addr {
		return engine.Block{}, false
	}
	b := x.bs[i].blk
	x.bs = append(x.bs[:i], x.bs[i+1:]...)
	return b, true
}

// find returns the block holding [p, p+n) and p's offset in it.
func (x *hostIndex) find(p, n uintptr) (engine.Block, int, bool) {
	x.mu.RLock()
	bs := x.bs
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
		x.mu.RUnlock()
		return engine.Block{}, 0, false
	}
	b := &bs[lo-1]
	off := p - b.addr
	if off >= b.n || n > b.n-off {
		x.mu.RUnlock()
		return engine.Block{}, 0, false
	}
	blk := b.blk
	x.mu.RUnlock()
	return blk, int(off), true
}

func (x *hostIndex) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.bs)
}

// span is one allocation of device space, [off, off+n).
type span struct{ off, n uint64 }

// devSpace allocates device memory (the HDMA device's BAR2, or file space
// for the file target): first fit over the gaps between live allocations,
// every allocation aligned and rounded up to align. The engine moves bytes
// by device offset and knows nothing of allocations; this is what lets the
// C ABI refuse a device address nobody allocated.
type devSpace struct {
	mu    sync.RWMutex
	size  uint64 // bytes of device space (0: none, e.g. the memory target)
	align uint64
	used  []span // sorted by off, disjoint
}

// alloc returns the offset of n fresh bytes, or false when no gap fits.
func (d *devSpace) alloc(n uint64) (uint64, bool) {
	if n == 0 || n > d.size {
		return 0, false
	}
	n = (n + d.align - 1) &^ (d.align - 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	var at uint64 // start of the current gap
	for i := 0; i <= len(d.used); i++ {
		end := d.size
		if i < len(d.used) {
			end = d.used[i].off
		}
		if end >= at && end-at >= n {
			d.used = append(d.used, span{})
			copy(d.used[i+1:], d.used[i:])
			d.used[i] = span{at, n}
			return at, true
		}
		if i < len(d.used) {
			at = d.used[i].off + d.used[i].n
		}
	}
	return 0, false
}

// free releases the allocation that starts exactly at off.
func (d *devSpace) free(off uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := sort.Search(len(d.used), func(i int) bool { return d.used[i].off >= off })
	if i == len(d.used) || d.used[i].off != off {
		return false
	}
	d.used = append(d.used[:i], d.used[i+1:]...)
	return true
}

// contains reports whether [off, off+n) lies inside one live allocation.
func (d *devSpace) contains(off, n uint64) bool {
	d.mu.RLock()
	u := d.used
	lo, hi := 0, len(u)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if u[m].off <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	ok := lo > 0 && off-u[lo-1].off < u[lo-1].n && n <= u[lo-1].n-(off-u[lo-1].off)
	d.mu.RUnlock()
	return ok
}
