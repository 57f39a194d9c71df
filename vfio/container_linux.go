package vfio

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ContainerPath is the VFIO container node.
const ContainerPath = "/dev/vfio/vfio"

// IOMMU types for Container.SetIOMMU and extensions for CheckExtension
// (linux/vfio.h).
const (
	Type1IOMMU   = type1IOMMU
	Type1v2IOMMU = type1v2IOMMU
	NoIOMMU      = noIOMMU
)

// ioctl issues an ioctl whose argument is a pointer (or nil).
func ioctl(fd int, req uintptr, arg unsafe.Pointer) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

// ioctlVal issues an ioctl whose argument is a plain integer.
func ioctlVal(fd int, req, arg uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

// Container is a VFIO container (/dev/vfio/vfio): an IOMMU context that one
// or more groups join and that holds the DMA mappings.
type Container struct {
	fd int

	mu     sync.Mutex
	closed bool
}

// OpenContainer opens a container and checks the API version.
func OpenContainer() (*Container, error) {
	fd, err := unix.Open(ContainerPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("vfio: open %s: %w", ContainerPath, ErrNoVFIO)
		}
		return nil, fmt.Errorf("vfio: open %s: %w", ContainerPath, err)
	}
	c := &Container{fd: fd}
	v, err := ioctlVal(fd, ioctlGetAPIVersion, 0)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("vfio: VFIO_GET_API_VERSION: %w", err)
	}
	if v != apiVersion {
		c.Close()
		return nil, fmt.Errorf("vfio: VFIO API version %d, want %d: %w", v, apiVersion, ErrNotSupported)
	}
	return c, nil
}

// Fd is the container's file descriptor.
func (c *Container) Fd() int { return c.fd }

// CheckExtension reports whether the kernel supports ext (an IOMMU type such
// as Type1v2IOMMU, or another VFIO extension number).
func (c *Container) CheckExtension(ext int) (bool, error) {
	r, err := ioctlVal(c.fd, ioctlCheckExtension, uintptr(ext))
	if err != nil {
		return false, fmt.Errorf("vfio: VFIO_CHECK_EXTENSION %d: %w", ext, err)
	}
	return r > 0, nil
}

// SetIOMMU selects the IOMMU model; a group must already be in the container.
func (c *Container) SetIOMMU(typ int) error {
	if ok, err := c.CheckExtension(typ); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("vfio: IOMMU type %d: %w", typ, ErrNotSupported)
	}
	if _, err := ioctlVal(c.fd, ioctlSetIOMMU, uintptr(typ)); err != nil {
		return fmt.Errorf("vfio: VFIO_SET_IOMMU %d: %w", typ, err)
	}
	return nil
}

// IOMMUInfo queries page sizes and valid IOVA ranges (VFIO_IOMMU_GET_INFO).
func (c *Container) IOMMUInfo() (pageSizes uint64, ranges []IOVARange, err error) {
	buf := make([]uint64, (sizeofIOMMUType1Info+7)/8)
	for range 4 {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
		hdr := (*iommuType1Info)(unsafe.Pointer(&buf[0]))
		hdr.Argsz = uint32(len(b))
		if _, err := ioctl(c.fd, ioctlIOMMUGetInfo, unsafe.Pointer(&buf[0])); err != nil {
			return 0, nil, fmt.Errorf("vfio: VFIO_IOMMU_GET_INFO: %w", err)
		}
		if int(hdr.Argsz) > len(b) {
			// The capabilities did not fit: retry with the size asked.
			buf = make([]uint64, (int(hdr.Argsz)+7)/8)
			continue
		}
		info, err := parseIOMMUInfo(b[:max(int(hdr.Argsz), 16)])
		if err != nil {
			return 0, nil, fmt.Errorf("vfio: VFIO_IOMMU_GET_INFO: %w", err)
		}
		return info.PageSizes, info.Ranges, nil
	}
	return 0, nil, fmt.Errorf("vfio: VFIO_IOMMU_GET_INFO: answer size keeps growing: %w", ErrBadInfo)
}

