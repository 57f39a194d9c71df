package hugepage

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBorrow: a borrowed arena is the caller's memory (same address),
// its Whole block spans it, and Close marks it closed without unmapping.
func TestBorrow(t *testing.T) {
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 4*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for _, bad := range [][]byte{nil, mem[1 : ps+1], mem[:ps+1]} {
		if _, err := Borrow(bad); !errors.Is(err, ErrBadAlign) && !errors.Is(err, ErrInvalidSize) {
			t.Errorf("Borrow(%d bytes): %v, want ErrBadAlign or ErrInvalidSize", len(bad), err)
		}
	}
	a, err := Borrow(mem)
	if err != nil {
		t.Fatal(err)
	}
	b := a.Whole()
	if !a.Borrowed() || &a.Bytes()[0] != &mem[0] || &b.Bytes()[0] != &mem[0] || b.Len() != len(mem) || b.Arena() != a {
		t.Fatal("borrowed arena or its Whole block is not the caller's memory")
	}
	p, err := NewPool(PoolConfig{Size: 1 << 20, Arena: ArenaConfig{Backings: []Backing{Backing4K}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Free(b); !errors.Is(err, ErrForeignBlock) {
		t.Errorf("Pool.Free(borrowed block): %v, want ErrForeignBlock", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if a.Bytes() != nil || b.Bytes() != nil {
		t.Error("Bytes after Close: want nil")
	}
	mem[len(mem)-1] = 1 // still mapped: Close did not unmap the caller's memory
	var own Arena
	if own.Borrowed() || !own.Whole().IsZero() {
		t.Error("an arena Borrow did not make: Whole must be the zero Block")
	}
}
