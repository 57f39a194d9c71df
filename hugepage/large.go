package hugepage

import "fmt"

// Large blocks: requests beyond the size classes, or aligned beyond what
// their class offers, take whole units from an arena's large allocator
// (tlsf.go), which records their generation and length.

// allocLarge hands out a large block of size bytes aligned to align.
func (p *Pool) allocLarge(size, align int) (Block, error) {
	units := uint32((size + unitSize - 1) >> unitShift)
	ar, u, err := p.allocUnits(units, max(align, unitSize), false)
	if err != nil {
		return Block{}, err
	}
	g := p.nextGen()
	ar.t.setBlock(u, g, size)
	ar.setOwner(u, units, u)
	p.blockTaken(ar)
	p.largeLive++
	p.largeBytes += int64(size)
	return Block{ar: ar, off: int(u) << unitShift, n: size, gen: g}, nil
}

// freeLarge returns the units of a large block to its arena.
func (p *Pool) freeLarge(b Block) {
	b.ar.t.free(uint32(b.off >> unitShift))
	p.largeLive--
	p.largeBytes -= int64(b.n)
}

// allocUnits takes units (for a slab, or a large block) from the first
// arena that has them, growing the pool by an arena when none has and
// growth is allowed.
func (p *Pool) allocUnits(units uint32, align int, slab bool) (*poolArena, uint32, error) {
	for _, ar := range p.arenas {
		if u, ok := ar.t.alloc(units, align, slab); ok {
			return ar, u, nil
		}
	}
	ar, err := p.grow(int64(units)<<unitShift + int64(align-unitSize))
	if err != nil {
		return nil, 0, err
	}
	u, ok := ar.t.alloc(units, align, slab)
	if !ok {
		return nil, 0, fmt.Errorf("%w: a new arena of %d bytes cannot hold %d units aligned to %d", ErrPoolExhausted, ar.a.Len(), units, align)
	}
	return ar, u, nil
}
