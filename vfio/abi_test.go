package vfio

import (
	"bytes"
	"encoding/binary"
	"go/format"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// ioc is the kernel's _IO(type, nr) for the asm-generic encoding (x86,
// arm64, riscv): no direction, no size.
func ioc(typ byte, nr uintptr) uintptr { return uintptr(typ)<<8 | nr }

// TestIoctlNumbers checks the generated ioctl numbers against the encoding
// linux/vfio.h documents: _IO(VFIO_TYPE=';', VFIO_BASE=100 + n).
func TestIoctlNumbers(t *testing.T) {
	const vfioType, vfioBase = ';', 100
	tests := []struct {
		name string
		got  uintptr
		n    uintptr
		raw  uintptr // the value as printed by the C headers
	}{
		{"VFIO_GET_API_VERSION", ioctlGetAPIVersion, 0, 0x3b64},
		{"VFIO_CHECK_EXTENSION", ioctlCheckExtension, 1, 0x3b65},
		{"VFIO_SET_IOMMU", ioctlSetIOMMU, 2, 0x3b66},
		{"VFIO_GROUP_GET_STATUS", ioctlGroupGetStatus, 3, 0x3b67},
		{"VFIO_GROUP_SET_CONTAINER", ioctlGroupSetContainer, 4, 0x3b68},
		{"VFIO_GROUP_UNSET_CONTAINER", ioctlGroupUnsetContainer, 5, 0x3b69},
		{"VFIO_GROUP_GET_DEVICE_FD", ioctlGroupGetDeviceFD, 6, 0x3b6a},
		{"VFIO_DEVICE_GET_INFO", ioctlDeviceGetInfo, 7, 0x3b6b},
		{"VFIO_DEVICE_GET_REGION_INFO", ioctlDeviceGetRegionInfo, 8, 0x3b6c},
		{"VFIO_DEVICE_GET_IRQ_INFO", ioctlDeviceGetIRQInfo, 9, 0x3b6d},
		{"VFIO_DEVICE_SET_IRQS", ioctlDeviceSetIRQs, 10, 0x3b6e},
		{"VFIO_DEVICE_RESET", ioctlDeviceReset, 11, 0x3b6f},
		{"VFIO_IOMMU_GET_INFO", ioctlIOMMUGetInfo, 12, 0x3b70},
		{"VFIO_IOMMU_MAP_DMA", ioctlIOMMUMapDMA, 13, 0x3b71},
		{"VFIO_IOMMU_UNMAP_DMA", ioctlIOMMUUnmapDMA, 14, 0x3b72},
	}
	for _, tc := range tests {
		if want := ioc(vfioType, vfioBase+tc.n); tc.got != want || tc.got != tc.raw {
			t.Errorf("%s = %#x, want _IO(';', 100+%d) = %#x (%#x)", tc.name, tc.got, tc.n, want, tc.raw)
		}
	}
	if apiVersion != 0 || type1v2IOMMU != 3 || type1IOMMU != 1 {
		t.Errorf("API version %d, type1 %d, type1v2 %d; want 0, 1, 3", apiVersion, type1IOMMU, type1v2IOMMU)
	}
	if pciConfigRegionIndex != RegionConfig || pciROMRegionIndex != RegionROM || pciBAR0RegionIndex != RegionBAR0 {
		t.Errorf("region indices differ from device.go's")
	}
	if pciINTxIRQIndex != int(IRQINTx) || pciMSIIRQIndex != int(IRQMSI) || pciMSIXIRQIndex != int(IRQMSIX) {
		t.Errorf("IRQ indices differ from device.go's")
	}
}

// TestStructLayouts checks the generated structs against the kernel ABI's
// sizes and against encoding/binary's view (used by the parsers).
func TestStructLayouts(t *testing.T) {
	tests := []struct {
		name        string
		goSize      uintptr
		binarySize  int
		cSize, want int
	}{
		{"vfio_info_cap_header", unsafe.Sizeof(infoCapHeader{}), binary.Size(infoCapHeader{}), sizeofInfoCapHeader, 8},
		{"vfio_group_status", unsafe.Sizeof(groupStatus{}), binary.Size(groupStatus{}), sizeofGroupStatus, 8},
		{"vfio_device_info", unsafe.Sizeof(deviceInfo{}), binary.Size(deviceInfo{}), sizeofDeviceInfo, 20},
		{"vfio_region_info", unsafe.Sizeof(regionInfo{}), binary.Size(regionInfo{}), sizeofRegionInfo, 32},
		{"vfio_region_sparse_mmap_area", unsafe.Sizeof(regionSparseMmapArea{}), binary.Size(regionSparseMmapArea{}), sizeofRegionSparseMmapArea, 16},
		{"vfio_region_info_cap_sparse_mmap", unsafe.Sizeof(regionInfoCapSparseHdr{}), binary.Size(regionInfoCapSparseHdr{}), sizeofRegionInfoCapSparseHdr, 16},
		{"vfio_irq_info", unsafe.Sizeof(irqInfo{}), binary.Size(irqInfo{}), sizeofIRQInfo, 16},
		{"vfio_irq_set", unsafe.Sizeof(irqSet{}), binary.Size(irqSet{}), sizeofIRQSet, 20},
		{"vfio_iommu_type1_info", unsafe.Sizeof(iommuType1Info{}), binary.Size(iommuType1Info{}), sizeofIOMMUType1Info, 24},
		{"vfio_iova_range", unsafe.Sizeof(iovaRange{}), binary.Size(iovaRange{}), sizeofIOVARange, 16},
		{"vfio_iommu_type1_info_cap_iova_range", unsafe.Sizeof(iommuCapIOVARangeHdr{}), binary.Size(iommuCapIOVARangeHdr{}), sizeofIOMMUCapIOVARangeHdr, 16},
		{"vfio_iommu_type1_dma_map", unsafe.Sizeof(dmaMap{}), binary.Size(dmaMap{}), sizeofDMAMap, 32},
		{"vfio_iommu_type1_dma_unmap", unsafe.Sizeof(dmaUnmap{}), binary.Size(dmaUnmap{}), sizeofDMAUnmap, 24},
	}
	for _, tc := range tests {
		if int(tc.goSize) != tc.want || tc.binarySize != tc.want || tc.cSize != tc.want {
			t.Errorf("%s: Go %d, encoding/binary %d, C %d bytes; kernel ABI %d", tc.name, tc.goSize, tc.binarySize, tc.cSize, tc.want)
		}
	}
	// Field offsets the ioctls depend on.
	var ri regionInfo
	var m dmaMap
	var s irqSet
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"region_info.size", unsafe.Offsetof(ri.Size), 16},
		{"region_info.offset", unsafe.Offsetof(ri.Offset), 24},
		{"dma_map.vaddr", unsafe.Offsetof(m.Vaddr), 8},
		{"dma_map.iova", unsafe.Offsetof(m.Iova), 16},
		{"dma_map.size", unsafe.Offsetof(m.Size), 24},
		{"irq_set.count", unsafe.Offsetof(s.Count), 16},
	} {
		if f.got != f.want {
			t.Errorf("offset of %s = %d, want %d", f.name, f.got, f.want)
		}
	}
}

