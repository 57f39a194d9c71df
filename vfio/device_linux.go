package vfio

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KernelDevice is a PCI device driven through the kernel's VFIO
// (container/group API, type1v2 IOMMU). It implements Device.
type KernelDevice struct {
	name      string
	fd        int
	group     *Group
	container *Container
	info      DeviceInfo
	pageSizes uint64
	ranges    []IOVARange
	irqCount  [3]int
	irqFlags  [3]uint32

	closed atomic.Bool

	mu      sync.Mutex
	regions map[int]*kernelRegion
	dma     map[uint64]uint64 // iova → size of each live mapping
	irqOn   [3]bool
}

var _ Device = (*KernelDevice)(nil)

// OpenPCI opens the PCI device at addr (e.g. "0000:00:03.0"), which must be
// bound to vfio-pci (Sysfs.Bind), through its IOMMU group and a new
// container with the type1v2 IOMMU: it checks the API version and the
// extension, that the group is viable, joins group and container, sets the
// IOMMU, queries its page sizes and valid IOVA ranges, and gets the device
// fd and its info. Close undoes all of it.
func OpenPCI(addr string) (*KernelDevice, error) {
	return OpenPCIWith(Sysfs{}, addr)
}

// OpenPCIWith is OpenPCI with the IOMMU group looked up under sys.
func OpenPCIWith(sys Sysfs, addr string) (_ *KernelDevice, err error) {
	a, err := ParsePCIAddress(addr)
	if err != nil {
		return nil, err
	}
	gnum, err := sys.IOMMUGroup(a)
	if err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	d := &KernelDevice{name: a, fd: -1, regions: map[int]*kernelRegion{}, dma: map[uint64]uint64{}}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if d.container, err = OpenContainer(); err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	if ok, err := d.container.CheckExtension(Type1v2IOMMU); err != nil || !ok {
		return nil, fmt.Errorf("vfio: open %s: type1v2 IOMMU (%v): %w", a, err, ErrNotSupported)
	}
	if d.group, err = OpenGroup(gnum); err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	viable, _, err := d.group.Status()
	if err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	if !viable {
		return nil, fmt.Errorf("vfio: open %s: group %d is not viable (bind every device of the group to vfio-pci): %w", a, gnum, ErrNotSupported)
	}
	if err := d.group.SetContainer(d.container); err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	if err := d.container.SetIOMMU(Type1v2IOMMU); err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	if d.pageSizes, d.ranges, err = d.container.IOMMUInfo(); err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	if len(d.ranges) == 0 {
		// Kernels before 5.4 do not report ranges: assume everything.
		d.ranges = []IOVARange{{0, ^uint64(0)}}
	}
	if d.fd, err = d.group.DeviceFD(a); err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	di := deviceInfo{Argsz: sizeofDeviceInfo}
	if _, err := ioctl(d.fd, ioctlDeviceGetInfo, unsafe.Pointer(&di)); err != nil {
		return nil, fmt.Errorf("vfio: open %s: VFIO_DEVICE_GET_INFO: %w", a, err)
	}
	if di.Flags&deviceFlagsPCI == 0 {
		return nil, fmt.Errorf("vfio: open %s: not a vfio-pci device (flags %#x): %w", a, di.Flags, ErrNotSupported)
	}
	d.info = DeviceInfo{
		Name:       a,
		NumRegions: int(di.Num_regions),
		NumIRQs:    int(di.Num_irqs),
		CanReset:   di.Flags&deviceFlagsReset != 0,
	}
	for k := range min(3, d.info.NumIRQs) {
		ii := irqInfo{Argsz: sizeofIRQInfo, Index: uint32(k)}
		if _, err := ioctl(d.fd, ioctlDeviceGetIRQInfo, unsafe.Pointer(&ii)); err != nil {
			return nil, fmt.Errorf("vfio: open %s: VFIO_DEVICE_GET_IRQ_INFO %v: %w", a, IRQKind(k), err)
		}
		if ii.Flags&irqInfoEventfd != 0 {
			d.irqCount[k] = int(ii.Count)
		}
		d.irqFlags[k] = ii.Flags
	}
	cfg, err := d.Region(RegionConfig)
	if err != nil {
		return nil, fmt.Errorf("vfio: open %s: %w", a, inner(err))
	}
	if d.info.VendorID, err = cfg.Read16(0); err != nil {
		return nil, fmt.Errorf("vfio: open %s: read vendor ID: %w", a, inner(err))
	}
	if d.info.DeviceID, err = cfg.Read16(2); err != nil {
		return nil, fmt.Errorf("vfio: open %s: read device ID: %w", a, inner(err))
	}
	return d, nil
}

