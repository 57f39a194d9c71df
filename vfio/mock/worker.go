package mock

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
)

// passBudget bounds how many descriptors one queue runs per pass, so queues
// share the worker fairly and host-side calls that take mu wait briefly.
const passBudget = 64

// irqFlushBytes: before moving a descriptor of at least this many bytes the
// device sends the MSI it owes for completions already written. MSIs
// coalesce over completions written back to back (one per pass), but a
// large move takes longer than a real device's interrupt aggregation window
// (tens of microseconds; NVMe's aggregation time is in 100 µs units), so the
// host learns of the earlier completions now, not when the large one ends:
// a pass of 1 MiB copies interrupts as each completes.
const irqFlushBytes = 64 << 10

// run is the device worker (see Device for the threading model).
func (d *Device) run() {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for !d.closed.Load() {
		// Sample the doorbell counter before the pass: a doorbell rung
		// during the pass changes it, and the next loop runs again.
		seen := d.bell.Load()
		progress, next := d.pass()
		if progress {
			continue
		}
		if d.spin(seen) {
			continue
		}
		d.sleeping.Store(true)
		if d.bell.Load() != seen || d.closed.Load() {
			d.sleeping.Store(false)
			continue
		}
		var deadline <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			deadline = timer.C
		}
		d.sleeps.Add(1)
		select {
		case <-d.wake:
		case <-deadline:
		case <-d.stop:
		}
		d.sleeping.Store(false)
	}
	timer.Stop()
}

// runInline does the device's work on the caller's goroutine (Config.Inline)
// until a pass makes no progress.
func (d *Device) runInline() {
	for {
		if progress, _ := d.pass(); !progress {
			return
		}
	}
}

// spin polls the doorbell counter for up to Config.Spin and reports whether
// it changed.
func (d *Device) spin(seen uint64) bool {
	if d.cfg.Spin <= 0 {
		return false
	}
	start := time.Now()
	for i := 1; ; i++ {
		if d.bell.Load() != seen {
			return true
		}
		if i%1024 == 0 {
			if time.Since(start) > d.cfg.Spin || d.closed.Load() {
				return false
			}
			// Two cores are shared with the host side: let it run.
			runtime.Gosched()
		}
	}
}

// pass runs every active queue once. It reports whether any descriptor was
// fetched or completed, and the earliest deadline of a delayed descriptor
// (zero if none).
func (d *Device) pass() (progress bool, next time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for qi := range d.queues {
		if !d.enabled {
			break // a fatal fault or an injected reset stopped the device
		}
		q := &d.queues[qi]
		if !q.active {
			continue
		}
		p, n := d.runQueue(qi, q)
		progress = progress || p
		if !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
		if q.irqPending {
			q.irqPending = false
			if d.qreg(qi, model.QIRQ).Load()&model.IRQEnable != 0 {
				d.raiseMSILocked(qi)
			}
		}
	}
	return progress, next
}

