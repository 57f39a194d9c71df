package hugepage

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestPool(t testing.TB, cfg PoolConfig) *Pool {
	t.Helper()
	if len(cfg.Arena.Backings) == 0 {
		cfg.Arena.Backings = []Backing{Backing4K}
	}
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestNewPoolBadInput(t *testing.T) {
	tests := []struct {
		name string
		cfg  PoolConfig
		want error
	}{
		{"zero size", PoolConfig{}, ErrInvalidSize},
		{"negative size", PoolConfig{Size: -1}, ErrInvalidSize},
		{"negative growth", PoolConfig{Size: 1 << 20, GrowBy: -1}, ErrInvalidSize},
		{"negative max", PoolConfig{Size: 1 << 20, MaxSize: -1}, ErrInvalidSize},
		{"align 3", PoolConfig{Size: 1 << 20, Align: 3}, ErrBadAlign},
		{"align 4", PoolConfig{Size: 1 << 20, Align: 4}, ErrBadAlign},
		{"align 96", PoolConfig{Size: 1 << 20, Align: 96}, ErrBadAlign},
		{"bad backing", PoolConfig{Size: 1 << 20, Arena: ArenaConfig{Backings: []Backing{Backing(7)}}}, ErrInvalidBacking},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPool(tc.cfg)
			if !errors.Is(err, tc.want) {
				if p != nil {
					p.Close()
				}
				t.Fatalf("NewPool(%+v) = %v, want %v", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestAllocBadInput(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 4 << 20})
	tests := []struct {
		name     string
		n, align int
		want     error
	}{
		{"zero", 0, 64, ErrInvalidSize},
		{"negative", -5, 64, ErrInvalidSize},
		{"align 0", 64, 0, ErrBadAlign},
		{"align 4", 64, 4, ErrBadAlign},
		{"align 48", 64, 48, ErrBadAlign},
		{"align negative", 64, -64, ErrBadAlign},
		{"beyond the pool", 5 << 20, 64, ErrTooLarge},
		{"max int", maxInt, 8, ErrTooLarge},
		{"alignment beyond the pool", 4096, 8 << 20, ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := p.AllocAligned(tc.n, tc.align)
			if !errors.Is(err, tc.want) || !b.IsZero() {
				t.Fatalf("AllocAligned(%d, %d) = %v, %v; want %v", tc.n, tc.align, b, err, tc.want)
			}
		})
	}
	if _, err := p.Alloc2D(0, 10, 64); !errors.Is(err, ErrInvalidSize) {
		t.Errorf("Alloc2D(0, 10, 64) = %v", err)
	}
	if _, err := p.Alloc2D(2, 10, 12); !errors.Is(err, ErrBadAlign) {
		t.Errorf("Alloc2D(2, 10, 12) = %v", err)
	}
	if _, err := p.Alloc2D(maxInt/2, 4096, 4096); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Alloc2D(huge) = %v", err)
	}
	if st := p.Stats(); st.InUse != 0 || st.Allocs != 0 {
		t.Fatalf("bad input changed the accounting: %+v", st)
	}
}

func TestFreeBadBlocks(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 4 << 20})
	other := newTestPool(t, PoolConfig{Size: 1 << 20})
	for _, size := range []int{64, 100 << 10} { // a slab block and a large block
		small, err := p.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		foreign, _ := other.Alloc(size)
		forgedOff, forgedGen, forgedLen := small, small, small
		forgedOff.off += 64 * 1024 * 3 / 2
		forgedGen.gen += 1000
		forgedLen.n += 64
		tests := []struct {
			name string
			b    Block
			want error
		}{
			{"zero block", Block{}, ErrForeignBlock},
			{"other pool", foreign, ErrForeignBlock},
			{"forged offset", forgedOff, nil}, // refused, by either sentinel
			{"forged generation", forgedGen, ErrDoubleFree},
			{"forged length", forgedLen, ErrForeignBlock},
		}
		for _, tc := range tests {
			err := p.Free(tc.b)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) ||
				!(errors.Is(err, ErrForeignBlock) || errors.Is(err, ErrDoubleFree)) {
				t.Errorf("size %d, %s: Free = %v, want %v", size, tc.name, err, tc.want)
			}
		}
		if err := p.Free(small); err != nil {
			t.Fatalf("free the real block after the forgeries: %v", err)
		}
		if err := p.Free(small); !errors.Is(err, ErrDoubleFree) {
			t.Fatalf("double free = %v, want ErrDoubleFree", err)
		}
		// The same memory handed out again: the stale copy must not free it.
		again, err := p.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		if again.Offset() != small.Offset() {
			t.Logf("size %d: reallocation at %#x, not %#x (stale check still applies)", size, again.Offset(), small.Offset())
		}
		if err := p.Free(small); !errors.Is(err, ErrDoubleFree) {
			t.Fatalf("free of a stale copy = %v, want ErrDoubleFree", err)
		}
		if err := p.Free(again); err != nil {
			t.Fatalf("free of the live block after a stale free: %v", err)
		}
		other.Free(foreign)
	}
	if st := p.Stats(); st.InUse != 0 || st.Allocs != st.Frees {
		t.Fatalf("accounting after bad frees: %+v", st)
	}
}

