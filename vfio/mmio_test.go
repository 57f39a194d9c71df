package vfio

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestMMIOAccessors checks on ordinary memory that each accessor touches
// exactly its width at its address, little-endian, and nothing around it.
func TestMMIOAccessors(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	base := uintptr(unsafe.Pointer(&mem[0]))
	tests := []struct {
		width int
		write func(p uintptr)
		read  func(p uintptr) uint64
		v     uint64
	}{
		{1, func(p uintptr) { mmioWrite8(p, 0xa1) }, func(p uintptr) uint64 { return uint64(mmioRead8(p)) }, 0xa1},
		{2, func(p uintptr) { mmioWrite16(p, 0xb2c3) }, func(p uintptr) uint64 { return uint64(mmioRead16(p)) }, 0xb2c3},
		{4, func(p uintptr) { mmioWrite32(p, 0xd4e5f607) }, func(p uintptr) uint64 { return uint64(mmioRead32(p)) }, 0xd4e5f607},
		{8, func(p uintptr) { mmioWrite64(p, 0x0102030405060708) }, func(p uintptr) uint64 { return mmioRead64(p) }, 0x0102030405060708},
	}
	for _, tc := range tests {
		const off = 64
		for i := range mem[:256] {
			mem[i] = 0xcc
		}
		tc.write(base + off)
		var want [8]byte
		binary.LittleEndian.PutUint64(want[:], tc.v)
		for i := 0; i < 256; i++ {
			w := byte(0xcc)
			if i >= off && i < off+tc.width {
				w = want[i-off]
			}
			if mem[i] != w {
				t.Fatalf("width %d: byte %d = %#x, want %#x", tc.width, i, mem[i], w)
			}
		}
		if got := tc.read(base + off); got != tc.v {
			t.Errorf("width %d: read %#x, want %#x", tc.width, got, tc.v)
		}
	}
}

// TestMMIONoAlloc: register accesses do not allocate.
func TestMMIONoAlloc(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	r := &kernelRegion{dev: &KernelDevice{}, desc: regionDesc{Size: 4096}, areas: []mappedArea{{0, mem}}}
	allocs := testing.AllocsPerRun(100, func() {
		r.Write32(8, 1)
		r.Read32(8)
		r.Write64(16, 2)
		r.Read64(16)
		DMAReadBarrier()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per register access round", allocs)
	}
}

// BenchmarkMMIO measures the accessor path (bounds check + assembly MOV) on
// ordinary memory against a plain Go store, the floor.
func BenchmarkMMIO(b *testing.B) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem)
	r := &kernelRegion{dev: &KernelDevice{}, desc: regionDesc{Size: 4096}, areas: []mappedArea{{0, mem}}}
	b.Run("Region.Write32", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			r.Write32(8, uint32(i))
		}
	})
	b.Run("plain-store", func(b *testing.B) {
		p := (*uint32)(unsafe.Pointer(&mem[8]))
		for i := 0; b.Loop(); i++ {
			*p = uint32(i)
		}
	})
}