// TestGeneratedUpToDate regenerates the ABI file from linux/vfio.h (as
// make generate does) and compares it with the committed one, so a change
// to types_linux.go that was not regenerated fails. It needs gcc and the
// kernel headers (a build tool, not a privilege: it skips without them).
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips running cgo")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed: cannot run cgo -godefs")
	}
	if _, err := os.Stat("/usr/include/linux/vfio.h"); err != nil {
		t.Skip("linux/vfio.h not installed (linux-libc-dev)")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the committed file is for amd64")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "tool", "cgo", "-objdir", dir, "-godefs", "types_linux.go")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cgo -godefs: %v", err)
	}
	// internal/cmd/godefs's header rewrite and gofmt.
	lines := strings.SplitN(string(out), "\n", 3)
	if len(lines) < 3 {
		t.Fatalf("cgo -godefs printed %q", out)
	}
	lines[1] = "// cgo -godefs types_linux.go (internal/cmd/godefs)"
	got, err := format.Source([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("zvfio_linux_amd64.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("zvfio_linux_amd64.go is stale: run make generate")
	}
}

// TestIRQSetBuffer checks the SET_IRQS argument byte for byte: MSI-X with
// three vectors from 2, and the disable form.
func TestIRQSetBuffer(t *testing.T) {
	le := binary.LittleEndian
	buf := irqSetBuffer(IRQMSIX, 2, []int{7, 8, 9})
	b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	want := []uint32{20 + 12, irqSetDataEventfd | irqSetActionTrigger, 2 /* MSI-X index */, 2, 3, 7, 8, 9}
	for i, w := range want {
		if got := le.Uint32(b[4*i:]); got != w {
			t.Errorf("MSI-X set: word %d = %#x, want %#x", i, got, w)
		}
	}
	buf = irqSetBuffer(IRQMSI, 0, nil)
	b = unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	want = []uint32{20, irqSetDataNone | irqSetActionTrigger, 1, 0, 0}
	for i, w := range want {
		if got := le.Uint32(b[4*i:]); got != w {
			t.Errorf("disable: word %d = %#x, want %#x", i, got, w)
		}
	}
}