func TestAlignment(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 64 << 20})
	for align := 8; align <= 4<<20; align *= 2 {
		var blocks []Block
		for _, n := range []int{1, 7, 8, 63, 64, 100, 4095, 4096, 5000, 40000, 1 << 20} {
			b, err := p.AllocAligned(n, align)
			if err != nil {
				t.Fatalf("AllocAligned(%d, %d): %v", n, align, err)
			}
			if b.Addr()%uintptr(align) != 0 || b.Len()%align != 0 || b.Len() < n || b.Len() != roundUp(n, align) {
				t.Fatalf("AllocAligned(%d, %d): addr %#x len %d", n, align, b.Addr(), b.Len())
			}
			if b.Addr() != b.Arena().Addr()+uintptr(b.Offset()) || len(b.Bytes()) != b.Len() {
				t.Fatalf("block addr %#x, arena %#x + offset %#x, bytes %d", b.Addr(), b.Arena().Addr(), b.Offset(), len(b.Bytes()))
			}
			blocks = append(blocks, b)
		}
		checkDisjoint(t, blocks)
		for _, b := range blocks {
			if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := p.Stats()
	if st.InUse != 0 || st.LargestFree < st.Mapped-int64(len(st.Classes))*(256<<10) {
		t.Fatalf("after freeing everything: %+v", st)
	}
}

func checkDisjoint(t *testing.T, blocks []Block) {
	t.Helper()
	for i := range blocks {
		for j := i + 1; j < len(blocks); j++ {
			a, b := blocks[i], blocks[j]
			if a.Addr() < b.Addr()+uintptr(b.Len()) && b.Addr() < a.Addr()+uintptr(a.Len()) {
				t.Fatalf("blocks overlap: %#x+%d and %#x+%d", a.Addr(), a.Len(), b.Addr(), b.Len())
			}
		}
	}
}

func TestDefaultAlignAndODirect(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 4 << 20})
	b, _ := p.Alloc(1)
	if b.Len() != 64 || b.Addr()%64 != 0 {
		t.Fatalf("default Alloc(1): len %d addr %#x, want a 64-byte cache line", b.Len(), b.Addr())
	}
	d := newTestPool(t, PoolConfig{Size: 4 << 20, Align: 4096})
	b, _ = d.Alloc(100)
	if b.Len() != 4096 || b.Addr()%4096 != 0 {
		t.Fatalf("O_DIRECT pool Alloc(100): len %d addr %#x", b.Len(), b.Addr())
	}
}

