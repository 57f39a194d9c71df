package hdma

import (
	"fmt"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
)

// RingBytes returns the bytes a queue of entries entries needs for its
// submission ring (entries × model.DescSize) and its completion ring
// (entries × model.CplSize).
func RingBytes(entries int) (sq, cq int) {
	return entries * model.DescSize, entries * model.CplSize
}

// QueueBytes is the memory LayoutQueue needs for a queue of entries
// entries: both rings, each starting on a 4096-byte boundary.
func QueueBytes(entries int) int {
	sq, cq := RingBytes(entries)
	return roundPage(sq) + roundPage(cq)
}

func roundPage(n int) int { return (n + 4095) &^ 4095 }

// LayoutQueue lays out queue index's rings in mem, which the device reaches
// at iova: the submission ring first, the completion ring on the next
// 4096-byte boundary after it. mem must hold QueueBytes(entries) bytes and
// iova must be 4096-byte aligned.
func LayoutQueue(index, entries int, mem []byte, iova uint64, interrupts bool) (QueueConfig, error) {
	sq, cq := RingBytes(entries)
	if entries < 2 || len(mem) < QueueBytes(entries) || iova%4096 != 0 {
		return QueueConfig{}, fmt.Errorf("hdma: lay out queue %d: %d entries need %d bytes at a 4096-aligned IOVA, have %d at %#x: %w",
			index, entries, QueueBytes(entries), len(mem), iova, nested(ErrBadConfig))
	}
	cqOff := roundPage(sq)
	return QueueConfig{
		Index: index, Entries: entries,
		SQ: mem[:sq:sq], SQIOVA: iova,
		CQ: mem[cqOff : cqOff+cq : cqOff+cq], CQIOVA: iova + uint64(cqOff),
		Interrupts: interrupts,
	}, nil
}

// Start is the bring-up every single-queue user of a device writes: open
// the driver on dev, set up queue q (rings already DMA-mapped, e.g. by
// LayoutQueue over mapped memory) and enable the device. On error nothing
// stays open (dev itself is the caller's).
func Start(dev vfio.Device, cfg Config, q QueueConfig) (*Driver, *Queue, error) {
	drv, err := Open(dev, cfg)
	if err != nil {
		return nil, nil, err
	}
	queue, err := drv.SetupQueue(q)
	if err == nil {
		err = drv.Enable()
	}
	if err != nil {
		_ = drv.Close()
		return nil, nil, err
	}
	return drv, queue, nil
}