// MapDMA maps mem at iova (VFIO_IOMMU_MAP_DMA). The kernel pins mem.
func (c *Container) MapDMA(iova uint64, mem []byte, access Access) error {
	if len(mem) == 0 {
		return fmt.Errorf("vfio: map DMA %#x: empty memory: %w", iova, ErrBadMapping)
	}
	m := dmaMap{
		Argsz: sizeofDMAMap,
		Vaddr: uint64(uintptr(unsafe.Pointer(&mem[0]))),
		Iova:  iova,
		Size:  uint64(len(mem)),
	}
	if access&DMARead != 0 {
		m.Flags |= dmaMapFlagRead
	}
	if access&DMAWrite != 0 {
		m.Flags |= dmaMapFlagWrite
	}
	if _, err := ioctl(c.fd, ioctlIOMMUMapDMA, unsafe.Pointer(&m)); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("vfio: map DMA %#x+%#x: %w", iova, len(mem), ErrIOVAInUse)
		}
		return fmt.Errorf("vfio: map DMA %#x+%#x: VFIO_IOMMU_MAP_DMA: %w", iova, len(mem), err)
	}
	return nil
}

// UnmapDMA unmaps [iova, iova+size) and returns how many bytes the kernel
// unmapped (0 when nothing was mapped there).
func (c *Container) UnmapDMA(iova, size uint64) (uint64, error) {
	u := dmaUnmap{Argsz: sizeofDMAUnmap, Iova: iova, Size: size}
	if _, err := ioctl(c.fd, ioctlIOMMUUnmapDMA, unsafe.Pointer(&u)); err != nil {
		return 0, fmt.Errorf("vfio: unmap DMA %#x+%#x: VFIO_IOMMU_UNMAP_DMA: %w", iova, size, err)
	}
	return u.Size, nil
}

// Close closes the container. Idempotent.
func (c *Container) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return unix.Close(c.fd)
}

// Group is a VFIO group (/dev/vfio/N): the unit of isolation the IOMMU can
// tell apart; all its devices must be bound to vfio-pci (or no driver) for
// it to be viable.
type Group struct {
	fd  int
	num int

	mu     sync.Mutex
	closed bool
}

// GroupPath is the node of group n.
func GroupPath(n int) string { return "/dev/vfio/" + strconv.Itoa(n) }

// OpenGroup opens group n.
func OpenGroup(n int) (*Group, error) {
	fd, err := unix.Open(GroupPath(n), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			if _, serr := os.Stat(ContainerPath); serr != nil {
				return nil, fmt.Errorf("vfio: open %s: %w", GroupPath(n), ErrNoVFIO)
			}
			return nil, fmt.Errorf("vfio: open %s: no such group (is the device bound to vfio-pci?): %w", GroupPath(n), err)
		}
		return nil, fmt.Errorf("vfio: open %s: %w", GroupPath(n), err)
	}
	return &Group{fd: fd, num: n}, nil
}

// Number is the group number.
func (g *Group) Number() int { return g.num }

// Status reports whether the group is viable (all its devices are bound to
// VFIO-compatible drivers) and whether it is in a container.
func (g *Group) Status() (viable, containerSet bool, err error) {
	st := groupStatus{Argsz: sizeofGroupStatus}
	if _, err := ioctl(g.fd, ioctlGroupGetStatus, unsafe.Pointer(&st)); err != nil {
		return false, false, fmt.Errorf("vfio: VFIO_GROUP_GET_STATUS of group %d: %w", g.num, err)
	}
	return st.Flags&groupFlagsViable != 0, st.Flags&groupFlagsContainerSet != 0, nil
}

// SetContainer puts the group into c.
func (g *Group) SetContainer(c *Container) error {
	fd := int32(c.fd)
	if _, err := ioctl(g.fd, ioctlGroupSetContainer, unsafe.Pointer(&fd)); err != nil {
		return fmt.Errorf("vfio: VFIO_GROUP_SET_CONTAINER of group %d: %w", g.num, err)
	}
	return nil
}

// UnsetContainer takes the group out of its container.
func (g *Group) UnsetContainer() error {
	if _, err := ioctl(g.fd, ioctlGroupUnsetContainer, nil); err != nil {
		return fmt.Errorf("vfio: VFIO_GROUP_UNSET_CONTAINER of group %d: %w", g.num, err)
	}
	return nil
}

// DeviceFD returns a new file descriptor for the device named name (its PCI
// address) in the group; the group must be in a container with an IOMMU set.
func (g *Group) DeviceFD(name string) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, fmt.Errorf("vfio: device %q: %w", name, ErrBadAddress)
	}
	fd, err := ioctl(g.fd, ioctlGroupGetDeviceFD, unsafe.Pointer(p))
	if err != nil {
		return -1, fmt.Errorf("vfio: VFIO_GROUP_GET_DEVICE_FD %s in group %d: %w", name, g.num, err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// Close closes the group. Idempotent.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return unix.Close(g.fd)
}
