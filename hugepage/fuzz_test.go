package hugepage

import (
	"errors"
	"testing"
)

// FuzzAllocFree drives a pool with random Alloc/Free sequences and checks
// it against a reference model (the list of live blocks): no two live
// blocks overlap, every block is aligned as asked and as long as asked,
// every block keeps what was written to it until it is freed, bad frees are
// refused without effect, and the accounting balances at every step and at
// the end.
func FuzzAllocFree(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{0x10, 0xff, 0xff, 0x12, 0x00, 0x40, 0x01, 0x00, 0x03, 0x01, 0x80})
	f.Add([]byte("alloc free alloc alloc free free alloc large and small blocks"))
	f.Add([]byte{0x20, 0xff, 0xff, 0x22, 0xff, 0xf0, 0x24, 0x80, 0x00, 0x03, 0x00, 0x05, 0x01, 0x07, 0x02})
	f.Fuzz(checkAllocFree)
}

// maxFuzzOps bounds one input: the model's overlap check is quadratic in
// the live blocks, and longer sequences find nothing shorter ones do not.
const maxFuzzOps = 4096

func checkAllocFree(t *testing.T, ops []byte) {
	{
		if len(ops) > maxFuzzOps {
			ops = ops[:maxFuzzOps]
		}
		p, err := NewPool(PoolConfig{
			Size: 2 << 20, GrowBy: 2 << 20, MaxSize: 6 << 20,
			Arena: ArenaConfig{Backings: []Backing{Backing4K}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		type live struct {
			b   Block
			tag byte
		}
		var model []live
		var freed []Block
		var inUse int64
		tag := byte(0)
		next := func() byte {
			if len(ops) == 0 {
				return 0
			}
			v := ops[0]
			ops = ops[1:]
			return v
		}
		for len(ops) > 0 {
			op := next()
			switch op % 4 {
			case 0, 1: // alloc
				a, b := int(next()), int(next())
				var n int
				switch op >> 6 {
				case 0:
					n = a + 1 // tiny
				case 1:
					n = a<<8 | b + 1 // up to 64 KiB
				case 2:
					n = (a<<8 | b) << 4 // up to 1 MiB, may be 0
				default:
					n = (a<<8 | b) << 6 // up to 4 MiB, may be 0 or beyond an arena
				}
				align := 8 << ((op >> 2) & 15) // 8 B .. 256 KiB
				blk, err := p.AllocAligned(n, align)
				if n <= 0 {
					if !errors.Is(err, ErrInvalidSize) {
						t.Fatalf("AllocAligned(%d, %d) = %v, want ErrInvalidSize", n, align, err)
					}
					continue
				}
				if errors.Is(err, ErrPoolExhausted) || errors.Is(err, ErrTooLarge) {
					continue
				}
				if err != nil {
					t.Fatalf("AllocAligned(%d, %d): %v", n, align, err)
				}
				if blk.Addr()%uintptr(align) != 0 || blk.Len() != roundUp(n, align) {
					t.Fatalf("AllocAligned(%d, %d): addr %#x len %d", n, align, blk.Addr(), blk.Len())
				}
				for _, l := range model {
					o := l.b
					if blk.Addr() < o.Addr()+uintptr(o.Len()) && o.Addr() < blk.Addr()+uintptr(blk.Len()) {
						t.Fatalf("new block %#x+%d overlaps live block %#x+%d", blk.Addr(), blk.Len(), o.Addr(), o.Len())
					}
				}
				tag++
				mem := blk.Bytes()
				mem[0], mem[len(mem)/2], mem[len(mem)-1] = tag, tag, tag
				model = append(model, live{blk, tag})
				inUse += int64(blk.Len())
			case 2: // free a live block
				if len(model) == 0 {
					continue
				}
				i := int(next()) % len(model)
				l := model[i]
				mem := l.b.Bytes()
				if mem[0] != l.tag || mem[len(mem)/2] != l.tag || mem[len(mem)-1] != l.tag {
					t.Fatalf("block %#x+%d lost its contents before free", l.b.Addr(), l.b.Len())
				}
				if got, ok := p.Contains(l.b.Addr()+uintptr(l.b.Len()/2), l.b.Len()/2); !ok || got != l.b {
					t.Fatalf("Contains did not resolve live block %#x+%d", l.b.Addr(), l.b.Len())
				}
				if err := p.Free(l.b); err != nil {
					t.Fatalf("free live block: %v", err)
				}
				model = append(model[:i], model[i+1:]...)
				freed = append(freed, l.b)
				inUse -= int64(l.b.Len())
			case 3: // a bad free: a freed (stale) block or a forged one
				if op&8 != 0 {
					p.Trim() // release idle added arenas: their blocks become stale
				}
				if len(freed) == 0 {
					continue
				}
				b := freed[int(next())%len(freed)]
				if op&4 != 0 {
					b.off += int(next()) * 8
				}
				if err := p.Free(b); !errors.Is(err, ErrDoubleFree) && !errors.Is(err, ErrForeignBlock) {
					t.Fatalf("bad free of %#x+%d = %v", b.Addr(), b.Len(), err)
				}
			}
			st := p.Stats()
			if st.InUse != inUse || st.Allocs-st.Frees != uint64(len(model)) || st.Held+st.Free != st.Mapped || st.Held < st.InUse {
				t.Fatalf("accounting: stats %+v, model %d blocks %d bytes", st, len(model), inUse)
			}
		}
		for _, l := range model {
			if err := p.Free(l.b); err != nil {
				t.Fatalf("final free: %v", err)
			}
		}
		p.Trim()
		st := p.Stats()
		var cached int64
		for _, c := range st.Classes {
			if c.Live != 0 || c.Slabs > 1 {
				t.Fatalf("class %d after freeing all: %+v", c.Size, c)
			}
		}
		for ci := range classSizes {
			cached += int64(p.classSlabs[ci]) * int64(slabUnits[ci]) * unitSize
		}
		if st.InUse != 0 || st.Arenas != 1 || st.Held != cached {
			t.Fatalf("after freeing all: %+v (cached empty slabs %d bytes)", st, cached)
		}
	}
}