func TestAlloc2D(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 4 << 20})
	b, err := p.Alloc2D(10, 1000, 256)
	if err != nil {
		t.Fatal(err)
	}
	if b.Stride != 1024 || b.Len() != 10240 || b.Addr()%256 != 0 {
		t.Fatalf("2-D block stride %d len %d addr %#x", b.Stride, b.Len(), b.Addr())
	}
	for i := range b.Rows {
		row := b.Row(i)
		if len(row) != 1000 || (b.Addr()+uintptr(i*b.Stride))%256 != 0 {
			t.Fatalf("row %d len %d", i, len(row))
		}
		row[0] = byte(i)
	}
	if b.Row(-1) != nil || b.Row(10) != nil {
		t.Fatal("rows out of range are not nil")
	}
	if err := p.Free(b.Block); err != nil {
		t.Fatal(err)
	}
}

func TestCoalesce(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 16 << 20})
	var blocks []Block
	for {
		b, err := p.Alloc(100 << 10)
		if errors.Is(err, ErrPoolExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
	}
	if len(blocks) < 150 {
		t.Fatalf("only %d blocks of 100 KiB fit 16 MiB", len(blocks))
	}
	// Free in an interleaved order so both neighbours merge.
	for _, start := range []int{0, 1} {
		for i := start; i < len(blocks); i += 2 {
			if err := p.Free(blocks[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := p.Stats()
	if st.Free != st.Mapped || st.LargestFree != st.Mapped || st.Fragmentation != 0 {
		t.Fatalf("after freeing all: %+v, want one free span of the whole arena", st)
	}
	whole, err := p.Alloc(16 << 20)
	if err != nil {
		t.Fatalf("the whole arena after coalescing: %v", err)
	}
	p.Free(whole)
}

func TestGrowAndRelease(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 4 << 20, GrowBy: 4 << 20, MaxSize: 12 << 20, IdleRelease: time.Millisecond})
	var blocks []Block
	for i := range 3 {
		b, err := p.Alloc(3 << 20)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		blocks = append(blocks, b)
	}
	if st := p.Stats(); st.Arenas != 3 || st.Grows != 2 || st.Mapped != 12<<20 {
		t.Fatalf("after 3 blocks of 3 MiB: %+v", st)
	}
	if _, err := p.Alloc(3 << 20); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("a fourth block = %v, want ErrPoolExhausted", err)
	}
	if _, err := p.Alloc(9 << 20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("9 MiB block = %v, want ErrTooLarge (no arena can hold it)", err)
	}
	for _, b := range blocks {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	waitArenas(t, p, 1)
	st := p.Stats()
	if st.Arenas != 1 || st.Releases != 2 || st.Mapped != 4<<20 || len(p.Arenas()) != 1 {
		t.Fatalf("after freeing: %+v", st)
	}
	if blocks[2].Bytes() != nil {
		t.Fatal("a block of a released arena still has bytes")
	}
	if err := p.Free(blocks[2]); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("free of a block of a released arena = %v", err)
	}
	if st.Peak != 9<<20 {
		t.Fatalf("peak %d, want 9 MiB", st.Peak)
	}
}

func TestTrim(t *testing.T) {
	var released []*Arena
	p := newTestPool(t, PoolConfig{Size: 1 << 20, MaxSize: 3 << 20, OnRelease: func(a *Arena) {
		if a.Bytes() == nil {
			t.Error("OnRelease got an arena already closed")
		}
		released = append(released, a)
	}})
	a, _ := p.Alloc(1 << 20)
	b, err := p.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Arenas()); n != 2 {
		t.Fatalf("%d arenas, want 2", n)
	}
	added := p.Arenas()[1]
	p.Free(b) // IdleRelease is 0: the arena stays
	if n := len(p.Arenas()); n != 2 || len(released) != 0 {
		t.Fatalf("%d arenas after free without IdleRelease, want 2 (%d released)", n, len(released))
	}
	if n := p.Trim(); n != 1 || len(p.Arenas()) != 1 {
		t.Fatalf("Trim released %d, %d arenas left", n, len(p.Arenas()))
	}
	if len(released) != 1 || released[0] != added || added.Bytes() != nil {
		t.Fatalf("OnRelease got %v, want the added arena %p, closed afterwards", released, added)
	}
	p.Free(a)
}

