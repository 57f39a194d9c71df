package hdma_test

import (
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// The engine's layout in miniature: one hugepage arena, mapped into the
// device's IOMMU once at arenaIOVA; rings and buffers are carved from it.
const (
	arenaIOVA = 0x1_0000_0000
	arenaSize = 8 << 20
	ringArea  = 1 << 20 // rings of every queue live in the first MiB
	dataOff   = ringArea
)

var testBackings = []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K}

type rig struct {
	t     testing.TB
	dev   *mock.Device
	drv   *hdma.Driver
	arena *hugepage.Arena
	mem   []byte // the arena
	qs    []*hdma.Queue
}

// ringOffsets is where queue q's SQ and CQ live in the arena.
func ringOffsets(q, entries int) (sq, cq int) {
	per := ringArea / 8
	return q * per, q*per + per/2
}

// newRig creates a mock device, an arena mapped at arenaIOVA, a driver, and
// nq queues of the given size (queue 0 with interrupts), enabled.
func newRig(t testing.TB, mcfg mock.Config, dcfg hdma.Config, nq, entries int) *rig {
	t.Helper()
	// Transparent hugepages (or 4 KiB pages): the tests must not take
	// hugetlb pages from the pool that other packages' tests reserve.
	arena, err := hugepage.NewArena(hugepage.ArenaConfig{Size: arenaSize, Backings: testBackings})
	if err != nil {
		t.Fatalf("arena: %v", err)
	}
	t.Cleanup(func() { arena.Close() })
	mcfg.Logger = quietLogger(t)
	dev, err := mock.New(mcfg)
	if err != nil {
		t.Fatalf("mock: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	r := &rig{t: t, dev: dev, arena: arena, mem: arena.Bytes()[:arenaSize]}
	if err := dev.MapDMA(arenaIOVA, r.mem, vfio.DMAReadWrite); err != nil {
		t.Fatalf("map arena: %v", err)
	}
	dcfg.Logger = quietLogger(t)
	r.drv, err = hdma.Open(dev, dcfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := r.drv.Close(); err != nil {
			t.Errorf("driver close: %v", err)
		}
	})
	for i := range nq {
		sq, cq := ringOffsets(i, entries)
		q, err := r.drv.SetupQueue(hdma.QueueConfig{
			Index: i, Entries: entries,
			SQ: r.mem[sq:], SQIOVA: arenaIOVA + uint64(sq),
			CQ: r.mem[cq:], CQIOVA: arenaIOVA + uint64(cq),
			Interrupts: i == 0,
		})
		if err != nil {
			t.Fatalf("setup queue %d: %v", i, err)
		}
		r.qs = append(r.qs, q)
	}
	if err := r.drv.Enable(); err != nil {
		t.Fatalf("enable: %v", err)
	}
	return r
}

// iova of an arena offset.
func iova(off int) uint64 { return arenaIOVA + uint64(off) }

// submit enqueues descs and rings once.
func (r *rig) submit(q *hdma.Queue, descs ...hdma.Desc) {
	r.t.Helper()
	n, err := q.SubmitBatch(descs)
	if err != nil || n != len(descs) {
		r.t.Fatalf("submit %d: took %d: %v", len(descs), n, err)
	}
}

// reap waits (generously) for n completions.
func (r *rig) reap(q *hdma.Queue, n int) []hdma.Completion {
	r.t.Helper()
	out := make([]hdma.Completion, n)
	got := 0
	deadline := time.Now().Add(20 * time.Second)
	for got < n {
		k := q.Reap(out[got:])
		got += k
		if k == 0 {
			if time.Now().After(deadline) {
				r.t.Fatalf("queue %d: %d of %d completions after 20s", q.Index(), got, n)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}
