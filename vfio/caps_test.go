package vfio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// put appends the binary form of each value (native order).
func put(vals ...any) []byte {
	var b bytes.Buffer
	for _, v := range vals {
		if err := binary.Write(&b, binary.NativeEndian, v); err != nil {
			panic(err)
		}
	}
	return b.Bytes()
}

// iommuAnswer builds a VFIO_IOMMU_GET_INFO answer as the kernel writes it:
// the fixed struct, then capabilities (an unrelated one first when withOther).
func iommuAnswer(pgsizes uint64, ranges []iovaRange, withOther bool) []byte {
	capOff := uint32(sizeofIOMMUType1Info)
	var caps []byte
	if withOther {
		// DMA-available capability (id 3): header + u32, padded to 8.
		caps = append(caps, put(infoCapHeader{Id: 3, Version: 1, Next: capOff + 16}, uint32(65535), uint32(0))...)
	}
	caps = append(caps, put(iommuCapIOVARangeHdr{Header: infoCapHeader{Id: iommuInfoCapIOVARange, Version: 1}, Iovas: uint32(len(ranges))})...)
	for _, r := range ranges {
		caps = append(caps, put(r)...)
	}
	info := iommuType1Info{Argsz: uint32(sizeofIOMMUType1Info + len(caps)), Flags: iommuInfoPgsizes | iommuInfoCaps, Iova_pgsizes: pgsizes, Cap_offset: capOff}
	return append(put(info), caps...)
}

func TestParseIOMMUInfo(t *testing.T) {
	vtd := []iovaRange{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}
	got, err := parseIOMMUInfo(iommuAnswer(0x40201000, vtd, true))
	if err != nil {
		t.Fatal(err)
	}
	if got.PageSizes != 0x40201000 || got.MinPageSize() != 4096 {
		t.Errorf("page sizes %#x (min %#x)", got.PageSizes, got.MinPageSize())
	}
	if len(got.Ranges) != 2 || got.Ranges[0] != (IOVARange{0, 0xfedfffff}) || got.Ranges[1] != (IOVARange{0xfef00000, 0x7fffffffff}) {
		t.Errorf("ranges %#x", got.Ranges)
	}
	// A pre-5.4 kernel: 16 bytes, no caps.
	old := put(uint32(16), uint32(iommuInfoPgsizes), uint64(0x1000))
	if got, err := parseIOMMUInfo(old); err != nil || got.PageSizes != 0x1000 || got.Ranges != nil {
		t.Errorf("old kernel answer: %+v, %v", got, err)
	}
	if (iommuInfo{}).MinPageSize() != 4096 {
		t.Errorf("unknown page size must default to 4096")
	}

	bad := map[string][]byte{
		"short": {1, 2, 3},
	}
	// Chain pointing outside the buffer.
	b := iommuAnswer(0x1000, vtd, false)
	binary.NativeEndian.PutUint32(b[16:], 4000)
	bad["cap offset outside"] = b
	// Chain looping back.
	b = iommuAnswer(0x1000, vtd, true)
	binary.NativeEndian.PutUint32(b[sizeofIOMMUType1Info+4:], sizeofIOMMUType1Info)
	bad["loop"] = b
	// More ranges claimed than present.
	b = iommuAnswer(0x1000, vtd, false)
	binary.NativeEndian.PutUint32(b[sizeofIOMMUType1Info+8:], 1000)
	bad["range count too large"] = b
	// Inverted range.
	bad["inverted range"] = iommuAnswer(0x1000, []iovaRange{{0x2000, 0x1000}}, false)
	// Misaligned capability offset.
	b = iommuAnswer(0x1000, vtd, false)
	binary.NativeEndian.PutUint32(b[16:], sizeofIOMMUType1Info+2)
	bad["misaligned"] = b
	for name, buf := range bad {
		if _, err := parseIOMMUInfo(buf); !errors.Is(err, ErrBadInfo) {
			t.Errorf("%s: err %v, want ErrBadInfo", name, err)
		}
	}
}

