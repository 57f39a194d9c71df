package vfio

import (
	"errors"
	"testing"
)

// The IOVA ranges QEMU's intel-iommu reports to VFIO (seen in the VM
// guest): everything below the x86 MSI window and above it, up to 39 bits.
var vtdRanges = []IOVARange{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}

func TestIOVAAllocatorRanges(t *testing.T) {
	tests := []struct {
		name     string
		ranges   []IOVARange
		mask, ps uint64
		want     []IOVARange
		wantErr  error
	}{
		{"edu 28-bit mask clips", vtdRanges, 1<<28 - 1, 4096, []IOVARange{{0x1000, 0xfffffff}}, nil},
		{"no mask keeps the hole", vtdRanges, 0, 4096, []IOVARange{{0x1000, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}, nil},
		{"unaligned ends shrink inward", []IOVARange{{0x1001, 0x5fff}}, 0, 4096, []IOVARange{{0x2000, 0x5fff}}, nil},
		{"unaligned end", []IOVARange{{0x1000, 0x5ffe}}, 0, 4096, []IOVARange{{0x1000, 0x4fff}}, nil},
		{"whole 64-bit space", []IOVARange{{0, ^uint64(0)}}, 0, 4096, []IOVARange{{0x1000, ^uint64(0)}}, nil},
		{"overlapping inputs merge", []IOVARange{{0x10000, 0x1ffff}, {0x18000, 0x2ffff}}, 0, 4096, []IOVARange{{0x10000, 0x2ffff}}, nil},
		{"unsorted inputs", []IOVARange{{0x30000, 0x3ffff}, {0x10000, 0x1ffff}}, 0, 4096, []IOVARange{{0x10000, 0x1ffff}, {0x30000, 0x3ffff}}, nil},
		{"page 0 only", []IOVARange{{0, 0xfff}}, 0, 4096, nil, ErrIOVAExhausted},
		{"range above mask", []IOVARange{{1 << 30, 1<<31 - 1}}, 1<<28 - 1, 4096, nil, ErrIOVAExhausted},
		{"sub-page range", []IOVARange{{0x1800, 0x27ff}}, 0, 4096, nil, ErrIOVAExhausted},
		{"inverted range", []IOVARange{{0x5000, 0x1000}}, 0, 4096, nil, ErrBadMapping},
		{"page size not a power of two", vtdRanges, 0, 3000, nil, ErrBadMapping},
		{"2 MiB pages", vtdRanges, 1<<28 - 1, 2 << 20, []IOVARange{{2 << 20, 1<<28 - 1}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewIOVAAllocator(tc.ranges, tc.mask, tc.ps)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := a.FreeRanges()
			if len(got) != len(tc.want) {
				t.Fatalf("free %#x, want %#x", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("free %#x, want %#x", got, tc.want)
				}
			}
		})
	}
}

func TestIOVAAllocatorAllocRelease(t *testing.T) {
	a, err := NewIOVAAllocator(vtdRanges, 1<<28-1, 4096)
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	x, err := a.Alloc(100, 0) // rounds up to a page, lowest address
	if err != nil || x != 0x1000 {
		t.Fatalf("Alloc(100) = %#x, %v; want 0x1000", x, err)
	}
	y, err := a.Alloc(2*mib, 2*mib) // aligned: skips to 2 MiB
	if err != nil || y != 2*mib {
		t.Fatalf("Alloc(2M, 2M) = %#x, %v; want 0x200000", y, err)
	}
	z, err := a.Alloc(4096, 0) // fills the gap below 2 MiB first
	if err != nil || z != 0x2000 {
		t.Fatalf("Alloc(4096) = %#x, %v; want 0x2000", z, err)
	}
	if _, err := a.Alloc(1<<28, 0); !errors.Is(err, ErrIOVAExhausted) {
		t.Fatalf("Alloc beyond the mask: %v, want ErrIOVAExhausted", err)
	}
	if _, err := a.Alloc(0, 0); !errors.Is(err, ErrBadMapping) {
		t.Fatalf("Alloc(0): %v", err)
	}
	if _, err := a.Alloc(4096, 3); !errors.Is(err, ErrBadMapping) {
		t.Fatalf("Alloc with alignment 3: %v", err)
	}
	if _, err := a.Alloc(^uint64(0), 0); !errors.Is(err, ErrIOVAExhausted) {
		t.Fatalf("Alloc(2^64-1): %v", err)
	}
	if err := a.Release(0x1234); !errors.Is(err, ErrNotMapped) {
		t.Fatalf("Release of a foreign IOVA: %v", err)
	}
	for _, v := range []uint64{y, x, z} {
		if err := a.Release(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Release(x); !errors.Is(err, ErrNotMapped) {
		t.Fatalf("double Release: %v", err)
	}
	// Everything coalesced back into one range.
	if got := a.FreeRanges(); len(got) != 1 || got[0] != (IOVARange{0x1000, 1<<28 - 1}) {
		t.Fatalf("free after releasing all: %#x", got)
	}
	// The whole space can be handed out, then nothing more.
	all, err := a.Alloc(1<<28-0x1000, 0)
	if err != nil || all != 0x1000 {
		t.Fatalf("Alloc(all) = %#x, %v", all, err)
	}
	if _, err := a.Alloc(1, 0); !errors.Is(err, ErrIOVAExhausted) {
		t.Fatalf("Alloc when full: %v", err)
	}
}

// checkAllocator verifies the allocator's invariants against the live set.
func checkAllocator(t *testing.T, a *IOVAAllocator, live map[uint64]uint64, mask uint64) {
	t.Helper()
	free := a.FreeRanges()
	for i, r := range free {
		if r.Start%a.pageSize != 0 || (r.End+1)%a.pageSize != 0 || r.End < r.Start {
			t.Fatalf("free range %#x-%#x not page-aligned", r.Start, r.End)
		}
		if i > 0 && free[i-1].End+1 >= r.Start {
			t.Fatalf("free ranges %#x and %#x overlap or touch (not coalesced)", free[i-1], r)
		}
		for s, n := range live {
			if s <= r.End && r.Start <= s+n-1 {
				t.Fatalf("live %#x+%#x overlaps free %#x-%#x", s, n, r.Start, r.End)
			}
		}
	}
	for s, n := range live {
		if s == 0 || s+n-1 > mask {
			t.Fatalf("live %#x+%#x outside [page, mask %#x]", s, n, mask)
		}
		for s2, n2 := range live {
			if s != s2 && s < s2+n2 && s2 < s+n {
				t.Fatalf("live %#x+%#x overlaps %#x+%#x", s, n, s2, n2)
			}
		}
	}
}

// FuzzIOVAAllocator runs random allocate/release sequences and checks that
// allocations never overlap each other or the free list, stay inside the
// ranges and the mask, and that releasing everything restores the start.
func FuzzIOVAAllocator(f *testing.F) {
	f.Add([]byte{0x10, 0x81, 0x22, 0x03, 0x90, 0x44})
	f.Add([]byte{0xff, 0xff, 0xff, 0x00, 0x00, 0x80, 0x81, 0x82})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const mask = 1<<24 - 1
		ranges := []IOVARange{{0, 0x7fffff}, {0x900000, 0xffffffff}}
		a, err := NewIOVAAllocator(ranges, mask, 4096)
		if err != nil {
			t.Fatal(err)
		}
		start := a.FreeRanges()
		live := map[uint64]uint64{}
		var order []uint64
		for i, op := range ops {
			if op&0x80 != 0 && len(order) > 0 {
				k := int(op&0x7f) % len(order)
				if err := a.Release(order[k]); err != nil {
					t.Fatalf("op %d: release %#x: %v", i, order[k], err)
				}
				delete(live, order[k])
				order = append(order[:k], order[k+1:]...)
			} else {
				size := uint64(op&0x1f+1) * 0x3000
				align := uint64(1) << (12 + op>>5&3)
				v, err := a.Alloc(size, align)
				if errors.Is(err, ErrIOVAExhausted) {
					continue
				}
				if err != nil {
					t.Fatalf("op %d: alloc: %v", i, err)
				}
				if v%align != 0 {
					t.Fatalf("op %d: %#x not aligned to %#x", i, v, align)
				}
				if !inRanges(ranges, v, size) {
					t.Fatalf("op %d: %#x+%#x outside the ranges", i, v, size)
				}
				live[v] = size
				order = append(order, v)
			}
			checkAllocator(t, a, live, mask)
		}
		for _, v := range order {
			if err := a.Release(v); err != nil {
				t.Fatal(err)
			}
		}
		end := a.FreeRanges()
		if len(end) != len(start) {
			t.Fatalf("after releasing all: %#x, want %#x", end, start)
		}
		for i := range end {
			if end[i] != start[i] {
				t.Fatalf("after releasing all: %#x, want %#x", end, start)
			}
		}
	})
}