// runQueue processes up to passBudget descriptors of queue qi, in order.
func (d *Device) runQueue(qi int, q *queue) (progress bool, next time.Time) {
	for range passBudget {
		if q.held {
			if q.heldStall {
				return progress, next
			}
			if time.Now().Before(q.heldReady) {
				return progress, q.heldReady
			}
			if ok, _ := d.cqRoomLocked(qi, q); !ok {
				return progress, next
			}
			q.held = false
			d.flushIRQLocked(qi, q, &q.heldDesc)
			status, n := d.execute(&q.heldDesc, q.heldRZ)
			if !d.completeLocked(qi, q, &q.heldDesc, status, n) {
				return true, next
			}
			d.timeCompletionLocked(q.heldPub, q.heldLate)
			progress = true
			continue
		}
		tail := d.qreg(qi, model.QSQTail).Load() // acquires the descriptors
		if tail >= q.sqSize {
			d.fatalLocked("SQ_TAIL doorbell beyond the ring", uint64(tail), false)
			return true, next
		}
		d.notePublishedLocked(qi, q, tail)
		if q.sqHead == tail {
			return progress, next
		}
		ok, fatal := d.cqRoomLocked(qi, q)
		if fatal {
			return true, next
		}
		if !ok {
			d.ctr.cqFull++
			return progress, next
		}
		var desc model.Descriptor
		rz, ok := d.fetchLocked(q, q.sqHead, &desc)
		if !ok {
			return true, next
		}
		pub := q.publishedAt(q.sqHead)
		q.sqHead = (q.sqHead + 1) & (q.sqSize - 1)
		q.seq++
		d.ctr.descriptors++
		d.qctr[qi].descriptors++
		progress = true

		status, n := uint16(0), uint32(0)
		if r := d.matchFaultLocked(qi, &desc); r != nil {
			d.logInjectionLocked(r.Kind, qi, desc.Tag, q.seq)
			switch r.Kind {
			case FaultError:
				d.ctr.injErrors++
				if !d.completeLocked(qi, q, &desc, r.Status, 0) {
					return true, next
				}
				d.timeCompletionLocked(pub, 0)
				continue
			case FaultLatency:
				d.ctr.injLatency++
				q.held, q.heldStall, q.heldRZ, q.heldDesc = true, false, rz, desc
				q.heldPub, q.heldLate = pub, r.Latency
				q.heldReady = time.Now().Add(r.Latency)
				continue
			case FaultStall:
				d.ctr.injStalls++
				q.held, q.heldStall, q.heldRZ, q.heldDesc = true, true, rz, desc
				return true, next
			case FaultReset:
				d.ctr.injResets++
				q.held, q.heldStall, q.heldRZ, q.heldDesc = true, false, rz, desc
				q.heldPub, q.heldLate = pub, 0
				d.log.Warn("injected device reset", "queue", qi, "tag", desc.Tag)
				d.resetLocked(true)
				return true, next
			}
		}
		d.flushIRQLocked(qi, q, &desc)
		status, n = d.execute(&desc, rz)
		if !d.completeLocked(qi, q, &desc, status, n) {
			return true, next
		}
		d.timeCompletionLocked(pub, 0)
	}
	return progress, next
}

// clock is the device's monotonic clock in nanoseconds, never 0.
func (d *Device) clock() int64 { return int64(time.Since(d.epoch)) + 1 }

// notePublishedLocked gives the entries of queue qi that SQ_TAIL = tail
// publishes, and the worker had not yet seen, their publication time
// (Config.LateAfter). That is the first doorbell since the worker last
// looked; when a doorbell found that time already set (the worker had not
// taken it yet), its entries are as old as the previous time at most, so
// that one stands for them: a descriptor's age is never underestimated.
func (d *Device) notePublishedLocked(qi int, q *queue, tail uint32) {
	if q.pubAt == nil || tail == q.seenTail || tail >= q.sqSize {
		return
	}
	at := d.qctr[qi].bellSince.Swap(0)
	if at == 0 {
		at = q.lastPub
	}
	if at == 0 {
		at = d.clock()
	}
	for i := q.seenTail; i != tail; i = (i + 1) & (q.sqSize - 1) {
		q.pubAt[i] = at
	}
	q.seenTail, q.lastPub = tail, at
}

// publishedAt is when entry i was published; 0 when not timed.
func (q *queue) publishedAt(i uint32) int64 {
	if q.pubAt == nil {
		return 0
	}
	return q.pubAt[i]
}

// timeCompletionLocked counts a descriptor published at pub (0: not timed)
// that just completed as late when it took longer than Config.LateAfter
// beyond its excused (injected) latency.
func (d *Device) timeCompletionLocked(pub int64, excused time.Duration) {
	if pub == 0 {
		return
	}
	if time.Duration(d.clock()-pub)-excused > d.cfg.LateAfter {
		d.ctr.late++
	}
}

// flushIRQLocked raises queue qi's owed MSI before desc runs if desc is
// large (irqFlushBytes).
func (d *Device) flushIRQLocked(qi int, q *queue, desc *model.Descriptor) {
	if q.irqPending && desc.Len >= irqFlushBytes && d.qreg(qi, model.QIRQ).Load()&model.IRQEnable != 0 {
		q.irqPending = false
		d.raiseMSILocked(qi)
	}
}

