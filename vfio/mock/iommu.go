package mock

import (
	"fmt"
	"sort"

	"github.com/hcomm-go/hcomm/vfio"
)

// IOMMUPageSize is the emulated IOMMU's page size: MapDMA's iova and length
// must be multiples of it.
const IOMMUPageSize = 4096

// mapping is one DMA mapping: IOVAs [iova, iova+size) translate to mem.
type mapping struct {
	iova, size uint64
	mem        []byte // len == cap == size: the device can never reach past it
	access     vfio.Access
}

// iommu is the emulated IOMMU's translation table: mappings sorted by IOVA,
// never overlapping. It is guarded by Device.mu.
type iommu struct {
	maps []mapping
	// The last mapping found, one hint per kind of access, as a hardware
	// IOTLB keeps recent translations: ring entries (descriptors,
	// completions: slice) and transfer data (check, read, write) each
	// repeat their mapping, but alternate with each other wherever a
	// driver keeps its rings apart from its buffers, and a translation
	// must not cost the model a search there when it does not where they
	// share a mapping. A hint is checked against maps on use, so mapping
	// and unmapping (which shift indices) need not invalidate it.
	ringHint, dataHint int
}

// find returns the index of the mapping containing iova, or -1; *hint is
// where it looks first, and where it records what it found.
func (m *iommu) find(iova uint64, hint *int) int {
	if l := *hint; l < len(m.maps) && m.maps[l].iova <= iova && iova-m.maps[l].iova < m.maps[l].size {
		return l
	}
	// First mapping whose end is above iova.
	i := sort.Search(len(m.maps), func(i int) bool {
		return m.maps[i].iova+m.maps[i].size > iova
	})
	if i < len(m.maps) && m.maps[i].iova <= iova {
		*hint = i
		return i
	}
	return -1
}

// check reports whether every byte of [iova, iova+n) is mapped with access
// acc. When it is not, fault is the lowest address that is not. A range may
// span several mappings that are contiguous in IOVA space, as on hardware.
// n == 0 is never called by the device (zero lengths are bad descriptors).
func (m *iommu) check(iova, n uint64, acc vfio.Access) (fault uint64, ok bool) {
	if iova+n < iova { // wraps: the part past 2^64 is never mapped
		return iova, false
	}
	i := m.find(iova, &m.dataHint)
	cur, end := iova, iova+n
	for cur < end {
		if i < 0 || i >= len(m.maps) || m.maps[i].iova > cur {
			return cur, false
		}
		mp := &m.maps[i]
		if mp.access&acc != acc {
			return cur, false
		}
		cur = mp.iova + mp.size
		i++
	}
	return 0, true
}

// read copies [iova, iova+len(dst)) into dst. The caller has checked the range.
func (m *iommu) read(dst []byte, iova uint64) {
	i := m.find(iova, &m.dataHint)
	for len(dst) > 0 {
		mp := &m.maps[i]
		n := copy(dst, mp.mem[iova-mp.iova:])
		dst = dst[n:]
		iova += uint64(n)
		i++
	}
}

// write copies src to [iova, iova+len(src)). The caller has checked the range.
func (m *iommu) write(iova uint64, src []byte) {
	i := m.find(iova, &m.dataHint)
	for len(src) > 0 {
		mp := &m.maps[i]
		n := copy(mp.mem[iova-mp.iova:], src)
		src = src[n:]
		iova += uint64(n)
		i++
	}
}

// slice returns the memory behind [iova, iova+n) when one mapping holds it
// all with access acc (ring entries never straddle a mapping: they are
// aligned to their size and mappings to pages).
func (m *iommu) slice(iova, n uint64, acc vfio.Access) ([]byte, uint64, bool) {
	if iova+n < iova {
		return nil, iova, false
	}
	i := m.find(iova, &m.ringHint)
	if i < 0 {
		return nil, iova, false
	}
	mp := &m.maps[i]
	if mp.access&acc != acc {
		return nil, iova, false
	}
	if iova+n > mp.iova+mp.size {
		return nil, mp.iova + mp.size, false
	}
	off := iova - mp.iova
	return mp.mem[off : off+n : off+n], 0, true
}

// add inserts a mapping after validating it against ranges.
func (m *iommu) add(iova uint64, mem []byte, access vfio.Access, ranges []vfio.IOVARange) error {
	size := uint64(len(mem))
	switch {
	case size == 0:
		return fmt.Errorf("mock: map DMA %#x+0: empty mapping: %w", iova, vfio.ErrBadMapping)
	case iova%IOMMUPageSize != 0 || size%IOMMUPageSize != 0:
		return fmt.Errorf("mock: map DMA %#x+%#x: iova and length must be multiples of %d: %w", iova, size, IOMMUPageSize, vfio.ErrBadMapping)
	case access&^vfio.DMAReadWrite != 0 || access == 0:
		return fmt.Errorf("mock: map DMA %#x+%#x: access %#x: %w", iova, size, uint32(access), vfio.ErrBadMapping)
	case iova+size < iova:
		return fmt.Errorf("mock: map DMA %#x+%#x: range wraps: %w", iova, size, vfio.ErrBadMapping)
	}
	inRange := false
	for _, r := range ranges {
		if iova >= r.Start && iova+size-1 <= r.End {
			inRange = true
			break
		}
	}
	if !inRange {
		return fmt.Errorf("mock: map DMA %#x+%#x: outside the IOMMU's IOVA ranges %v: %w", iova, size, ranges, vfio.ErrBadMapping)
	}
	i := sort.Search(len(m.maps), func(i int) bool { return m.maps[i].iova >= iova })
	if i > 0 && m.maps[i-1].iova+m.maps[i-1].size > iova {
		return fmt.Errorf("mock: map DMA %#x+%#x: overlaps mapping %#x+%#x: %w", iova, size, m.maps[i-1].iova, m.maps[i-1].size, vfio.ErrIOVAInUse)
	}
	if i < len(m.maps) && iova+size > m.maps[i].iova {
		return fmt.Errorf("mock: map DMA %#x+%#x: overlaps mapping %#x+%#x: %w", iova, size, m.maps[i].iova, m.maps[i].size, vfio.ErrIOVAInUse)
	}
	m.maps = append(m.maps, mapping{})
	copy(m.maps[i+1:], m.maps[i:])
	m.maps[i] = mapping{iova: iova, size: size, mem: mem[:size:size], access: access}
	return nil
}

// remove deletes the mapping that is exactly [iova, iova+size).
func (m *iommu) remove(iova, size uint64) error {
	for i := range m.maps {
		if m.maps[i].iova == iova && m.maps[i].size == size {
			copy(m.maps[i:], m.maps[i+1:])
			m.maps[len(m.maps)-1] = mapping{}
			m.maps = m.maps[:len(m.maps)-1]
			return nil
		}
	}
	return fmt.Errorf("mock: unmap DMA %#x+%#x: %w", iova, size, vfio.ErrNotMapped)
}