func regionAnswer(size uint64, areas []regionSparseMmapArea) []byte {
	ri := regionInfo{Index: 0, Flags: regionInfoFlagRead | regionInfoFlagWrite | regionInfoFlagMmap, Size: size, Offset: 0x10000000000}
	var caps []byte
	if areas != nil {
		ri.Flags |= regionInfoFlagCaps
		ri.Cap_offset = sizeofRegionInfo
		caps = put(regionInfoCapSparseHdr{Header: infoCapHeader{Id: regionInfoCapSparse, Version: 1}, Areas: uint32(len(areas))})
		for _, a := range areas {
			caps = append(caps, put(a)...)
		}
	}
	ri.Argsz = uint32(sizeofRegionInfo + len(caps))
	return append(put(ri), caps...)
}

func TestParseRegionInfo(t *testing.T) {
	got, err := parseRegionInfo(regionAnswer(1<<20, nil))
	if err != nil || got.Size != 1<<20 || got.Offset != 0x10000000000 || got.Sparse != nil || got.Flags&regionInfoFlagMmap == 0 {
		t.Fatalf("plain region: %+v, %v", got, err)
	}
	// An MSI-X table carved out of a BAR: two mmap-able parts around it.
	areas := []regionSparseMmapArea{{0, 0x2000}, {0x3000, 1<<20 - 0x3000}}
	got, err = parseRegionInfo(regionAnswer(1<<20, areas))
	if err != nil || len(got.Sparse) != 2 || got.Sparse[1] != (sparseArea{0x3000, 1<<20 - 0x3000}) {
		t.Fatalf("sparse region: %+v, %v", got, err)
	}
	for name, a := range map[string][]regionSparseMmapArea{
		"area past the end": {{0, 2 << 20}},
		"empty area":        {{0x1000, 0}},
		"offset past end":   {{2 << 20, 0x1000}},
	} {
		if _, err := parseRegionInfo(regionAnswer(1<<20, a)); !errors.Is(err, ErrBadInfo) {
			t.Errorf("%s: %v, want ErrBadInfo", name, err)
		}
	}
	b := regionAnswer(1<<20, areas)
	if _, err := parseRegionInfo(b[:len(b)-8]); !errors.Is(err, ErrBadInfo) {
		t.Errorf("truncated: %v, want ErrBadInfo", err)
	}
	if _, err := parseRegionInfo(b[:10]); !errors.Is(err, ErrBadInfo) {
		t.Errorf("short: %v, want ErrBadInfo", err)
	}
}

// FuzzParseIOMMUInfo: any answer parses or errors, never panics; parsed
// ranges are never inverted.
func FuzzParseIOMMUInfo(f *testing.F) {
	f.Add(iommuAnswer(0x40201000, []iovaRange{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}, true))
	f.Add(iommuAnswer(0x1000, nil, false))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseIOMMUInfo(b)
		if err != nil {
			return
		}
		for _, r := range info.Ranges {
			if r.End < r.Start {
				t.Fatalf("inverted range %#x", r)
			}
		}
		if ps := info.MinPageSize(); ps&(ps-1) != 0 {
			t.Fatalf("min page size %#x is not a power of two", ps)
		}
	})
}

// FuzzParseRegionInfo: any answer parses or errors; sparse areas always lie
// inside the region.
func FuzzParseRegionInfo(f *testing.F) {
	f.Add(regionAnswer(1<<20, []regionSparseMmapArea{{0, 0x2000}, {0x3000, 1<<20 - 0x3000}}))
	f.Add(regionAnswer(4096, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseRegionInfo(b)
		if err != nil {
			return
		}
		for _, a := range d.Sparse {
			if a.Size == 0 || a.Offset > d.Size || a.Size > d.Size-a.Offset {
				t.Fatalf("area %#x+%#x outside %#x-byte region", a.Offset, a.Size, d.Size)
			}
		}
	})
}
