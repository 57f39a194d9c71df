package vfio

import (
	"encoding/binary"
	"fmt"
)

// The INFO ioctls (VFIO_DEVICE_GET_REGION_INFO, VFIO_IOMMU_GET_INFO) answer
// with a fixed struct followed by a chain of capabilities, each starting
// with a vfio_info_cap_header {id, version, next}; offsets are from the
// start of the buffer and 0 ends the chain. The parsers decode the generated
// structs with encoding/binary (native order) from a byte buffer, so a
// malformed answer becomes an error, never an out-of-bounds read.

// walkCaps calls fn for each capability of the chain that starts at first.
func walkCaps(buf []byte, first uint32, fn func(id, version uint16, off int) error) error {
	seen := 0
	for off := first; off != 0; {
		if seen++; seen > 64 {
			return fmt.Errorf("%w: capability chain longer than 64 entries (a loop?)", ErrBadInfo)
		}
		if off%4 != 0 || uint64(off)+sizeofInfoCapHeader > uint64(len(buf)) {
			return fmt.Errorf("%w: capability at offset %d outside the %d-byte answer or misaligned", ErrBadInfo, off, len(buf))
		}
		var h infoCapHeader
		if _, err := binary.Decode(buf[off:], binary.NativeEndian, &h); err != nil {
			return fmt.Errorf("%w: capability header at %d: %v", ErrBadInfo, off, err)
		}
		if err := fn(h.Id, h.Version, int(off)); err != nil {
			return err
		}
		if h.Next != 0 && h.Next <= off {
			return fmt.Errorf("%w: capability at %d points back to %d", ErrBadInfo, off, h.Next)
		}
		off = h.Next
	}
	return nil
}

// iommuInfo is what VFIO_IOMMU_GET_INFO tells.
type iommuInfo struct {
	PageSizes uint64 // bitmap of supported IOMMU page sizes (0 if not reported)
	Ranges    []IOVARange
}

// MinPageSize is the smallest supported IOMMU page size (4096 if unknown).
func (i iommuInfo) MinPageSize() uint64 {
	if i.PageSizes == 0 {
		return 4096
	}
	return i.PageSizes & -i.PageSizes
}

// parseIOMMUInfo decodes a VFIO_IOMMU_GET_INFO answer (struct
// vfio_iommu_type1_info and its capabilities; the IOVA range capability is
// the one used). A kernel that reports no IOVA ranges (before 5.4) leaves
// Ranges empty; the caller then assumes the whole space.
func parseIOMMUInfo(buf []byte) (iommuInfo, error) {
	var info iommuType1Info
	var out iommuInfo
	// Kernels before 5.4 answer with the struct without cap_offset.
	fixed := make([]byte, sizeofIOMMUType1Info)
	copy(fixed, buf)
	if len(buf) < 16 {
		return out, fmt.Errorf("%w: IOMMU info of %d bytes", ErrBadInfo, len(buf))
	}
	if _, err := binary.Decode(fixed, binary.NativeEndian, &info); err != nil {
		return out, fmt.Errorf("%w: IOMMU info: %v", ErrBadInfo, err)
	}
	if info.Flags&iommuInfoPgsizes != 0 {
		out.PageSizes = info.Iova_pgsizes
	}
	if info.Flags&iommuInfoCaps == 0 || len(buf) < sizeofIOMMUType1Info {
		return out, nil
	}
	err := walkCaps(buf, info.Cap_offset, func(id, _ uint16, off int) error {
		if id != iommuInfoCapIOVARange {
			return nil
		}
		var h iommuCapIOVARangeHdr
		if off+sizeofIOMMUCapIOVARangeHdr > len(buf) {
			return fmt.Errorf("%w: IOVA range capability truncated", ErrBadInfo)
		}
		if _, err := binary.Decode(buf[off:], binary.NativeEndian, &h); err != nil {
			return fmt.Errorf("%w: IOVA range capability: %v", ErrBadInfo, err)
		}
		p := off + sizeofIOMMUCapIOVARangeHdr
		if uint64(h.Iovas)*sizeofIOVARange > uint64(len(buf)-p) {
			return fmt.Errorf("%w: %d IOVA ranges do not fit in the answer", ErrBadInfo, h.Iovas)
		}
		for i := 0; i < int(h.Iovas); i++ {
			var r iovaRange
			if _, err := binary.Decode(buf[p:], binary.NativeEndian, &r); err != nil {
				return fmt.Errorf("%w: IOVA range %d: %v", ErrBadInfo, i, err)
			}
			if r.End < r.Start {
				return fmt.Errorf("%w: IOVA range %#x-%#x is inverted", ErrBadInfo, r.Start, r.End)
			}
			out.Ranges = append(out.Ranges, IOVARange(r))
			p += sizeofIOVARange
		}
		return nil
	})
	return out, err
}

