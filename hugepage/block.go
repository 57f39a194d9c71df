package hugepage

import "unsafe"

// Block is a piece of a pool's arena: a small value (no heap allocation)
// that knows its arena and offset. The zero Block is invalid. A Block is
// valid until freed; its memory is not zeroed by Alloc.
type Block struct {
	ar  *poolArena
	off int
	n   int
	gen uint32
}

// Bytes is the block's memory, Len bytes at Addr; nil for the zero Block or
// once its arena is gone.
func (b Block) Bytes() []byte {
	if b.ar == nil || b.ar.dead.Load() {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(b.ar.a.base, b.off)), b.n)
}

// Len is the length asked for, rounded up to the alignment.
func (b Block) Len() int { return b.n }

// Addr is the virtual address of the first byte (0 for the zero Block).
func (b Block) Addr() uintptr {
	if b.ar == nil {
		return 0
	}
	return uintptr(b.ar.a.base) + uintptr(b.off)
}

// Arena is the arena holding the block (nil for the zero Block).
func (b Block) Arena() *Arena {
	if b.ar == nil {
		return nil
	}
	return b.ar.a
}

// Offset is the block's offset in its arena: a device address is the
// arena's IOVA plus Offset.
func (b Block) Offset() int { return b.off }

// IsZero reports whether b is the zero Block.
func (b Block) IsZero() bool { return b.ar == nil }

// Block2D is a block of Rows rows of Width bytes, Stride bytes apart; the
// stride is Width rounded up to the alignment, so every row starts aligned.
type Block2D struct {
	Block
	Rows, Width, Stride int
}

// Row is row i (Width bytes), or nil when i is out of range.
func (b Block2D) Row(i int) []byte {
	mem := b.Bytes()
	if i < 0 || i >= b.Rows || mem == nil {
		return nil
	}
	return mem[i*b.Stride : i*b.Stride+b.Width]
}
