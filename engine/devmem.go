package engine

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// DeviceRange is a range of device memory from AllocDevice: [Off, Off+Len).
// Name it in a transfer with DeviceAt(r.Off) (or DeviceAt(r.Off+k) for a
// part of it).
type DeviceRange struct {
	Off, Len uint64
}

// span is one allocation of device memory, [off, off+n).
type span struct{ off, n uint64 }

// devSpace allocates the backend's device memory (Description.DeviceMemory:
// an HDMA device's BAR2, bounded by what is both reported and mapped):
// first fit over the gaps between live allocations, every allocation
// aligned and rounded up. Transfers address device memory by offset and do
// not need an allocation; the allocator is for callers that share device
// memory among users (the C ABI refuses device addresses nobody allocated).
//
// The allocations are an immutable snapshot behind an atomic pointer, so
// Contains takes no lock.
type devSpace struct {
	mu    sync.Mutex // alloc and free
	size  uint64
	align uint64
	snap  atomic.Pointer[[]span] // sorted by off, disjoint
}

func (d *devSpace) init(size, align uint64) { d.size, d.align = size, align }

func (d *devSpace) load() []span {
	if p := d.snap.Load(); p != nil {
		return *p
	}
	return nil
}

// alloc returns the offset of n fresh bytes, or false when no gap fits.
func (d *devSpace) alloc(n uint64) (uint64, uint64, bool) {
	if n == 0 || n > d.size {
		return 0, 0, false
	}
	n = (n + d.align - 1) &^ (d.align - 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	used := d.load()
	var at uint64 // start of the current gap
	for i := 0; i <= len(used); i++ {
		end := d.size
		if i < len(used) {
			end = used[i].off
		}
		if end >= at && end-at >= n {
			u := make([]span, 0, len(used)+1)
			u = append(append(append(u, used[:i]...), span{at, n}), used[i:]...)
			d.snap.Store(&u)
			return at, n, true
		}
		if i < len(used) {
			at = used[i].off + used[i].n
		}
	}
	return 0, 0, false
}

// free releases the allocation r.
func (d *devSpace) free(r DeviceRange) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	used := d.load()
	i := sort.Search(len(used), func(i int) bool { return used[i].off >= r.Off })
	if i == len(used) || used[i].off != r.Off || used[i].n != r.Len {
		return false
	}
	u := make([]span, 0, len(used)-1)
	u = append(append(u, used[:i]...), used[i+1:]...)
	d.snap.Store(&u)
	return true
}

// contains reports whether [off, off+n) lies inside one live allocation.
func (d *devSpace) contains(off, n uint64) bool {
	u := d.load()
	i := sort.Search(len(u), func(i int) bool { return u[i].off > off })
	return i > 0 && off-u[i-1].off < u[i-1].n && n <= u[i-1].n-(off-u[i-1].off)
}

// AllocDevice allocates n bytes of the backend's device memory
// (Description.DeviceMemory), aligned to max(Config.Alignment, 64). It is
// ErrNotSupported when the backend has no device memory and
// ErrOutOfBounds when no free range is large enough.
func (e *Engine) AllocDevice(n uint64) (DeviceRange, error) {
	if e.closing.Load() {
		return DeviceRange{}, fmt.Errorf("engine: alloc %d bytes of device memory: %w", n, ErrClosed)
	}
	if e.dev.size == 0 {
		return DeviceRange{}, fmt.Errorf("engine: alloc %d bytes of device memory: the %s backend has none: %w", n, e.desc.Name, ErrNotSupported)
	}
	off, got, ok := e.dev.alloc(n)
	if !ok {
		return DeviceRange{}, fmt.Errorf("engine: alloc %d bytes of device memory: no free range of the %d bytes fits: %w", n, e.dev.size, ErrOutOfBounds)
	}
	return DeviceRange{Off: off, Len: got}, nil
}

// FreeDevice returns a range AllocDevice gave. A range that is not live
// (freed twice, never allocated, altered) is ErrFreedBlock and changes
// nothing.
func (e *Engine) FreeDevice(r DeviceRange) error {
	if !e.dev.free(r) {
		return fmt.Errorf("engine: free device memory %#x+%d: not a live allocation: %w", r.Off, r.Len, ErrFreedBlock)
	}
	return nil
}

// DeviceAllocated reports whether [off, off+n) lies inside one live
// AllocDevice range (no lock: for checks on the submit path).
func (e *Engine) DeviceAllocated(off, n uint64) bool { return e.dev.contains(off, n) }
