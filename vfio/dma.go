package vfio

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/hcomm-go/hcomm/hugepage"
)

// DMAConfig configures a DMASpace.
type DMAConfig struct {
	// Mask is the highest IOVA the device can emit (its DMA mask), e.g.
	// 1<<28-1 for edu; 0 means 64 bits.
	Mask uint64
	// PageSize is the IOMMU page size mappings are aligned to; 0 means the
	// device's (KernelDevice.IOMMUPageSize) or 4096.
	PageSize uint64
}

// DMASpace maps hugepage arenas into a device's IOMMU domain, each once and
// whole, at IOVAs it allocates inside the IOMMU's valid ranges and below the
// device's DMA mask. A block of an arena is then addressed by the device at
// arena IOVA + block offset, with no per-transfer mapping. Close unmaps
// every arena still mapped. It works over any Device (kernel or vfio-mock)
// and is safe for concurrent use.
type DMASpace struct {
	dev   Device
	alloc *IOVAAllocator

	mu     sync.RWMutex
	arenas map[*hugepage.Arena]dmaMapping
	closed bool
}

type dmaMapping struct {
	iova   uint64
	size   uint64
	access Access
}

// NewDMASpace prepares to map arenas for dev.
func NewDMASpace(dev Device, cfg DMAConfig) (*DMASpace, error) {
	ps := cfg.PageSize
	if ps == 0 {
		ps = 4096
		if k, ok := dev.(interface{ IOMMUPageSize() uint64 }); ok {
			ps = k.IOMMUPageSize()
		}
	}
	alloc, err := NewIOVAAllocator(dev.IOVARanges(), cfg.Mask, ps)
	if err != nil {
		return nil, fmt.Errorf("vfio: DMA space for %s: %w", dev.Info().Name, inner(err))
	}
	return &DMASpace{dev: dev, alloc: alloc, arenas: map[*hugepage.Arena]dmaMapping{}}, nil
}

// Allocator is the IOVA allocator (for inspection).
func (s *DMASpace) Allocator() *IOVAAllocator { return s.alloc }

// MapArena maps the whole arena with the given access and returns its IOVA,
// aligned to the arena's page size (so the IOMMU may use large pages).
// Mapping an arena twice is ErrIOVAInUse. Unmap (UnmapArena or Close)
// before closing the arena: the kernel keeps the pages pinned, so the
// device cannot reach memory that was reused, but the mapping outlives its
// purpose.
func (s *DMASpace) MapArena(a *hugepage.Arena, access Access) (uint64, error) {
	mem := a.Bytes()
	if len(mem) == 0 {
		return 0, fmt.Errorf("vfio: map arena: %w: arena is closed or empty", ErrBadMapping)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("vfio: map arena at %#x: DMA space %w", a.Addr(), ErrClosed)
	}
	if m, ok := s.arenas[a]; ok {
		return 0, fmt.Errorf("vfio: map arena at %#x: already mapped at IOVA %#x: %w", a.Addr(), m.iova, ErrIOVAInUse)
	}
	size := uint64(len(mem))
	iova, err := s.alloc.Alloc(size, uint64(a.PageSize()))
	if err != nil {
		return 0, fmt.Errorf("vfio: map %d-byte arena: %w", size, inner(err))
	}
	if err := s.dev.MapDMA(iova, mem, access); err != nil {
		return 0, errors.Join(fmt.Errorf("vfio: map %d-byte arena at IOVA %#x: %w", size, iova, inner(err)), s.alloc.Release(iova))
	}
	s.arenas[a] = dmaMapping{iova: iova, size: size, access: access}
	return iova, nil
}

// UnmapArena removes the arena's mapping; the device can no longer reach it.
func (s *DMASpace) UnmapArena(a *hugepage.Arena) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.arenas[a]
	if !ok {
		return fmt.Errorf("vfio: unmap arena at %#x: %w", a.Addr(), ErrNotMapped)
	}
	return s.unmapLocked(a, m)
}

func (s *DMASpace) unmapLocked(a *hugepage.Arena, m dmaMapping) error {
	if err := s.dev.UnmapDMA(m.iova, m.size); err != nil {
		return fmt.Errorf("vfio: unmap arena at IOVA %#x: %w", m.iova, inner(err))
	}
	delete(s.arenas, a)
	return s.alloc.Release(m.iova)
}

// ArenaIOVA returns the IOVA at which a is mapped.
func (s *DMASpace) ArenaIOVA(a *hugepage.Arena) (uint64, bool) {
	s.mu.RLock()
	m, ok := s.arenas[a]
	s.mu.RUnlock()
	return m.iova, ok
}

// IOVA returns the device address of the n bytes at offset off of arena a:
// arena IOVA + off. ErrNotMapped when a is not mapped, ErrOutOfRange when
// the bytes are not inside it.
func (s *DMASpace) IOVA(a *hugepage.Arena, off, n int) (uint64, error) {
	s.mu.RLock()
	m, ok := s.arenas[a]
	s.mu.RUnlock()
	if !ok {
		return 0, fmt.Errorf("vfio: IOVA of arena at %#x: %w", a.Addr(), ErrNotMapped)
	}
	if off < 0 || n < 0 || uint64(off) > m.size || uint64(n) > m.size-uint64(off) {
		return 0, fmt.Errorf("vfio: IOVA of %d bytes at offset %d of a %d-byte arena: %w", n, off, m.size, ErrOutOfRange)
	}
	return m.iova + uint64(off), nil
}

// IOVAOf returns the device address of b, a slice inside a mapped arena.
func (s *DMASpace) IOVAOf(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("vfio: IOVA of an empty slice: %w", ErrBadMapping)
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	s.mu.RLock()
	defer s.mu.RUnlock()
	for a, m := range s.arenas {
		base := a.Addr()
		if p >= base && uint64(p-base)+uint64(len(b)) <= m.size {
			return m.iova + uint64(p-base), nil
		}
	}
	return 0, fmt.Errorf("vfio: IOVA of %d bytes at %#x: not in a mapped arena: %w", len(b), p, ErrNotMapped)
}

// Check reports whether the device may access [iova, iova+n) with access:
// nil when a mapped arena covers the range with at least that access,
// ErrNotMapped otherwise. Drivers call it before handing an IOVA to a
// device, so that a stale or wrong address is an error rather than an
// IOMMU fault.
func (s *DMASpace) Check(iova, n uint64, access Access) error {
	if n == 0 {
		return fmt.Errorf("vfio: IOVA %#x: empty range: %w", iova, ErrBadMapping)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, m := range s.arenas {
		if iova >= m.iova && n <= m.size && iova-m.iova <= m.size-n {
			if m.access&access != access {
				return fmt.Errorf("vfio: IOVA %#x+%d: mapped without %#x access: %w", iova, n, access, ErrNotMapped)
			}
			return nil
		}
	}
	return fmt.Errorf("vfio: IOVA %#x+%d: %w", iova, n, ErrNotMapped)
}

// Close unmaps every arena still mapped (the device stays open). Idempotent.
func (s *DMASpace) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for a, m := range s.arenas {
		errs = append(errs, s.unmapLocked(a, m))
	}
	return errors.Join(errs...)
}

// BlockIOVA returns the device address of a pool block: its arena's IOVA
// plus its offset. The arena must be mapped (MapArena). No allocation.
func (s *DMASpace) BlockIOVA(b hugepage.Block) (uint64, error) {
	if b.IsZero() {
		return 0, fmt.Errorf("vfio: IOVA of the zero block: %w", ErrBadMapping)
	}
	return s.IOVA(b.Arena(), b.Offset(), b.Len())
}
