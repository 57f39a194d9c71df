package nvme

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/vfio/nvme/spec"

	"github.com/hcomm-go/hcomm/vfio"
)

// Queue is one submission/completion queue pair: the admin pair (ID 0) or
// an I/O pair. Its memory (entries and one PRP list area per command slot)
// lives in the controller's DMA arena.
//
// A Queue is not safe for concurrent use: one goroutine submits, rings,
// reaps and resets (the engine's owner, or a test).
type Queue struct {
	c     *Controller
	id    uint16
	depth int // entries in each ring

	sq, cq         []byte
	sqIOVA, cqIOVA uint64
	sqDB, cqDB     uint64 // doorbell offsets in BAR0
	sqTail, cqHead int
	phase          bool // the phase tag of a new entry at cqHead
	unrung         int  // entries written since the last SQ doorbell

	// One PRP list area per command slot (CID), listPages pages each.
	lists     []byte
	listsIOVA uint64
	listPages int

	slots []slot
	free  []uint16 // free CIDs (a stack)
	busy  int

	// backlog holds the completions collected by a reset (harvested from
	// the ring or made up), delivered first; bhead is the next one.
	backlog []Completion
	bhead   int

	ev     *vfio.EventFD // MSI-X vector's eventfd (nil: polled)
	vector int
}

type slot struct {
	tag    uint64
	start  int64 // nanotime of submission (monotonic, time.Since base)
	opcode uint8
	active bool
}

// Completion is one finished command.
type Completion struct {
	Tag    uint64 // the tag given at submission
	CID    uint16
	Opcode uint8
	Status Status
	Result uint32 // DW0
}

// Err is the completion's error (nil on success).
func (c Completion) Err() error {
	err := StatusErr(c.Status)
	if se, ok := err.(*StatusError); ok {
		se.Opcode, se.CID = c.Opcode, c.CID
	}
	return err
}

// ID is the queue identifier (0 for the admin queue).
func (q *Queue) ID() uint16 { return q.id }

// Depth is the number of entries of each ring; at most Depth()-1 commands
// are outstanding.
func (q *Queue) Depth() int { return q.depth }

// Outstanding is the number of submitted commands not yet reaped.
func (q *Queue) Outstanding() int { return q.busy + len(q.backlog) - q.bhead }

// Free is how many more commands can be submitted now.
func (q *Queue) Free() int { return len(q.free) }

// EventFD is the queue's interrupt eventfd, or nil when it is polled.
func (q *Queue) EventFD() *vfio.EventFD { return q.ev }

// reinit empties the rings and forgets the positions (after a controller
// reset, before the queue is created again).
func (q *Queue) reinit() {
	clear(q.sq)
	clear(q.cq)
	q.sqTail, q.cqHead, q.phase, q.unrung = 0, 0, true, 0
}

var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

// Submit writes cmd into the next submission slot with a fresh CID and
// remembers tag; it does not ring the doorbell (Ring does, once per
// batch). ErrQueueFull when no slot is free.
func (q *Queue) Submit(cmd *spec.Command, tag uint64) (uint16, error) {
	cid, err := q.alloc(cmd.Opcode, tag)
	if err != nil {
		return 0, err
	}
	q.push(cmd, cid)
	return cid, nil
}

func (q *Queue) alloc(opcode uint8, tag uint64) (uint16, error) {
	if q.c.closed.Load() {
		return 0, errControllerClosed
	}
	if len(q.free) == 0 {
		return 0, fmt.Errorf("%w: %d commands outstanding on queue %d", ErrQueueFull, q.busy, q.id)
	}
	cid := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.slots[cid] = slot{tag: tag, start: nanotime(), opcode: opcode, active: true}
	q.busy++
	return cid, nil
}

// release gives a CID back without it having been submitted.
func (q *Queue) release(cid uint16) {
	q.slots[cid].active = false
	q.free = append(q.free, cid)
	q.busy--
}

func (q *Queue) push(cmd *spec.Command, cid uint16) {
	cmd.CID = cid
	cmd.Marshal(q.sq[q.sqTail*spec.SQESize:])
	q.sqTail++
	if q.sqTail == q.depth {
		q.sqTail = 0
	}
	q.unrung++
}

// list returns CID's PRP list area and its IOVA.
func (q *Queue) list(cid uint16) ([]byte, uint64) {
	n := q.listPages * spec.PageSize
	off := int(cid) * n
	return q.lists[off : off+n], q.listsIOVA + uint64(off)
}

