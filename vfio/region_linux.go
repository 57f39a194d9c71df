package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelRegion is a region of a KernelDevice. Accesses inside an mmap'd
// part are single MMIO loads/stores (mmio_amd64.s, mmio_arm64.s); the rest (config space,
// BAR parts outside the sparse mmap areas, BARs that cannot be mmap'd) go
// through pread/pwrite on the device fd at the region's offset, which the
// kernel turns into one access of the same width.
type kernelRegion struct {
	dev   *KernelDevice
	desc  regionDesc
	areas []mappedArea
	// plain is the whole region mapped in one piece when the BAR is
	// prefetchable (no read side effects), else nil: see Mapped.
	plain []byte
}

type mappedArea struct {
	off uint64 // within the region
	mem []byte
}

func newKernelRegion(d *KernelDevice, desc regionDesc) (*kernelRegion, error) {
	r := &kernelRegion{dev: d, desc: desc}
	if desc.Flags&regionInfoFlagMmap == 0 || desc.Index == RegionConfig {
		return r, nil
	}
	areas := desc.Sparse
	if areas == nil {
		areas = []sparseArea{{0, desc.Size}}
	}
	prot := 0
	if desc.Flags&regionInfoFlagRead != 0 {
		prot |= unix.PROT_READ
	}
	if desc.Flags&regionInfoFlagWrite != 0 {
		prot |= unix.PROT_WRITE
	}
	for _, a := range areas {
		mem, err := unix.Mmap(d.fd, int64(desc.Offset+a.Offset), int(a.Size), prot, unix.MAP_SHARED)
		if err != nil {
			// Not fatal: this part stays reachable through pread/pwrite.
			continue
		}
		r.areas = append(r.areas, mappedArea{off: a.Offset, mem: mem})
	}
	if len(r.areas) == 1 && r.areas[0].off == 0 && uint64(len(r.areas[0].mem)) == desc.Size && desc.Index <= RegionBAR5 {
		if pf, err := d.barPrefetchable(desc.Index); err == nil && pf {
			r.plain = r.areas[0].mem
		}
	}
	return r, nil
}

// barPrefetchable reads BAR index's prefetchable bit (bit 3 of a memory BAR)
// from config space.
func (d *KernelDevice) barPrefetchable(index int) (bool, error) {
	var b [4]byte
	cfg, err := d.regionInfo(RegionConfig)
	if err != nil {
		return false, err
	}
	if _, err := unix.Pread(d.fd, b[:], int64(cfg.Offset)+0x10+int64(4*index)); err != nil {
		return false, err
	}
	v := binary.LittleEndian.Uint32(b[:])
	return v&1 == 0 && v&8 != 0, nil
}

func (r *kernelRegion) Index() int   { return r.desc.Index }
func (r *kernelRegion) Size() uint64 { return r.desc.Size }

// Mapped returns the region as plain memory when it is a prefetchable BAR
// mapped whole (no read side effects, PCI's own definition), else nil.
func (r *kernelRegion) Mapped() []byte { return r.plain }

// MmapAreas lists the parts of the region that are mmap'd (offsets within
// the region, inclusive): register accesses there are single MMIO
// instructions, elsewhere pread/pwrite. For tests and diagnostics; reach it
// with a type assertion on the Region.
func (r *kernelRegion) MmapAreas() []IOVARange {
	out := make([]IOVARange, len(r.areas))
	for i, a := range r.areas {
		out[i] = IOVARange{Start: a.off, End: a.off + uint64(len(a.mem)) - 1}
	}
	return out
}

func (r *kernelRegion) unmap() error {
	var errs []error
	for _, a := range r.areas {
		errs = append(errs, unix.Munmap(a.mem))
	}
	r.areas, r.plain = nil, nil
	return errors.Join(errs...)
}