// sparseArea is one mmap-able part of a region (offset within the region).
type sparseArea struct {
	Offset, Size uint64
}

// regionDesc is what VFIO_DEVICE_GET_REGION_INFO tells.
type regionDesc struct {
	Index  int
	Flags  uint32
	Size   uint64
	Offset uint64 // of the region within the device fd
	// Sparse is the sparse mmap capability's list when present (only those
	// parts may be mmap'd); nil when absent (the whole region may be, if
	// Flags has MMAP).
	Sparse []sparseArea
}

// parseRegionInfo decodes a VFIO_DEVICE_GET_REGION_INFO answer.
func parseRegionInfo(buf []byte) (regionDesc, error) {
	var ri regionInfo
	var out regionDesc
	if len(buf) < sizeofRegionInfo {
		return out, fmt.Errorf("%w: region info of %d bytes", ErrBadInfo, len(buf))
	}
	if _, err := binary.Decode(buf, binary.NativeEndian, &ri); err != nil {
		return out, fmt.Errorf("%w: region info: %v", ErrBadInfo, err)
	}
	out = regionDesc{Index: int(ri.Index), Flags: ri.Flags, Size: ri.Size, Offset: ri.Offset}
	if ri.Flags&regionInfoFlagCaps == 0 {
		return out, nil
	}
	err := walkCaps(buf, ri.Cap_offset, func(id, _ uint16, off int) error {
		if id != regionInfoCapSparse {
			return nil
		}
		var h regionInfoCapSparseHdr
		if off+sizeofRegionInfoCapSparseHdr > len(buf) {
			return fmt.Errorf("%w: sparse mmap capability truncated", ErrBadInfo)
		}
		if _, err := binary.Decode(buf[off:], binary.NativeEndian, &h); err != nil {
			return fmt.Errorf("%w: sparse mmap capability: %v", ErrBadInfo, err)
		}
		p := off + sizeofRegionInfoCapSparseHdr
		if uint64(h.Areas)*sizeofRegionSparseMmapArea > uint64(len(buf)-p) {
			return fmt.Errorf("%w: %d sparse mmap areas do not fit in the answer", ErrBadInfo, h.Areas)
		}
		out.Sparse = make([]sparseArea, 0, h.Areas)
		for i := 0; i < int(h.Areas); i++ {
			var a regionSparseMmapArea
			if _, err := binary.Decode(buf[p:], binary.NativeEndian, &a); err != nil {
				return fmt.Errorf("%w: sparse area %d: %v", ErrBadInfo, i, err)
			}
			if a.Size == 0 || a.Offset > ri.Size || a.Size > ri.Size-a.Offset {
				return fmt.Errorf("%w: sparse area %#x+%#x outside the %#x-byte region", ErrBadInfo, a.Offset, a.Size, ri.Size)
			}
			out.Sparse = append(out.Sparse, sparseArea(a))
			p += sizeofRegionSparseMmapArea
		}
		return nil
	})
	return out, err
}
