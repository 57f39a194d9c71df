package hdma_test

import (
	"fmt"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// The engine's use of the driver, on vfio-mock: one arena mapped into the
// IOMMU once, rings and buffers carved from it, a batch of descriptors
// published with one doorbell, completions reaped in a batch.
func Example() {
	dev, _ := mock.New(mock.Config{})
	defer dev.Close()
	arena, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 4 << 20, Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer arena.Close()
	mem := arena.Bytes()
	const base = 0x1_0000_0000 // the arena's IOVA
	if err := dev.MapDMA(base, mem, vfio.DMAReadWrite); err != nil {
		fmt.Println(err)
		return
	}

	drv, err := hdma.Open(dev, hdma.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drv.Close()
	q, err := drv.SetupQueue(hdma.QueueConfig{
		Index: 0, Entries: 64,
		SQ: mem[0:], SQIOVA: base, // 64 × 64 bytes
		CQ: mem[8192:], CQIOVA: base + 8192, // 64 × 16 bytes
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := drv.Enable(); err != nil {
		fmt.Println(err)
		return
	}

	buf := mem[1<<20 : 1<<20+4096]
	copy(buf, "hello, device")
	n, err := q.SubmitBatch([]hdma.Desc{
		{Op: hdma.OpH2D, Len: 4096, Src: base + 1<<20, Dst: 0, User: 1},
		{Op: hdma.OpD2H, Len: 13, Src: 0, Dst: base + 2<<20, User: 2},
		{Op: hdma.OpD2H, Len: 13, Src: 0, Dst: 0xdead0000, User: 3}, // not mapped
	})
	fmt.Println("submitted", n, err, "doorbells", q.Stats().Doorbells)

	out := make([]hdma.Completion, 3)
	for got := 0; got < 3; {
		got += q.Reap(out[got:])
	}
	for _, c := range out {
		fmt.Println(c.User, c.Len, c.Err)
	}
	fmt.Printf("%s\n", mem[2<<20:2<<20+13])
	// Output:
	// submitted 3 <nil> doorbells 1
	// 1 4096 <nil>
	// 2 13 <nil>
	// 3 0 hdma: IOMMU fault
	// hello, device
}