// check validates an access of w bytes at off and returns the address to
// use for MMIO, or 0 when the access goes through pread/pwrite.
func (r *kernelRegion) check(off uint64, w uint64) (uintptr, error) {
	if r.dev.closed.Load() {
		return 0, errDeviceClosed
	}
	if off%w != 0 {
		return 0, fmt.Errorf("vfio: region %d offset %#x, width %d: %w", r.desc.Index, off, w, ErrMisaligned)
	}
	if off >= r.desc.Size || r.desc.Size-off < w {
		return 0, fmt.Errorf("vfio: region %d offset %#x, width %d, size %#x: %w", r.desc.Index, off, w, r.desc.Size, ErrOutOfRange)
	}
	for _, a := range r.areas {
		if off >= a.off && off-a.off+w <= uint64(len(a.mem)) {
			return uintptr(unsafe.Pointer(&a.mem[0])) + uintptr(off-a.off), nil
		}
	}
	return 0, nil
}

func (r *kernelRegion) pread(off uint64, b []byte) error {
	n, err := unix.Pread(r.dev.fd, b, int64(r.desc.Offset+off))
	if err != nil {
		return fmt.Errorf("vfio: region %d read %d bytes at %#x: %w", r.desc.Index, len(b), off, err)
	}
	if n != len(b) {
		return fmt.Errorf("vfio: region %d read %d bytes at %#x: short read (%d)", r.desc.Index, len(b), off, n)
	}
	return nil
}

func (r *kernelRegion) pwrite(off uint64, b []byte) error {
	n, err := unix.Pwrite(r.dev.fd, b, int64(r.desc.Offset+off))
	if err != nil {
		return fmt.Errorf("vfio: region %d write %d bytes at %#x: %w", r.desc.Index, len(b), off, err)
	}
	if n != len(b) {
		return fmt.Errorf("vfio: region %d write %d bytes at %#x: short write (%d)", r.desc.Index, len(b), off, n)
	}
	return nil
}

func (r *kernelRegion) Read8(off uint64) (uint8, error) {
	p, err := r.check(off, 1)
	if err != nil {
		return 0, err
	}
	if p != 0 {
		return mmioRead8(p), nil
	}
	var b [1]byte
	err = r.pread(off, b[:])
	return b[0], err
}

func (r *kernelRegion) Read16(off uint64) (uint16, error) {
	p, err := r.check(off, 2)
	if err != nil {
		return 0, err
	}
	if p != 0 {
		return mmioRead16(p), nil
	}
	var b [2]byte
	err = r.pread(off, b[:])
	return binary.LittleEndian.Uint16(b[:]), err
}

func (r *kernelRegion) Read32(off uint64) (uint32, error) {
	p, err := r.check(off, 4)
	if err != nil {
		return 0, err
	}
	if p != 0 {
		return mmioRead32(p), nil
	}
	var b [4]byte
	err = r.pread(off, b[:])
	return binary.LittleEndian.Uint32(b[:]), err
}

func (r *kernelRegion) Read64(off uint64) (uint64, error) {
	p, err := r.check(off, 8)
	if err != nil {
		return 0, err
	}
	if p != 0 {
		return mmioRead64(p), nil
	}
	var b [8]byte
	err = r.pread(off, b[:])
	return binary.LittleEndian.Uint64(b[:]), err
}

func (r *kernelRegion) Write8(off uint64, v uint8) error {
	p, err := r.check(off, 1)
	if err != nil {
		return err
	}
	if p != 0 {
		mmioWrite8(p, v)
		return nil
	}
	return r.pwrite(off, []byte{v})
}

func (r *kernelRegion) Write16(off uint64, v uint16) error {
	p, err := r.check(off, 2)
	if err != nil {
		return err
	}
	if p != 0 {
		mmioWrite16(p, v)
		return nil
	}
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	return r.pwrite(off, b[:])
}

func (r *kernelRegion) Write32(off uint64, v uint32) error {
	p, err := r.check(off, 4)
	if err != nil {
		return err
	}
	if p != 0 {
		mmioWrite32(p, v)
		return nil
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return r.pwrite(off, b[:])
}

func (r *kernelRegion) Write64(off uint64, v uint64) error {
	p, err := r.check(off, 8)
	if err != nil {
		return err
	}
	if p != 0 {
		mmioWrite64(p, v)
		return nil
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return r.pwrite(off, b[:])
}