func TestContains(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 8 << 20})
	small, _ := p.Alloc(200)
	large, _ := p.Alloc(300 << 10)
	for _, b := range []Block{small, large} {
		got, ok := p.Contains(b.Addr()+10, b.Len()-10)
		if !ok || got != b {
			t.Fatalf("Contains inside %#x+%d = %v %v", b.Addr(), b.Len(), got, ok)
		}
		if _, ok := p.Contains(b.Addr()+10, b.Len()-9); ok {
			t.Fatalf("Contains past the end of %#x+%d succeeded", b.Addr(), b.Len())
		}
		if _, ok := p.Contains(b.Addr(), -1); ok {
			t.Fatal("negative length resolved")
		}
		// A length so large that offset+length overflows int must not
		// wrap around into "inside the block".
		if _, ok := p.Contains(b.Addr()+10, math.MaxInt-5); ok {
			t.Fatalf("Contains(%#x+10, MaxInt-5) resolved: offset+length overflowed", b.Addr())
		}
	}
	if _, ok := p.Contains(small.Addr()+uintptr(small.Len()), 1); ok {
		t.Fatal("the byte after a small block resolved (neighbour not allocated)")
	}
	if _, ok := p.Contains(p.Arenas()[0].Addr()+uintptr(p.Arenas()[0].Len())-1, 1); ok {
		t.Fatal("free memory at the arena's end resolved")
	}
	if _, ok := p.Contains(1, 1); ok {
		t.Fatal("address outside every arena resolved")
	}
	p.Free(large)
	if _, ok := p.Contains(large.Addr(), 1); ok {
		t.Fatal("a freed block resolved")
	}
	// A smaller block now where the large one started: the units past its
	// end still name that start in the ownership map, and must not resolve
	// to it, even for an empty range.
	smaller, err := p.Alloc(100 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if smaller.Addr() != large.Addr() {
		t.Skipf("the 100 KiB block went to %#x, not to the freed %#x", smaller.Addr(), large.Addr())
	}
	for _, n := range []int{0, 1} {
		if b, ok := p.Contains(large.Addr()+200<<10, n); ok {
			t.Fatalf("Contains(free memory past a block, %d) resolved to %#x+%d", n, b.Addr(), b.Len())
		}
	}
	p.Free(smaller)
}

func TestDebugPoison(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 4 << 20, Debug: true})
	for _, n := range []int{128, 64 << 10} {
		b, _ := p.Alloc(n)
		mem := b.Bytes()
		for i := range mem {
			mem[i] = 1
		}
		p.Free(b)
		for i, v := range mem { // the arena is still mapped: read what Free left
			if v != PoisonByte {
				t.Fatalf("size %d: byte %d after free = %#x, want %#x", n, i, v, PoisonByte)
			}
		}
	}
}

func TestPoolClose(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 1 << 20})
	b, _ := p.Alloc(64)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Alloc(64); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc after Close = %v", err)
	}
	if err := p.Free(b); !errors.Is(err, ErrClosed) {
		t.Fatalf("Free after Close = %v", err)
	}
	if b.Bytes() != nil {
		t.Fatal("Bytes after Close")
	}
}

func TestStatsClasses(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 8 << 20})
	var bs []Block
	for range 10 {
		b, _ := p.Alloc(100) // class 128
		bs = append(bs, b)
	}
	big, _ := p.Alloc(1 << 20)
	st := p.Stats()
	if st.InUse != 10*128+1<<20 || st.LargeBlocks != 1 || st.LargeBytes != 1<<20 {
		t.Fatalf("stats %+v", st)
	}
	found := false
	for _, c := range st.Classes {
		if c.Size == 128 {
			found = c.Live == 10 && c.Slabs == 1 && c.Allocs == 10
		}
	}
	if !found {
		t.Fatalf("class 128 not counted right: %+v", st.Classes)
	}
	for _, b := range bs {
		p.Free(b)
	}
	p.Free(big)
}

