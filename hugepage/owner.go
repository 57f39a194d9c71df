package hugepage

// Ownership lookup: which live block holds a byte of an arena. Free uses it
// to check a Block before freeing it, Contains to resolve an address range.
//
// poolArena.own has one entry per unit: slabBit|slab id for a unit of a
// slab, the first unit for a unit of a large block. An entry is written
// when its unit is handed out and left as it is when the unit is freed, so
// it may be stale: lookup checks every entry against the slab table and the
// large allocator before trusting it.

// setOwner records owner for the units [u, u+n).
func (ar *poolArena) setOwner(u, n, owner uint32) {
	own := ar.own[u : u+n]
	for i := range own {
		own[i] = owner
	}
}

// slot is a live block found by lookup, with where its state is kept.
type slot struct {
	b   Block
	s   *slab  // the block's slab, or nil for a large block
	idx uint32 // the block's object index in s
}

// lookup returns the live block of ar holding the byte at off (0 <= off <
// the arena's length), or false when no live block holds it.
func (p *Pool) lookup(ar *poolArena, off int) (slot, bool) {
	u := uint32(off >> unitShift)
	o := ar.own[u]
	if o&slabBit != 0 {
		id := o &^ slabBit
		if int(id) >= len(p.slabs) {
			return slot{}, false
		}
		s := p.slabs[id]
		if s == nil || s.ar != ar || off < s.off {
			return slot{}, false
		}
		cs := classSizes[s.class]
		idx := (off - s.off) / cs
		if idx >= len(s.objs) {
			return slot{}, false
		}
		om := s.objs[idx]
		b := Block{ar: ar, off: s.off + idx*cs, n: int(om.x), gen: om.gen}
		if om.gen == 0 || off-b.off >= b.n {
			return slot{}, false
		}
		return slot{b: b, s: s, idx: uint32(idx)}, true
	}
	if o > u {
		return slot{}, false
	}
	gen, n, ok := ar.t.block(o)
	b := Block{ar: ar, off: int(o) << unitShift, n: n, gen: gen}
	if !ok || off-b.off >= b.n {
		return slot{}, false
	}
	return slot{b: b}, true
}

// Contains resolves the range [addr, addr+n) to the live block holding it
// (how a C caller's pointer or a transfer's range is validated). addr must
// be a byte of the block.
func (p *Pool) Contains(addr uintptr, n int) (Block, bool) {
	if n < 0 {
		return Block{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ar := range p.arenas {
		base := ar.a.Addr()
		if addr < base || addr >= base+uintptr(ar.a.size) {
			continue
		}
		off := int(addr - base)
		sl, ok := p.lookup(ar, off)
		// off ≥ b.off here; compare lengths, not ends: off+n overflows int
		// for a hostile n (a C caller's length), and the wrapped sum would
		// pass.
		if !ok || n > sl.b.n-(off-sl.b.off) {
			return Block{}, false
		}
		return sl.b, true
	}
	return Block{}, false
}
