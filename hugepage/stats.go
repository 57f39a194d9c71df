package hugepage

// PoolStats is a snapshot of a pool's accounting.
type PoolStats struct {
	Arenas        int     // arenas mapped now
	Mapped        int64   // bytes mapped in all arenas
	InUse         int64   // bytes in live blocks (sum of their Len)
	Peak          int64   // highest InUse seen
	Held          int64   // bytes taken from the arenas by slabs and large blocks
	Free          int64   // Mapped - Held
	LargestFree   int64   // longest free span of any arena
	Fragmentation float64 // external: 1 - LargestFree/Free (0 when nothing is free)
	Waste         float64 // internal: 1 - InUse/Held (class rounding, empty slab space)
	Allocs        uint64
	Frees         uint64
	Failures      uint64 // Alloc calls that returned an error past argument checks
	LargeBlocks   int
	LargeBytes    int64
	Grows         int // arenas added
	Releases      int // arenas released (IdleRelease or Trim)
	Classes       []ClassStats
}

// ClassStats counts one size class (only classes that were used appear).
type ClassStats struct {
	Size   int    // object size in bytes
	Live   int64  // live blocks
	Slabs  int    // slabs held
	Allocs uint64 // blocks ever allocated
}

// Stats returns the pool's accounting now.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PoolStats{
		Arenas: len(p.arenas), Mapped: p.total, InUse: p.inUse, Peak: p.peak,
		Allocs: p.allocs, Frees: p.frees, Failures: p.failures,
		LargeBlocks: p.largeLive, LargeBytes: p.largeBytes, Grows: p.grows, Releases: p.releases,
	}
	for _, ar := range p.arenas {
		st.Free += int64(ar.t.freeUnits()) << unitShift
		st.LargestFree = max(st.LargestFree, int64(ar.t.largestFree())<<unitShift)
	}
	st.Held = st.Mapped - st.Free
	if st.Free > 0 {
		st.Fragmentation = 1 - float64(st.LargestFree)/float64(st.Free)
	}
	if st.Held > 0 {
		st.Waste = 1 - float64(st.InUse)/float64(st.Held)
	}
	for c := range classSizes {
		if p.classAllocs[c] > 0 || p.classSlabs[c] > 0 {
			st.Classes = append(st.Classes, ClassStats{Size: classSizes[c], Live: p.classLive[c], Slabs: p.classSlabs[c], Allocs: p.classAllocs[c]})
		}
	}
	return st
}