func TestConcurrent(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 64 << 20})
	sizes := []int{8, 64, 200, 4096, 10000, 70000, 300 << 10}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []Block
			for i := range 2000 {
				if len(held) > 16 || (len(held) > 0 && i%3 == 0) {
					b := held[0]
					held = held[1:]
					for _, v := range b.Bytes() {
						if v != byte(g) {
							errs <- errors.New("a block was overwritten by another goroutine")
							return
						}
					}
					if err := p.Free(b); err != nil {
						errs <- err
						return
					}
					continue
				}
				b, err := p.Alloc(sizes[(i+g)%len(sizes)])
				if err != nil {
					errs <- err
					return
				}
				mem := b.Bytes()
				for j := range mem {
					mem[j] = byte(g)
				}
				held = append(held, b)
			}
			for _, b := range held {
				p.Free(b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := p.Stats(); st.InUse != 0 || st.Allocs != st.Frees {
		t.Fatalf("after concurrent use: %+v", st)
	}
}

func TestZeroAllocs(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 16 << 20})
	for _, n := range []int{64, 4096, 1 << 20} {
		allocs := testing.AllocsPerRun(1000, func() {
			b, err := p.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("Alloc+Free of %d bytes: %v heap allocations per run, want 0", n, allocs)
		}
	}
}

// TestErrorPrefix: every error the package returns starts with
// "hugepage: " and carries the prefix once, whichever layer it comes from.
func TestErrorPrefix(t *testing.T) {
	p := newTestPool(t, PoolConfig{Size: 1 << 20, MaxSize: 2 << 20, OnGrow: func(*Arena) error { return errors.New("refused") }})
	full, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := NewArena(ArenaConfig{Size: 4096, Backings: []Backing{Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	tests := []struct {
		name string
		err  func() error
	}{
		{"NewPool size", func() error { _, err := NewPool(PoolConfig{}); return err }},
		{"NewPool backing", func() error {
			_, err := NewPool(PoolConfig{Size: 4096, Arena: ArenaConfig{Backings: []Backing{Backing(9)}}})
			return err
		}},
		{"NewArena refused", func() error {
			_, err := NewArena(ArenaConfig{Size: 3 << 20, Backings: []Backing{BackingMemfd2M}})
			return err
		}},
		{"Alloc align", func() error { _, err := p.AllocAligned(64, 3); return err }},
		{"Alloc too large", func() error { _, err := p.Alloc(4 << 20); return err }},
		{"Alloc growth refused", func() error { _, err := p.Alloc(64); return err }},
		{"Alloc2D", func() error { _, err := p.Alloc2D(0, 1, 64); return err }},
		{"Free zero", func() error { return p.Free(Block{}) }},
		{"Free stale", func() error {
			b := full
			b.gen++
			return p.Free(b)
		}},
		{"PhysAddr", func() error { _, err := closed.PhysAddr(-1); return err }},
		{"PhysRuns closed", func() error { _, err := closed.PhysRuns(); return err }},
		{"Residency closed", func() error { _, err := closed.Residency(); return err }},
		{"Reserve", func() error { _, err := Reserve(size2M, 0); return err }},
		{"ReadHugeCounts", func() error { _, err := ReadHugeCounts(12345); return err }},
	}
	for _, tc := range tests {
		err := tc.err()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "hugepage: ") || strings.Count(msg, "hugepage:") != 1 {
			t.Errorf("%s: %q does not start with one \"hugepage: \"", tc.name, msg)
		}
	}
	p.Free(full)
}