// Info describes the device.
func (d *KernelDevice) Info() DeviceInfo { return d.info }

// IOMMUPageSizes is the bitmap of page sizes the IOMMU supports.
func (d *KernelDevice) IOMMUPageSizes() uint64 { return d.pageSizes }

// IOMMUPageSize is the smallest IOMMU page size: DMA mappings are in
// multiples of it.
func (d *KernelDevice) IOMMUPageSize() uint64 {
	return iommuInfo{PageSizes: d.pageSizes}.MinPageSize()
}

// Group is the device's VFIO group; Container its container.
func (d *KernelDevice) Group() *Group { return d.group }

// Container is the device's VFIO container.
func (d *KernelDevice) Container() *Container { return d.container }

// Fd is the device file descriptor.
func (d *KernelDevice) Fd() int { return d.fd }

// IOVARanges lists the IOVA ranges the IOMMU accepts.
func (d *KernelDevice) IOVARanges() []IOVARange { return append([]IOVARange(nil), d.ranges...) }

// Region opens (and on first use maps) region index.
func (d *KernelDevice) Region(index int) (Region, error) {
	if d.closed.Load() {
		return nil, errDeviceClosed
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.regions[index]; ok {
		return r, nil
	}
	if index < 0 || index >= d.info.NumRegions {
		return nil, fmt.Errorf("vfio: %s region %d: %w", d.name, index, ErrNoRegion)
	}
	desc, err := d.regionInfo(index)
	if err != nil {
		return nil, err
	}
	if desc.Size == 0 {
		return nil, fmt.Errorf("vfio: %s region %d is empty (no such BAR): %w", d.name, index, ErrNoRegion)
	}
	r, err := newKernelRegion(d, desc)
	if err != nil {
		return nil, err
	}
	d.regions[index] = r
	return r, nil
}

func (d *KernelDevice) regionInfo(index int) (regionDesc, error) {
	buf := make([]uint64, (sizeofRegionInfo+7)/8)
	for range 4 {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
		ri := (*regionInfo)(unsafe.Pointer(&buf[0]))
		ri.Argsz = uint32(len(b))
		ri.Index = uint32(index)
		if _, err := ioctl(d.fd, ioctlDeviceGetRegionInfo, unsafe.Pointer(&buf[0])); err != nil {
			if errors.Is(err, unix.EINVAL) {
				return regionDesc{}, fmt.Errorf("vfio: %s region %d: %w", d.name, index, ErrNoRegion)
			}
			return regionDesc{}, fmt.Errorf("vfio: %s region %d: VFIO_DEVICE_GET_REGION_INFO: %w", d.name, index, err)
		}
		if int(ri.Argsz) > len(b) {
			buf = make([]uint64, (int(ri.Argsz)+7)/8)
			continue
		}
		desc, err := parseRegionInfo(b[:max(int(ri.Argsz), sizeofRegionInfo)])
		if err != nil {
			return regionDesc{}, fmt.Errorf("vfio: %s region %d: %w", d.name, index, err)
		}
		return desc, nil
	}
	return regionDesc{}, fmt.Errorf("vfio: %s region %d: answer size keeps growing: %w", d.name, index, ErrBadInfo)
}

// MapDMA maps mem at iova for the device (see Device.MapDMA).
func (d *KernelDevice) MapDMA(iova uint64, mem []byte, access Access) error {
	if d.closed.Load() {
		return errDeviceClosed
	}
	ps := d.IOMMUPageSize()
	n := uint64(len(mem))
	switch {
	case n == 0:
		return fmt.Errorf("vfio: map DMA %#x: empty memory: %w", iova, ErrBadMapping)
	case access&DMAReadWrite == 0 || access&^DMAReadWrite != 0:
		return fmt.Errorf("vfio: map DMA %#x+%#x: access %#x: %w", iova, n, access, ErrBadMapping)
	case iova%ps != 0 || n%ps != 0 || uintptr(unsafe.Pointer(&mem[0]))%uintptr(ps) != 0:
		return fmt.Errorf("vfio: map DMA %#x+%#x: not aligned to the %#x-byte IOMMU page: %w", iova, n, ps, ErrBadMapping)
	case iova+n-1 < iova || !inRanges(d.ranges, iova, n):
		return fmt.Errorf("vfio: map DMA %#x+%#x: outside the IOMMU's valid IOVA ranges %v: %w", iova, n, d.ranges, ErrBadMapping)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for s, sz := range d.dma {
		if iova < s+sz && s < iova+n {
			return fmt.Errorf("vfio: map DMA %#x+%#x: overlaps %#x+%#x: %w", iova, n, s, sz, ErrIOVAInUse)
		}
	}
	if err := d.container.MapDMA(iova, mem, access); err != nil {
		return err
	}
	d.dma[iova] = n
	return nil
}

func inRanges(rs []IOVARange, iova, n uint64) bool {
	for _, r := range rs {
		if iova >= r.Start && iova+n-1 <= r.End {
			return true
		}
	}
	return false
}

// UnmapDMA removes the mapping at iova of exactly size bytes.
func (d *KernelDevice) UnmapDMA(iova, size uint64) error {
	if d.closed.Load() {
		return errDeviceClosed
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.unmapLocked(iova, size)
}

func (d *KernelDevice) unmapLocked(iova, size uint64) error {
	sz, ok := d.dma[iova]
	if !ok || sz != size {
		return fmt.Errorf("vfio: unmap DMA %#x+%#x: %w", iova, size, ErrNotMapped)
	}
	got, err := d.container.UnmapDMA(iova, size)
	if err != nil {
		return err
	}
	delete(d.dma, iova)
	if got != size {
		return fmt.Errorf("vfio: unmap DMA %#x+%#x: the kernel unmapped %#x bytes", iova, size, got)
	}
	return nil
}

// IRQCount reports how many vectors of kind the device offers.
func (d *KernelDevice) IRQCount(kind IRQKind) int {
	if kind < 0 || int(kind) >= len(d.irqCount) {
		return 0
	}
	return d.irqCount[kind]
}

// SetIRQs routes vectors of kind to eventfds, or disables them all when
// eventfds is empty (VFIO_DEVICE_SET_IRQS, DATA_EVENTFD|ACTION_TRIGGER).
// Enabling one kind while another is enabled fails in the kernel (EINVAL):
// disable first.
func (d *KernelDevice) SetIRQs(kind IRQKind, start int, eventfds []int) error {
	if d.closed.Load() {
		return errDeviceClosed
	}
	n := d.IRQCount(kind)
	if n == 0 {
		return fmt.Errorf("vfio: %s: %v: %w", d.name, kind, ErrNoIRQ)
	}
	if len(eventfds) > 0 && (start < 0 || start+len(eventfds) > n) {
		return fmt.Errorf("vfio: %s: %v vectors %d..%d of %d: %w", d.name, kind, start, start+len(eventfds)-1, n, ErrNoIRQ)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.setIRQsLocked(kind, start, eventfds); err != nil {
		return err
	}
	d.irqOn[kind] = len(eventfds) > 0
	return nil
}

func (d *KernelDevice) setIRQsLocked(kind IRQKind, start int, eventfds []int) error {
	buf := irqSetBuffer(kind, start, eventfds)
	if _, err := ioctl(d.fd, ioctlDeviceSetIRQs, unsafe.Pointer(&buf[0])); err != nil {
		return fmt.Errorf("vfio: %s: VFIO_DEVICE_SET_IRQS %v start %d count %d: %w", d.name, kind, start, len(eventfds), err)
	}
	return nil
}

// irqSetBuffer builds the VFIO_DEVICE_SET_IRQS argument: struct
// vfio_irq_set followed by one s32 eventfd per vector (DATA_EVENTFD |
// ACTION_TRIGGER), or, for no eventfds, DATA_NONE|ACTION_TRIGGER with count
// 0, which disables every vector of the kind. 8-byte aligned backing.
func irqSetBuffer(kind IRQKind, start int, eventfds []int) []uint64 {
	buf := make([]uint64, (sizeofIRQSet+4*len(eventfds)+7)/8)
	set := (*irqSet)(unsafe.Pointer(&buf[0]))
	set.Argsz = uint32(sizeofIRQSet + 4*len(eventfds))
	set.Index = uint32(kind)
	if len(eventfds) == 0 {
		set.Flags = irqSetDataNone | irqSetActionTrigger
		return buf
	}
	set.Flags = irqSetDataEventfd | irqSetActionTrigger
	set.Start = uint32(start)
	set.Count = uint32(len(eventfds))
	fds := unsafe.Slice((*int32)(unsafe.Add(unsafe.Pointer(&buf[0]), sizeofIRQSet)), len(eventfds))
	for i, fd := range eventfds {
		fds[i] = int32(fd)
	}
	return buf
}

// UnmaskIRQ unmasks vector index of kind (INTx is masked by the kernel on
// each interrupt until the driver has silenced the device and unmasks).
func (d *KernelDevice) UnmaskIRQ(kind IRQKind, index int) error {
	if d.closed.Load() {
		return errDeviceClosed
	}
	if index < 0 || index >= d.IRQCount(kind) {
		return fmt.Errorf("vfio: %s: unmask %v %d: %w", d.name, kind, index, ErrNoIRQ)
	}
	set := irqSet{
		Argsz: sizeofIRQSet,
		Flags: irqSetDataNone | irqSetActionUnmask,
		Index: uint32(kind),
		Start: uint32(index),
		Count: 1,
	}
	if _, err := ioctl(d.fd, ioctlDeviceSetIRQs, unsafe.Pointer(&set)); err != nil {
		return fmt.Errorf("vfio: %s: unmask %v %d: %w", d.name, kind, index, err)
	}
	return nil
}

// Reset resets the device (VFIO_DEVICE_RESET).
func (d *KernelDevice) Reset() error {
	if d.closed.Load() {
		return errDeviceClosed
	}
	if !d.info.CanReset {
		return fmt.Errorf("vfio: %s: reset: %w", d.name, ErrNotSupported)
	}
	if _, err := ioctl(d.fd, ioctlDeviceReset, nil); err != nil {
		return fmt.Errorf("vfio: %s: VFIO_DEVICE_RESET: %w", d.name, err)
	}
	return nil
}

// DMAMappings lists the live DMA mappings (for tests and leak checks).
func (d *KernelDevice) DMAMappings() []IOVARange {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]IOVARange, 0, len(d.dma))
	for s, n := range d.dma {
		out = append(out, IOVARange{s, s + n - 1})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// Close disables interrupts, removes the DMA mappings, unmaps the regions,
// closes the device, takes the group out of the container and closes both.
// It returns every error (joined) but always does every step. Idempotent.
// Register accesses after Close return ErrClosed; an access racing with
// Close may touch an unmapped BAR, so the caller stops its users first.
func (d *KernelDevice) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	if d.fd >= 0 {
		for k, on := range d.irqOn {
			if on {
				errs = append(errs, d.setIRQsLocked(IRQKind(k), 0, nil))
				d.irqOn[k] = false
			}
		}
	}
	for s, n := range d.dma {
		errs = append(errs, d.unmapLocked(s, n))
	}
	for i, r := range d.regions {
		errs = append(errs, r.unmap())
		delete(d.regions, i)
	}
	if d.fd >= 0 {
		errs = append(errs, unix.Close(d.fd))
		d.fd = -1
	}
	if d.group != nil {
		if _, set, err := d.group.Status(); err == nil && set {
			errs = append(errs, d.group.UnsetContainer())
		}
		errs = append(errs, d.group.Close())
	}
	if d.container != nil {
		errs = append(errs, d.container.Close())
	}
	return errors.Join(errs...)
}
