package vfio

import (
	"fmt"
	"math/bits"
	"sort"
	"sync"
)

// IOVAAllocator hands out I/O virtual address ranges inside the ranges an
// IOMMU accepts (Device.IOVARanges) and below a device's DMA mask (edu: 28
// bits). Every range it returns starts and ends on a page boundary; page 0
// is never handed out, so an IOVA of 0 in a descriptor is always a bug the
// IOMMU catches. It is safe for concurrent use. First fit over a sorted free
// list: mappings are few and long-lived (one per arena), so simplicity wins.
type IOVAAllocator struct {
	pageSize uint64

	mu    sync.Mutex
	free  []IOVARange // sorted, disjoint, inclusive, page-aligned
	inUse map[uint64]uint64
}

// NewIOVAAllocator builds an allocator over ranges, clipped to [pageSize,
// mask] (mask is the highest address the device can emit, e.g. 1<<28-1;
// 0 means all 64 bits) and shrunk inward to pageSize boundaries. pageSize
// must be a power of two (the IOMMU's smallest page, usually 4096).
func NewIOVAAllocator(ranges []IOVARange, mask, pageSize uint64) (*IOVAAllocator, error) {
	if pageSize == 0 || pageSize&(pageSize-1) != 0 {
		return nil, fmt.Errorf("vfio: IOVA allocator: page size %d: %w", pageSize, ErrBadMapping)
	}
	if mask == 0 {
		mask = ^uint64(0)
	}
	rs := append([]IOVARange(nil), ranges...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	var free []IOVARange
	for _, r := range rs {
		if r.End < r.Start {
			return nil, fmt.Errorf("vfio: IOVA allocator: range %#x-%#x is inverted: %w", r.Start, r.End, ErrBadMapping)
		}
		start, end := max(r.Start, pageSize), min(r.End, mask)
		// Round start up and end+1 down to pages, without overflow.
		if start&(pageSize-1) != 0 {
			if start > ^uint64(0)-pageSize {
				continue
			}
			start = (start + pageSize) &^ (pageSize - 1)
		}
		if end < start {
			continue
		}
		// end+1 rounded down; end = 2^64-1 already ends a page. start >=
		// pageSize, so the result cannot wrap below start-1.
		if end != ^uint64(0) {
			end = (end+1)&^(pageSize-1) - 1
		}
		if end < start {
			continue
		}
		if n := len(free); n > 0 && start <= free[n-1].End {
			// Overlapping input ranges: merge.
			free[n-1].End = max(free[n-1].End, end)
			continue
		}
		free = append(free, IOVARange{start, end})
	}
	if len(free) == 0 {
		return nil, fmt.Errorf("vfio: IOVA allocator: no page-sized IOVA in %v below mask %#x: %w", ranges, mask, ErrIOVAExhausted)
	}
	return &IOVAAllocator{pageSize: pageSize, free: free, inUse: map[uint64]uint64{}}, nil
}

// PageSize is the allocation granule.
func (a *IOVAAllocator) PageSize() uint64 { return a.pageSize }

// FreeRanges lists the free ranges, for inspection and tests.
func (a *IOVAAllocator) FreeRanges() []IOVARange {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]IOVARange(nil), a.free...)
}

// Alloc returns the lowest free IOVA of size bytes (rounded up to the page
// size) aligned to align (a power of two; values below the page size mean
// the page size).
func (a *IOVAAllocator) Alloc(size, align uint64) (uint64, error) {
	if size == 0 {
		return 0, fmt.Errorf("vfio: allocate IOVA of 0 bytes: %w", ErrBadMapping)
	}
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("vfio: allocate IOVA: alignment %#x is not a power of two: %w", align, ErrBadMapping)
	}
	align = max(align, a.pageSize)
	sz, ok := roundUp64(size, a.pageSize)
	if !ok {
		return 0, fmt.Errorf("vfio: allocate IOVA of %d bytes: %w", size, ErrIOVAExhausted)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, r := range a.free {
		start, ok := roundUp64(r.Start, align)
		if !ok || start > r.End || r.End-start < sz-1 {
			continue
		}
		end := start + sz - 1
		// Split r into [r.Start, start-1] and [end+1, r.End].
		var repl []IOVARange
		if start > r.Start {
			repl = append(repl, IOVARange{r.Start, start - 1})
		}
		if end < r.End {
			repl = append(repl, IOVARange{end + 1, r.End})
		}
		a.free = append(a.free[:i], append(repl, a.free[i+1:]...)...)
		a.inUse[start] = sz
		return start, nil
	}
	return 0, fmt.Errorf("vfio: allocate IOVA of %d bytes aligned to %#x: %w", size, align, ErrIOVAExhausted)
}

// Release gives back a range returned by Alloc (iova exactly as returned).
func (a *IOVAAllocator) Release(iova uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	sz, ok := a.inUse[iova]
	if !ok {
		return fmt.Errorf("vfio: release IOVA %#x: not allocated: %w", iova, ErrNotMapped)
	}
	delete(a.inUse, iova)
	r := IOVARange{iova, iova + sz - 1}
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].Start > iova })
	a.free = append(a.free[:i], append([]IOVARange{r}, a.free[i:]...)...)
	// Coalesce with the neighbours.
	if i+1 < len(a.free) && a.free[i].End+1 == a.free[i+1].Start {
		a.free[i].End = a.free[i+1].End
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].End+1 == a.free[i].Start {
		a.free[i-1].End = a.free[i].End
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	return nil
}

// roundUp64 rounds v up to a multiple of the power of two p; ok is false
// on overflow.
func roundUp64(v, p uint64) (uint64, bool) {
	s, carry := bits.Add64(v, p-1, 0)
	if carry != 0 {
		return 0, false
	}
	return s &^ (p - 1), true
}