// cqRoomLocked reports whether queue qi's completion ring has a free entry
// (the host's CQ_HEAD is not the entry after the tail: NVMe's full rule, so
// a ring of n entries holds n-1 unreleased completions). A CQ_HEAD beyond
// the ring is a fatal fault.
func (d *Device) cqRoomLocked(qi int, q *queue) (ok, fatal bool) {
	head := d.qreg(qi, model.QCQHead).Load() // acquires the host's release
	if head >= q.cqSize {
		d.fatalLocked("CQ_HEAD doorbell beyond the ring", uint64(head), false)
		return false, true
	}
	return (q.cqTail+1)&(q.cqSize-1) != head, false
}

// fetchLocked reads submission entry idx of q through the IOMMU. A fault is
// fatal: the device cannot even name the descriptor it failed to read.
func (d *Device) fetchLocked(q *queue, idx uint32, desc *model.Descriptor) (reservedZero, ok bool) {
	iova := q.sqBase + uint64(idx)*model.DescSize
	b, fault, ok := d.iommu.slice(iova, model.DescSize, vfio.DMARead)
	if !ok {
		d.ctr.iommuFaults++
		d.fatalLocked("IOMMU fault fetching a descriptor", fault, true)
		return false, false
	}
	return desc.Decode(b), true
}

// execute validates desc and moves its data. Checks, in order (docs/hdma.md):
// bad descriptor (3), device-memory bounds (2), IOMMU translation with the
// needed permission (1). Nothing moves unless every check passes, so a
// refused descriptor reads and writes nothing; len is 0 on any error.
func (d *Device) execute(desc *model.Descriptor, reservedZero bool) (status uint16, n uint32) {
	if !reservedZero || desc.Rsvd != 0 || desc.Flags&^model.FlagsKnown != 0 {
		d.ctr.badDescriptors++
		return model.StatusBadDesc, 0
	}
	l := uint64(desc.Len)
	switch desc.Opcode {
	case model.OpFence:
		if desc.Len != 0 || desc.Src != 0 || desc.Dst != 0 {
			d.ctr.badDescriptors++
			return model.StatusBadDesc, 0
		}
		d.ctr.fences++
		return model.StatusOK, 0
	case model.OpH2D, model.OpD2H, model.OpD2D:
	default:
		d.ctr.badDescriptors++
		return model.StatusBadDesc, 0
	}
	if l == 0 || l > d.maxLen || desc.Src+l < desc.Src || desc.Dst+l < desc.Dst {
		d.ctr.badDescriptors++
		return model.StatusBadDesc, 0
	}
	size := uint64(len(d.devmem))
	inDev := func(off uint64) bool { return off <= size && l <= size-off }
	switch desc.Opcode {
	case model.OpH2D:
		if !inDev(desc.Dst) {
			d.ctr.devMemFaults++
			return model.StatusDevMemBound, 0
		}
		if fault, ok := d.iommu.check(desc.Src, l, vfio.DMARead); !ok {
			return d.iommuFaultLocked(fault)
		}
		d.iommu.read(d.devmem[desc.Dst:desc.Dst+l], desc.Src)
		d.ctr.bytesH2D += l
	case model.OpD2H:
		if !inDev(desc.Src) {
			d.ctr.devMemFaults++
			return model.StatusDevMemBound, 0
		}
		if fault, ok := d.iommu.check(desc.Dst, l, vfio.DMAWrite); !ok {
			return d.iommuFaultLocked(fault)
		}
		d.iommu.write(desc.Dst, d.devmem[desc.Src:desc.Src+l])
		d.ctr.bytesD2H += l
	case model.OpD2D:
		if !inDev(desc.Src) || !inDev(desc.Dst) {
			d.ctr.devMemFaults++
			return model.StatusDevMemBound, 0
		}
		copy(d.devmem[desc.Dst:desc.Dst+l], d.devmem[desc.Src:desc.Src+l]) // memmove: overlap is fine
		d.ctr.bytesD2D += l
	}
	return model.StatusOK, desc.Len
}

