package hugepage

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Borrow returns an Arena over memory the caller mapped and keeps owning
// (an mmap'd buffer, a NumPy array's or a CPU tensor's pages): mem must
// start on a page boundary and be a whole number of pages long, and must
// not be Go heap memory. The arena can be mapped into a device like any
// other (vfio.DMASpace.MapArena, an engine backend's MapArena); Close does
// not unmap the memory, it only marks the arena closed (Bytes and the
// Whole block's Bytes are nil from then on). The caller must keep the
// memory mapped until the arena is closed and every device mapping of it
// is gone. Its Backing says Backing4K: what the caller's pages are is not
// known.
func Borrow(mem []byte) (*Arena, error) {
	ps := unix.Getpagesize()
	if len(mem) == 0 {
		return nil, fmt.Errorf("hugepage: borrow memory: empty: %w", ErrInvalidSize)
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	if p%uintptr(ps) != 0 || len(mem)%ps != 0 {
		return nil, fmt.Errorf("hugepage: borrow %d bytes at %#x: want a start and a length that are multiples of the %d-byte page: %w",
			len(mem), p, ps, ErrBadAlign)
	}
	a := &Arena{base: unsafe.Pointer(unsafe.SliceData(mem)), size: len(mem), backing: Backing4K, fd: -1}
	a.borrowed = &poolArena{a: a}
	return a, nil
}

// Borrowed reports whether a is caller memory (Borrow): not unmapped by
// Close, not part of any pool.
func (a *Arena) Borrowed() bool { return a.borrowed != nil }

// Whole returns one Block spanning all of a borrowed arena, so that the
// arena can be used wherever a pool block is (offset 0, Len bytes). It
// belongs to no pool (Pool.Free refuses it) and its Bytes is nil once the
// arena is closed. The zero Block for an arena that Borrow did not make.
func (a *Arena) Whole() Block {
	if a.borrowed == nil {
		return Block{}
	}
	return Block{ar: a.borrowed, n: a.size, gen: 1}
}