// Ring writes the submission queue tail doorbell when entries were
// written since the last time: one MMIO write per batch.
func (q *Queue) Ring() error {
	if q.unrung == 0 {
		return nil
	}
	q.unrung = 0
	// The SQ tail doorbell: Write32's barrier (DMB OSHST on arm64; x86
	// orders stores) makes the commands written by push visible to the
	// controller before it sees the new tail.
	return q.c.bar.Write32(q.sqDB, uint32(q.sqTail))
}

// Reap moves new completions into out (as many as fit), frees their CIDs,
// and writes the completion queue head doorbell once. It never blocks.
func (q *Queue) Reap(out []Completion) (int, error) {
	n := 0
	for n < len(out) && q.bhead < len(q.backlog) {
		out[n] = q.backlog[q.bhead]
		q.bhead++
		n++
	}
	if q.bhead == len(q.backlog) {
		q.backlog, q.bhead = q.backlog[:0], 0
	}
	moved := false
	for n < len(out) {
		e, ok := q.peek()
		if !ok {
			break
		}
		q.advance()
		moved = true
		if int(e.CID) >= len(q.slots) || !q.slots[e.CID].active {
			// A completion for a command this queue does not have
			// outstanding: never delivered twice, logged by the caller
			// through the count of stray entries.
			q.c.stray.Add(1)
			continue
		}
		s := &q.slots[e.CID]
		out[n] = Completion{Tag: s.tag, CID: e.CID, Opcode: s.opcode, Status: e.Status, Result: e.Result}
		q.release(e.CID)
		n++
	}
	if moved {
		// The CQ head doorbell gives the entries back to the controller.
		// Their loads are done: their values went into out (stores that
		// depend on them), and Write32's store barrier orders those
		// stores before the doorbell.
		if err := q.c.bar.Write32(q.cqDB, uint32(q.cqHead)); err != nil {
			return n, fmt.Errorf("nvme: queue %d: completion doorbell: %w", q.id, err)
		}
	}
	return n, nil
}

// peek reads the entry at the head when its phase tag says it is new. The
// phase word is loaded first, atomically, then vfio.DMAReadBarrier (Linux's
// dma_rmb after nvme_cqe_pending: DMB OSHLD on arm64), so the rest of the
// entry is read after the phase as the controller wrote them, never a
// stale CID or status from the ring's previous pass.
func (q *Queue) peek() (spec.CQE, bool) {
	b := q.cq[q.cqHead*spec.CQESize : q.cqHead*spec.CQESize+spec.CQESize]
	dw3 := atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[12])))
	if (dw3>>16&1 != 0) != q.phase {
		return spec.CQE{}, false
	}
	vfio.DMAReadBarrier() // pairs with the controller's write of the entry before its phase
	e := spec.ParseCQE(b)
	e.CID, e.Phase, e.Status = uint16(dw3), true, Status(dw3>>17)
	return e, true
}

func (q *Queue) advance() {
	q.cqHead++
	if q.cqHead == q.depth {
		q.cqHead = 0
		q.phase = !q.phase
	}
}

// Pending reports whether a completion is waiting to be reaped.
func (q *Queue) Pending() bool {
	if q.bhead < len(q.backlog) {
		return true
	}
	_, ok := q.peek()
	return ok
}