func (d *Device) iommuFaultLocked(addr uint64) (uint16, uint32) {
	d.ctr.iommuFaults++
	d.faultAddr.Store(addr)
	return model.StatusIOMMUFault, 0
}

// completeLocked writes desc's completion entry. The caller has checked that
// the ring has room. A fault writing the entry is fatal (false).
func (d *Device) completeLocked(qi int, q *queue, desc *model.Descriptor, status uint16, n uint32) bool {
	iova := q.cqBase + uint64(q.cqTail)*model.CplSize
	b, fault, ok := d.iommu.slice(iova, model.CplSize, vfio.DMAWrite)
	if !ok {
		d.ctr.iommuFaults++
		d.fatalLocked("IOMMU fault writing a completion", fault, true)
		return false
	}
	binary.LittleEndian.PutUint64(b[model.CplTag:], desc.Tag)
	binary.LittleEndian.PutUint32(b[model.CplLen:], n)
	// The status and phase half-words share one aligned 32-bit word
	// (offsets 8..11); storing it atomically, last, publishes the entry:
	// a host that loads it atomically and sees the new phase also sees
	// tag and len (and the data the descriptor moved). Little-endian.
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[model.CplStatus])), uint32(status)|q.phase<<16)
	q.cqTail = (q.cqTail + 1) & (q.cqSize - 1)
	if q.cqTail == 0 {
		q.phase ^= 1
	}
	if int(status) < len(d.ctr.completions) {
		d.ctr.completions[status]++
	} else {
		d.ctr.completions[len(d.ctr.completions)-1]++
	}
	d.qctr[qi].completions++
	if status != model.StatusOK || desc.Flags&model.FlagInterrupt != 0 {
		q.irqPending = true
	}
	return true
}

// enableLocked latches and validates the queue registers, then starts
// processing. An invalid queue configuration is a fatal fault.
func (d *Device) enableLocked() {
	maxEntries := uint32(1) << d.cfg.MaxQueueEntriesLog2
	valid := func(base uint64, size uint32, entry uint64) bool {
		return size >= 2 && size <= maxEntries && size&(size-1) == 0 &&
			base%model.DescSize == 0 && base+uint64(size)*entry > base
	}
	for qi := range d.queues {
		rd64 := func(reg uint64) uint64 {
			return uint64(d.qreg(qi, reg).Load()) | uint64(d.qreg(qi, reg+4).Load())<<32
		}
		q := queue{
			sqBase: rd64(model.QSQBase), sqSize: d.qreg(qi, model.QSQSize).Load(),
			cqBase: rd64(model.QCQBase), cqSize: d.qreg(qi, model.QCQSize).Load(),
			phase: 1,
		}
		if q.sqSize == 0 && q.cqSize == 0 {
			d.queues[qi] = queue{}
			continue
		}
		if !valid(q.sqBase, q.sqSize, model.DescSize) || !valid(q.cqBase, q.cqSize, model.CplSize) {
			d.log.Warn("invalid queue configuration at enable", "queue", qi,
				"sq_base", q.sqBase, "sq_size", q.sqSize, "cq_base", q.cqBase, "cq_size", q.cqSize)
			for i := range d.queues {
				d.queues[i] = queue{}
			}
			d.fatalLocked("invalid queue configuration", 0, false)
			return
		}
		q.active = true
		if d.cfg.LateAfter > 0 {
			q.pubAt = make([]int64, q.sqSize)
		}
		d.queues[qi] = q
	}
	d.enabled = true
	d.regs[model.RegControl/4].Store(model.ControlEnable)
	d.regs[model.RegStatus/4].Store(model.StatusReady)
	d.ring() // the host may have rung doorbells before enabling
}

// fatalLocked halts the device: STATUS.fatal set, ready clear, nothing
// processed until a reset. Every queue with interrupts enabled gets an MSI so
// a waiting host notices.
func (d *Device) fatalLocked(why string, addr uint64, setAddr bool) {
	d.ctr.fatal++
	if setAddr {
		d.faultAddr.Store(addr)
	}
	d.log.Warn("device halted on a fatal fault", "why", why, "addr", addr)
	d.enabled = false
	d.regs[model.RegStatus/4].Store(model.StatusFatal)
	for qi := range d.queues {
		if d.queues[qi].active && d.qreg(qi, model.QIRQ).Load()&model.IRQEnable != 0 {
			d.raiseMSILocked(qi)
		}
	}
}

