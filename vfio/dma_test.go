package vfio

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/hcomm-go/hcomm/hugepage"
)

// recorder is a Device that only keeps a DMA map table, to test DMASpace
// without a kernel device.
type recorder struct {
	ranges []IOVARange
	maps   map[uint64]uint64
	vaddr  map[uint64]uintptr
	fail   error
}

func newRecorder(r ...IOVARange) *recorder {
	return &recorder{ranges: r, maps: map[uint64]uint64{}, vaddr: map[uint64]uintptr{}}
}

func (r *recorder) Info() DeviceInfo                  { return DeviceInfo{Name: "recorder"} }
func (r *recorder) Region(int) (Region, error)        { return nil, ErrNoRegion }
func (r *recorder) IOVARanges() []IOVARange           { return r.ranges }
func (r *recorder) IRQCount(IRQKind) int              { return 0 }
func (r *recorder) SetIRQs(IRQKind, int, []int) error { return ErrNoIRQ }
func (r *recorder) UnmaskIRQ(IRQKind, int) error      { return ErrNoIRQ }
func (r *recorder) Reset() error                      { return ErrNotSupported }
func (r *recorder) Close() error                      { return nil }
func (r *recorder) MapDMA(iova uint64, mem []byte, _ Access) error {
	if r.fail != nil {
		return r.fail
	}
	for s, n := range r.maps {
		if iova < s+n && s < iova+uint64(len(mem)) {
			return ErrIOVAInUse
		}
	}
	r.maps[iova] = uint64(len(mem))
	r.vaddr[iova] = uintptr(unsafe.Pointer(&mem[0]))
	return nil
}
func (r *recorder) UnmapDMA(iova, size uint64) error {
	if r.maps[iova] != size {
		return ErrNotMapped
	}
	delete(r.maps, iova)
	return nil
}

func newArena(t *testing.T, size int) *hugepage.Arena {
	t.Helper()
	a, err := hugepage.NewArena(hugepage.ArenaConfig{Size: size, Backings: []hugepage.Backing{hugepage.Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestDMASpace(t *testing.T) {
	dev := newRecorder(vtdRanges...)
	s, err := NewDMASpace(dev, DMAConfig{Mask: 1<<28 - 1})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newArena(t, 64<<10), newArena(t, 8<<10)
	ia, err := s.MapArena(a, DMAReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := s.MapArena(b, DMARead)
	if err != nil {
		t.Fatal(err)
	}
	if ia == 0 || ia == ib || ia%4096 != 0 || ib+8<<10-1 > 1<<28-1 {
		t.Fatalf("IOVAs %#x %#x", ia, ib)
	}
	if dev.maps[ia] != 64<<10 || dev.vaddr[ia] != a.Addr() {
		t.Fatalf("device saw %#x bytes at %#x for arena at %#x", dev.maps[ia], dev.vaddr[ia], a.Addr())
	}
	if _, err := s.MapArena(a, DMARead); !errors.Is(err, ErrIOVAInUse) {
		t.Errorf("mapping twice: %v", err)
	}
	if got, ok := s.ArenaIOVA(a); !ok || got != ia {
		t.Errorf("ArenaIOVA = %#x %v", got, ok)
	}
	if v, err := s.IOVA(a, 100, 50); err != nil || v != ia+100 {
		t.Errorf("IOVA(a, 100) = %#x, %v", v, err)
	}
	if _, err := s.IOVA(a, 64<<10-10, 11); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("IOVA past the end: %v", err)
	}
	if v, err := s.IOVAOf(b.Bytes()[4096:4100]); err != nil || v != ib+4096 {
		t.Errorf("IOVAOf = %#x, %v", v, err)
	}
	if _, err := s.IOVAOf(make([]byte, 8)); !errors.Is(err, ErrNotMapped) {
		t.Errorf("IOVAOf heap memory: %v", err)
	}
	// Check: access rights and bounds.
	if err := s.Check(ia+10, 100, DMAWrite); err != nil {
		t.Errorf("Check rw arena: %v", err)
	}
	if err := s.Check(ib, 100, DMAWrite); !errors.Is(err, ErrNotMapped) {
		t.Errorf("Check write into read-only arena: %v", err)
	}
	if err := s.Check(ia+64<<10-4, 8, DMARead); !errors.Is(err, ErrNotMapped) {
		t.Errorf("Check straddling the end: %v", err)
	}
	if err := s.Check(ia, 0, DMARead); !errors.Is(err, ErrBadMapping) {
		t.Errorf("Check of 0 bytes: %v", err)
	}
	if err := s.UnmapArena(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ib, 1, DMARead); !errors.Is(err, ErrNotMapped) {
		t.Errorf("Check after unmap: %v", err)
	}
	if err := s.UnmapArena(b); !errors.Is(err, ErrNotMapped) {
		t.Errorf("unmap twice: %v", err)
	}
	// A device error leaves no IOVA allocated.
	dev.fail = errors.New("boom")
	if _, err := s.MapArena(b, DMARead); err == nil {
		t.Fatal("device failure not reported")
	}
	dev.fail = nil
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(dev.maps) != 0 {
		t.Fatalf("Close left mappings: %v", dev.maps)
	}
	if free := s.Allocator().FreeRanges(); len(free) != 1 || free[0] != (IOVARange{0x1000, 1<<28 - 1}) {
		t.Fatalf("IOVA space after Close: %#x", free)
	}
	if _, err := s.MapArena(a, DMARead); !errors.Is(err, ErrClosed) {
		t.Errorf("MapArena after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestDMASpaceBlockIOVA(t *testing.T) {
	dev := newRecorder(IOVARange{0, 1<<32 - 1})
	s, err := NewDMASpace(dev, DMAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := hugepage.NewPool(hugepage.PoolConfig{Size: 1 << 20, Arena: hugepage.ArenaConfig{Backings: []hugepage.Backing{hugepage.Backing4K}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	blk, err := p.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.BlockIOVA(blk); !errors.Is(err, ErrNotMapped) {
		t.Fatalf("BlockIOVA before mapping: %v", err)
	}
	base, err := s.MapArena(blk.Arena(), DMAReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.BlockIOVA(blk)
	if err != nil || v != base+uint64(blk.Offset()) {
		t.Fatalf("BlockIOVA = %#x, %v; want arena IOVA %#x + offset %d", v, err, base, blk.Offset())
	}
	if allocs := testing.AllocsPerRun(100, func() { s.BlockIOVA(blk) }); allocs != 0 {
		t.Errorf("BlockIOVA allocates %v times", allocs)
	}
	if _, err := s.BlockIOVA(hugepage.Block{}); !errors.Is(err, ErrBadMapping) {
		t.Errorf("BlockIOVA(zero block): %v", err)
	}
	if err := s.UnmapArena(blk.Arena()); err != nil {
		t.Fatal(err)
	}
}
