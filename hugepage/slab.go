package hugepage

// Size-class slabs: small and medium blocks (classes.go) are objects of
// slabs, spans of whole units taken from an arena's large allocator. Each
// class keeps a doubly linked list of slabs with a free object and at most
// one empty slab; a slab emptied beyond that goes back to its arena.

// slabBit marks an ownership-map entry (poolArena.own) that holds a slab id.
const slabBit = 1 << 31

type slab struct {
	ar       *poolArena
	class    int
	id       uint32 // index in Pool.slabs
	unit     uint32 // first unit in the arena
	off      int    // offset of the first object in the arena
	objs     []objMeta
	live     uint32
	carved   uint32 // objects handed out at least once; the rest are virgin
	freeHead uint32 // free list: object index + 1, 0 = empty
	next     *slab
	prev     *slab
	listed   bool // on the class's partial list
}

// objMeta is a slab object's state: gen != 0 while live, with x its length
// in bytes; gen == 0 while free, with x the next free object + 1.
type objMeta struct {
	gen uint32
	x   uint32
}

// allocSmall hands out an object of class c for a block of size bytes.
func (p *Pool) allocSmall(c, size int) (Block, error) {
	s := p.partial[c]
	if s == nil {
		var err error
		if s, err = p.newSlab(c); err != nil {
			return Block{}, err
		}
	}
	var idx uint32
	if s.freeHead != 0 {
		idx = s.freeHead - 1
		s.freeHead = s.objs[idx].x
	} else {
		idx = s.carved
		s.carved++
	}
	if s.live == 0 {
		p.empty[c]--
	}
	s.live++
	if s.live == slabObjs[c] {
		p.unlink(s)
	}
	g := p.nextGen()
	s.objs[idx] = objMeta{gen: g, x: uint32(size)}
	p.blockTaken(s.ar)
	p.classLive[c]++
	p.classAllocs[c]++
	return Block{ar: s.ar, off: s.off + int(idx)*classSizes[c], n: size, gen: g}, nil
}

// freeSmall returns object idx of s to its free list.
func (p *Pool) freeSmall(s *slab, idx uint32) {
	c := s.class
	s.objs[idx] = objMeta{x: s.freeHead}
	s.freeHead = idx + 1
	if !s.listed {
		p.link(s)
	}
	s.live--
	p.classLive[c]--
	if s.live == 0 {
		if p.empty[c] >= 1 {
			p.releaseSlab(s)
		} else {
			p.empty[c]++
		}
	}
}

// newSlab takes units for a slab of class c (growing the pool if needed),
// records it in the ownership map and puts it on the partial list.
func (p *Pool) newSlab(c int) (*slab, error) {
	units := slabUnits[c]
	ar, u, err := p.allocUnits(units, slabAlign(c), true)
	if err != nil {
		return nil, err
	}
	var s *slab
	if k := len(p.spare[c]); k > 0 {
		s = p.spare[c][k-1]
		p.spare[c] = p.spare[c][:k-1]
	} else {
		s = &slab{class: c, objs: make([]objMeta, slabObjs[c])}
	}
	var id uint32
	if k := len(p.freeIDs); k > 0 {
		id = p.freeIDs[k-1]
		p.freeIDs = p.freeIDs[:k-1]
	} else {
		id = uint32(len(p.slabs))
		p.slabs = append(p.slabs, nil)
	}
	p.slabs[id] = s
	s.ar, s.id, s.unit, s.off = ar, id, u, int(u)<<unitShift
	ar.setOwner(u, units, id|slabBit)
	p.link(s)
	p.empty[c]++
	p.classSlabs[c]++
	return s, nil
}

// releaseSlab gives an empty slab's units back to its arena and keeps the
// struct for the next slab of its class.
func (p *Pool) releaseSlab(s *slab) {
	p.unlink(s)
	s.ar.t.free(s.unit)
	p.slabs[s.id] = nil
	p.freeIDs = append(p.freeIDs, s.id)
	p.classSlabs[s.class]--
	s.ar, s.live, s.carved, s.freeHead = nil, 0, 0, 0
	p.spare[s.class] = append(p.spare[s.class], s)
}

// releaseSlabs releases the (empty) slabs of an arena about to be closed.
func (p *Pool) releaseSlabs(ar *poolArena) {
	for _, s := range p.slabs {
		if s != nil && s.ar == ar {
			p.empty[s.class]--
			p.releaseSlab(s)
		}
	}
}

func (p *Pool) link(s *slab) {
	s.prev, s.next = nil, p.partial[s.class]
	if s.next != nil {
		s.next.prev = s
	}
	p.partial[s.class] = s
	s.listed = true
}

func (p *Pool) unlink(s *slab) {
	if !s.listed {
		return
	}
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		p.partial[s.class] = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
	s.next, s.prev, s.listed = nil, nil, false
}