// resetLocked resets the device. An orderly reset (CONTROL.reset, disable,
// injected reset) first completes every descriptor submitted and not
// completed with StatusReset — the held one, then those between the device's
// SQ head and SQ_TAIL — as far as each completion ring has room and the
// IOMMU allows, and raises the queue's MSI. A function-level reset
// (Device.Reset) writes nothing. Either way the registers return to reset
// values; DMA mappings, MSI routing and fault rules stay.
func (d *Device) resetLocked(orderly bool) {
	d.ctr.resets++
	orderly = orderly && d.regs[model.RegStatus/4].Load()&model.StatusFatal == 0
	// Not ready before the first status-4 completion is visible: a host
	// that reaps one and reads STATUS sees the reset.
	d.enabled = false
	d.regs[model.RegControl/4].Store(0)
	d.regs[model.RegStatus/4].Store(0)
	if orderly {
		for qi := range d.queues {
			q := &d.queues[qi]
			if !q.active {
				continue
			}
			// What waited behind an injected stall is excused its wait.
			stalled := q.held && q.heldStall
			wrote := false
			if q.held {
				if ok, _ := d.cqRoomLocked(qi, q); ok {
					wrote = d.completeLocked(qi, q, &q.heldDesc, model.StatusReset, 0)
					if wrote && !stalled {
						d.timeCompletionLocked(q.heldPub, q.heldLate)
					}
				}
			}
			tail := d.qreg(qi, model.QSQTail).Load()
			d.notePublishedLocked(qi, q, tail)
			for tail < q.sqSize && q.sqHead != tail {
				ok, _ := d.cqRoomLocked(qi, q)
				if !ok {
					break
				}
				var desc model.Descriptor
				if _, ok := d.fetchLocked(q, q.sqHead, &desc); !ok {
					break
				}
				pub := q.publishedAt(q.sqHead)
				q.sqHead = (q.sqHead + 1) & (q.sqSize - 1)
				if !d.completeLocked(qi, q, &desc, model.StatusReset, 0) {
					break
				}
				if !stalled {
					d.timeCompletionLocked(pub, 0)
				}
				wrote = true
			}
			if wrote && d.qreg(qi, model.QIRQ).Load()&model.IRQEnable != 0 {
				d.raiseMSILocked(qi)
			}
		}
	}
	for qi := range d.queues {
		d.queues[qi] = queue{}
		for off := uint64(0); off < model.QueueStride; off += 4 {
			d.qreg(qi, off).Store(0)
		}
		d.qctr[qi].bellSince.Store(0)
	}
	d.enabled = false
	d.regs[model.RegControl/4].Store(0)
	d.regs[model.RegStatus/4].Store(0)
	d.faultAddr.Store(0)
}

// matchFaultLocked runs the fault rules against a fetched descriptor and
// returns the rule that fires, if any. Every matching rule counts the
// descriptor; the earliest-injected rule that fires applies (others that
// fire on the same descriptor are spent without effect).
func (d *Device) matchFaultLocked(qi int, desc *model.Descriptor) *rule {
	var fired *rule
	for _, r := range d.rules {
		if r.done || (r.Queues != 0 && r.Queues&(1<<uint(qi)) == 0) || (r.Opcode != 0 && r.Opcode != desc.Opcode) {
			continue
		}
		r.matched++
		fire := false
		if r.Nth != 0 {
			fire = r.matched == r.Nth
			r.done = fire
		} else {
			fire = d.rng.Float64() < r.Rate
		}
		if fire && fired == nil {
			fired = r
		}
	}
	return fired
}

func (d *Device) logInjectionLocked(k FaultKind, qi int, tag, seq uint64) {
	d.injLog[d.injN%injectionLogSize] = Injection{Kind: k, Queue: qi, Tag: tag, Seq: seq}
	d.injN++
}
