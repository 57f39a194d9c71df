package hugepage

import "math/bits"

// The large allocator of one arena: a two-level segregated fit (TLSF)
// allocator over 4 KiB units. Free spans sit in bins by size (a power-of-two
// first level, 16 linear second-level bins); two bitmaps find a non-empty
// bin in O(1). Freeing coalesces with free neighbours through boundary tags
// (flags at each free span's first and last unit), also in O(1). All
// metadata lives in Go slices beside the arena, never in the arena itself, so
// an application writing past its block cannot corrupt the allocator.
//
// The pool uses it through alloc, setBlock, block, free, freeUnits and
// largestFree only; the rest of this file is the allocator's own.

const (
	slBits  = 4
	slCount = 1 << slBits
	flCount = 32
)

const (
	fFreeHead uint8 = 1 << iota // first unit of a free span
	fFreeTail                   // last unit of a free span
	fUsed                       // first unit of an allocated span
	fSlab                       // with fUsed: the span is a slab
)

type unitMeta struct {
	len   uint32 // span length in units (valid at span heads)
	next  uint32 // free list links: unit index + 1, 0 = none
	prev  uint32
	head  uint32 // at a free span's tail: its head unit
	gen   uint32 // at a used large span's head: the allocation's generation
	flags uint8
	n     int // at a used large span's head: the block's length in bytes
}

type tlsf struct {
	base     uintptr // address of unit 0
	units    uint32
	freeU    uint32 // free units
	meta     []unitMeta
	flBitmap uint32
	slBitmap [flCount]uint32
	heads    [flCount][slCount]uint32 // unit + 1, 0 = empty
}

func newTLSF(base uintptr, units uint32) *tlsf {
	t := &tlsf{base: base, units: units, meta: make([]unitMeta, units)}
	t.insert(0, units)
	return t
}

// mapping returns the bin of a span of n units (floor).
func mapping(n uint32) (fl, sl int) {
	if n < slCount {
		return 0, int(n)
	}
	f := bits.Len32(n) - 1
	return f - slBits + 1, int(n>>(f-slBits)) - slCount
}

// mappingSearch returns the first bin whose every span holds n units.
func mappingSearch(n uint32) (fl, sl int) {
	if n >= slCount {
		n += 1<<(bits.Len32(n)-1-slBits) - 1
	}
	return mapping(n)
}

func (t *tlsf) insert(u, n uint32) {
	fl, sl := mapping(n)
	m := &t.meta[u]
	m.len = n
	m.flags = fFreeHead
	m.prev = 0
	m.next = t.heads[fl][sl]
	if m.next != 0 {
		t.meta[m.next-1].prev = u + 1
	}
	t.heads[fl][sl] = u + 1
	t.flBitmap |= 1 << fl
	t.slBitmap[fl] |= 1 << sl
	tail := &t.meta[u+n-1]
	tail.flags |= fFreeTail
	tail.head = u
	t.freeU += n
}

func (t *tlsf) remove(u uint32) {
	m := &t.meta[u]
	fl, sl := mapping(m.len)
	if m.prev != 0 {
		t.meta[m.prev-1].next = m.next
	} else {
		t.heads[fl][sl] = m.next
		if m.next == 0 {
			t.slBitmap[fl] &^= 1 << sl
			if t.slBitmap[fl] == 0 {
				t.flBitmap &^= 1 << fl
			}
		}
	}
	if m.next != 0 {
		t.meta[m.next-1].prev = m.prev
	}
	m.next, m.prev = 0, 0
	m.flags &^= fFreeHead
	t.meta[u+m.len-1].flags &^= fFreeTail
	t.freeU -= m.len
}

// find returns the head of a free span of at least n units.
func (t *tlsf) find(n uint32) (uint32, bool) {
	fl, sl := mappingSearch(n)
	if fl < flCount {
		slMap := t.slBitmap[fl] & (^uint32(0) << sl)
		if slMap == 0 {
			flMap := t.flBitmap & (^uint32(0) << (fl + 1))
			if flMap != 0 {
				fl = bits.TrailingZeros32(flMap)
				slMap = t.slBitmap[fl]
			}
		}
		if slMap != 0 {
			return t.heads[fl][bits.TrailingZeros32(slMap)] - 1, true
		}
	}
	// The rounded search skips the bin of n itself, whose spans may or may
	// not be long enough; near exhaustion, look there before giving up.
	fl, sl = mapping(n)
	for h := t.heads[fl][sl]; h != 0; h = t.meta[h-1].next {
		if t.meta[h-1].len >= n {
			return h - 1, true
		}
	}
	return 0, false
}

// alloc takes n units whose first byte is aligned to align (a power of two)
// for a slab (slab true) or a large block, and returns the first unit.
func (t *tlsf) alloc(n uint32, align int, slab bool) (uint32, bool) {
	extra := uint32(0)
	if align > unitSize {
		extra = uint32(align/unitSize) - 1
	}
	if n+extra < n || n+extra > t.freeU {
		return 0, false
	}
	u, ok := t.find(n + extra)
	if !ok {
		return 0, false
	}
	spanLen := t.meta[u].len
	t.remove(u)
	start := u
	if extra > 0 {
		addr := t.base + uintptr(u)<<unitShift
		start = u + uint32((roundUpPtr(addr, uintptr(align))-addr)>>unitShift)
	}
	if start > u {
		t.insert(u, start-u)
	}
	if end, spanEnd := start+n, u+spanLen; spanEnd > end {
		t.insert(end, spanEnd-end)
	}
	m := &t.meta[start]
	m.len = n
	m.flags = fUsed
	if slab {
		m.flags |= fSlab
	}
	return start, true
}

// setBlock records the generation and the length in bytes of the large
// block that alloc just placed at u.
func (t *tlsf) setBlock(u, gen uint32, size int) {
	m := &t.meta[u]
	m.gen, m.n = gen, size
}

// block returns the generation and length in bytes of the large block
// whose first unit is u; ok is false when no live large block starts at u
// (a free unit, a slab, the inside of a span).
func (t *tlsf) block(u uint32) (gen uint32, size int, ok bool) {
	m := &t.meta[u]
	if m.flags != fUsed || m.gen == 0 {
		return 0, 0, false
	}
	return m.gen, m.n, true
}

// freeUnits is the number of free units.
func (t *tlsf) freeUnits() uint32 { return t.freeU }

// free returns the span at u (a slab or a large block) and merges it with
// its free neighbours.
func (t *tlsf) free(u uint32) {
	m := &t.meta[u]
	start, n := u, m.len
	m.flags, m.gen, m.n = 0, 0, 0
	if end := u + n; end < t.units && t.meta[end].flags&fFreeHead != 0 {
		l := t.meta[end].len
		t.remove(end)
		n += l
	}
	if u > 0 && t.meta[u-1].flags&fFreeTail != 0 {
		h := t.meta[u-1].head
		l := t.meta[h].len
		t.remove(h)
		start, n = h, n+l
	}
	t.insert(start, n)
}

// largestFree walks the highest non-empty bin for its longest span.
func (t *tlsf) largestFree() uint32 {
	if t.flBitmap == 0 {
		return 0
	}
	fl := flCount - 1 - bits.LeadingZeros32(t.flBitmap)
	sl := 31 - bits.LeadingZeros32(t.slBitmap[fl])
	best := uint32(0)
	for h := t.heads[fl][sl]; h != 0; h = t.meta[h-1].next {
		best = max(best, t.meta[h-1].len)
	}
	return best
}

func roundUpPtr(p, to uintptr) uintptr { return (p + to - 1) &^ (to - 1) }
