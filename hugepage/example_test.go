package hugepage_test

import (
	"fmt"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
)

// An adaptive pool: it starts with one 4 MiB arena, grows by 4 MiB arenas
// up to 12 MiB, and gives an added arena back after it has been idle for
// IdleRelease (or at once on Trim). OnGrow and OnRelease are where a user
// maps each added arena for a device and unmaps it again; they run under
// the pool's lock and must not call the pool.
func ExamplePoolConfig_adaptive() {
	p, err := hugepage.NewPool(hugepage.PoolConfig{
		Size:        4 << 20,
		MaxSize:     12 << 20,
		IdleRelease: time.Minute,
		Arena:       hugepage.ArenaConfig{Backings: []hugepage.Backing{hugepage.Backing4K}},
		OnGrow: func(a *hugepage.Arena) error {
			fmt.Printf("map %d MiB arena (%v) before its first block\n", a.Len()>>20, a.Backing())
			return nil // an error here fails the Alloc, nothing stays mapped
		},
		OnRelease: func(a *hugepage.Arena) {
			fmt.Printf("unmap %d MiB arena\n", a.Len()>>20)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	var blocks []hugepage.Block
	for range 3 {
		b, err := p.Alloc(3 << 20)
		if err != nil {
			fmt.Println(err)
			return
		}
		blocks = append(blocks, b)
	}
	st := p.Stats()
	fmt.Printf("%d arenas, %d MiB mapped, %d grows\n", st.Arenas, st.Mapped>>20, st.Grows)

	for _, b := range blocks {
		p.Free(b)
	}
	p.Trim() // without waiting for IdleRelease
	st = p.Stats()
	fmt.Printf("%d arena, %d MiB mapped, %d releases\n", st.Arenas, st.Mapped>>20, st.Releases)
	// Output:
	// map 4 MiB arena (4K) before its first block
	// map 4 MiB arena (4K) before its first block
	// 3 arenas, 12 MiB mapped, 2 grows
	// unmap 4 MiB arena
	// unmap 4 MiB arena
	// 1 arena, 4 MiB mapped, 2 releases
}
