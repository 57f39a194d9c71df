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

// lookup returns the live block of ar holding the byte at off (0 <= off <
// the arena's length): its offset, length and generation, and its slab and
// object index (s nil for a large block). gen is 0 when no live block holds
// the byte. (Scalars, not a struct: they come back in registers on the
// Alloc/Free path.)
func (p *Pool) lookup(ar *poolArena, off int) (start, n int, gen uint32, s *slab, idx uint32) {
	u := uint32(off >> unitShift)
	o := ar.own[u]
	if o&slabBit != 0 {
		id := o &^ slabBit
		if int(id) >= len(p.slabs) {
			return 0, 0, 0, nil, 0
		}
		s = p.slabs[id]
		if s == nil || s.ar != ar || off < s.off {
			return 0, 0, 0, nil, 0
		}
		cs := classSizes[s.class]
		i := (off - s.off) / cs
		if i >= len(s.objs) {
			return 0, 0, 0, nil, 0
		}
		om := s.objs[i]
		start = s.off + i*cs
		if om.gen == 0 || off-start >= int(om.x) {
			return 0, 0, 0, nil, 0
		}
		return start, int(om.x), om.gen, s, uint32(i)
	}
	if o > u {
		return 0, 0, 0, nil, 0
	}
	gen, n, ok := ar.t.block(o)
	start = int(o) << unitShift
	if !ok || off-start >= n {
		return 0, 0, 0, nil, 0
	}
	return start, n, gen, nil, 0
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
		start, size, gen, _, _ := p.lookup(ar, off)
		// off ≥ start here; compare lengths, not ends: off+n overflows int
		// for a hostile n (a C caller's length), and the wrapped sum would
		// pass.
		if gen == 0 || n > size-(off-start) {
			return Block{}, false
		}
		return Block{ar: ar, off: start, n: size, gen: gen}, true
	}
	return Block{}, false
}