// Wait blocks until a completion is pending or ctx ends: on the queue's
// interrupt eventfd when it has one, else by polling the completion queue.
func (q *Queue) Wait(ctx context.Context) error {
	for !q.Pending() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: queue %d: %w", ErrTimeout, q.id, err)
		}
		if q.ev != nil {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			_, err := q.ev.Wait(wctx)
			cancel()
			if err != nil && ctx.Err() == nil && wctx.Err() == nil {
				return err
			}
			continue
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// Expired reports whether a command has been outstanding longer than d.
func (q *Queue) Expired(d time.Duration) bool {
	if q.busy == 0 || d <= 0 {
		return false
	}
	now := nanotime()
	for i := range q.slots {
		if q.slots[i].active && now-q.slots[i].start > int64(d) {
			return true
		}
	}
	return false
}

// failOutstanding completes every command still outstanding with status
// s, into the backlog: each exactly once.
func (q *Queue) failOutstanding(s Status) {
	for cid := range q.slots {
		sl := &q.slots[cid]
		if !sl.active {
			continue
		}
		q.backlog = append(q.backlog, Completion{Tag: sl.tag, CID: uint16(cid), Opcode: sl.opcode, Status: s})
		q.release(uint16(cid))
	}
}

// harvest moves every valid completion still in the ring into the backlog
// (after the controller was disabled: it posts nothing more).
func (q *Queue) harvest() {
	for {
		e, ok := q.peek()
		if !ok {
			return
		}
		q.advance()
		if int(e.CID) >= len(q.slots) || !q.slots[e.CID].active {
			q.c.stray.Add(1)
			continue
		}
		s := &q.slots[e.CID]
		q.backlog = append(q.backlog, Completion{Tag: s.tag, CID: e.CID, Opcode: s.opcode, Status: e.Status, Result: e.Result})
		q.release(e.CID)
	}
}

// Transfer is one read or write between host memory (an IOVA the
// controller can reach: a mapped arena, or the CMB) and the namespace.
type Transfer struct {
	// Opcode is OpRead (namespace → memory), OpWrite (memory → namespace)
	// or OpWriteZeroes (no memory).
	Opcode uint8
	// Offset is the byte offset on the namespace (a multiple of the LBA
	// size).
	Offset uint64
	// IOVA is the memory side's device address (ignored for
	// OpWriteZeroes).
	IOVA uint64
	// Len is the byte count, a multiple of the LBA size, at most
	// Controller.MaxTransfer.
	Len int
	// FUA forces unit access (the data reaches the medium first).
	FUA bool
}

// SubmitTransfer validates t (LBA alignment and range, MDTS, the buffer
// inside the DMA mappings or the CMB), builds its PRPs and submits it.
func (q *Queue) SubmitTransfer(t Transfer, tag uint64) (uint16, error) {
	if err := q.c.validate(t); err != nil {
		return 0, err
	}
	return q.submitTransfer(t, tag)
}

// SubmitTransferUnchecked submits t without the checks on the memory side
// (the namespace side is still built from t): tests use it to show that
// the IOMMU, not the driver, stops a transfer to an unmapped IOVA.
func (q *Queue) SubmitTransferUnchecked(t Transfer, tag uint64) (uint16, error) {
	return q.submitTransfer(t, tag)
}

func (q *Queue) submitTransfer(t Transfer, tag uint64) (uint16, error) {
	ns := q.c.ns
	cmd, err := spec.ReadWrite(t.Opcode, ns.ID, t.Offset/uint64(ns.LBASize), t.Len/ns.LBASize, t.FUA)
	if err != nil {
		return 0, err
	}
	cid, err := q.alloc(t.Opcode, tag)
	if err != nil {
		return 0, err
	}
	if t.Opcode != spec.OpWriteZeroes {
		list, listIOVA := q.list(cid)
		cmd.PRP1, cmd.PRP2, _, err = spec.BuildPRP(t.IOVA, t.Len, list, listIOVA)
		if err != nil {
			q.release(cid)
			return 0, err
		}
	}
	q.push(&cmd, cid)
	return cid, nil
}

// SubmitFlush submits a Flush of the namespace.
func (q *Queue) SubmitFlush(tag uint64) (uint16, error) {
	return q.Submit(&spec.Command{Opcode: spec.OpFlush, NSID: q.c.ns.ID}, tag)
}

// SubmitDeallocate submits a Dataset Management command that deallocates
// (trims) n bytes at offset off of the namespace; ErrNotSupported unless
// the controller offers DSM (ONCS bit 2).
func (q *Queue) SubmitDeallocate(off uint64, n int, tag uint64) (uint16, error) {
	if q.c.ctrl.ONCS&spec.ONCSDSM == 0 {
		return 0, fmt.Errorf("nvme: Dataset Management (ONCS %#x): %w", q.c.ctrl.ONCS, ErrNotSupported)
	}
	if err := q.c.validate(Transfer{Opcode: spec.OpWriteZeroes, Offset: off, Len: n}); err != nil {
		return 0, err
	}
	cid, err := q.alloc(spec.OpDSM, tag)
	if err != nil {
		return 0, err
	}
	// The one range (16 bytes: attributes, length in blocks, start LBA)
	// lives in the command's PRP list area.
	list, listIOVA := q.list(cid)
	lba := uint64(q.c.ns.LBASize)
	clear(list[:16])
	binary.LittleEndian.PutUint32(list[4:], uint32(uint64(n)/lba))
	binary.LittleEndian.PutUint64(list[8:], off/lba)
	q.push(&spec.Command{Opcode: spec.OpDSM, NSID: q.c.ns.ID, PRP1: listIOVA, CDW10: 0, CDW11: 1 << 2}, cid)
	return cid, nil
}
