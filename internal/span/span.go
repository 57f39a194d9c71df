// Package span allocates ranges of an address space that is not host
// memory — a device's memory, a file's bytes — first fit over the gaps
// between live allocations, every allocation aligned and rounded up. The
// engine hands out device memory with it (engine.AllocDevice) and the C ABI
// file space.
//
// The live ranges are an immutable snapshot behind an atomic pointer, so
// Contains (a check on a submit path) takes no lock and does not allocate;
// Alloc and Free copy the snapshot under a mutex (O(live ranges) each, fine
// for the few large buffers such spaces hold).
package span

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Range is one allocation, [Off, Off+Len).
type Range struct{ Off, Len uint64 }

// Space is a range allocator over [0, size). Create it with New.
type Space struct {
	mu    sync.Mutex // Alloc and Free
	size  uint64
	align uint64
	snap  atomic.Pointer[[]Range] // sorted by Off, disjoint
}

// New returns an allocator over size bytes whose allocations are aligned to
// align (a power of two ≥ 1).
func New(size, align uint64) *Space { return &Space{size: size, align: max(align, 1)} }

// Size is the size of the space.
func (s *Space) Size() uint64 { return s.size }

func (s *Space) load() []Range {
	if p := s.snap.Load(); p != nil {
		return *p
	}
	return nil
}

// Alloc returns n fresh bytes (rounded up to the alignment), or false when
// no gap fits.
func (s *Space) Alloc(n uint64) (Range, bool) {
	if n == 0 || n > s.size {
		return Range{}, false
	}
	n = (n + s.align - 1) &^ (s.align - 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	used := s.load()
	var at uint64 // start of the current gap
	for i := 0; i <= len(used); i++ {
		end := s.size
		if i < len(used) {
			end = used[i].Off
		}
		if end >= at && end-at >= n {
			u := make([]Range, 0, len(used)+1)
			u = append(append(append(u, used[:i]...), Range{at, n}), used[i:]...)
			s.snap.Store(&u)
			return Range{at, n}, true
		}
		if i < len(used) {
			at = used[i].Off + used[i].Len
		}
	}
	return Range{}, false
}

// Free releases the allocation that starts exactly at off; false when there
// is none (freed twice, never allocated, a pointer into the middle).
func (s *Space) Free(off uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := s.load()
	i := sort.Search(len(used), func(i int) bool { return used[i].Off >= off })
	if i == len(used) || used[i].Off != off {
		return false
	}
	u := make([]Range, 0, len(used)-1)
	u = append(append(u, used[:i]...), used[i+1:]...)
	s.snap.Store(&u)
	return true
}

// Contains reports whether [off, off+n) lies inside one live allocation.
func (s *Space) Contains(off, n uint64) bool {
	u := s.load()
	// Last range starting at or before off (by hand: sort.Search with a
	// closure would cost a call per probe).
	lo, hi := 0, len(u)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if u[m].Off <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo > 0 && off-u[lo-1].Off < u[lo-1].Len && n <= u[lo-1].Len-(off-u[lo-1].Off)
}
