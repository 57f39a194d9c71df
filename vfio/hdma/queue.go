package hdma

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/ring"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
)

// Op is a descriptor opcode.
type Op uint8

const (
	OpH2D   Op = model.OpH2D   // host → device: Src IOVA, Dst device-memory offset
	OpD2H   Op = model.OpD2H   // device → host: Src device-memory offset, Dst IOVA
	OpD2D   Op = model.OpD2D   // device → device: Src, Dst device-memory offsets
	OpFence Op = model.OpFence // completes after every earlier descriptor of its queue; Len, Src, Dst zero
)

func (o Op) String() string {
	switch o {
	case OpH2D:
		return "h2d"
	case OpD2H:
		return "d2h"
	case OpD2D:
		return "d2d"
	case OpFence:
		return "fence"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Desc is one transfer to submit.
type Desc struct {
	Op  Op
	Len uint32
	Src uint64
	Dst uint64
	// User is the caller's cookie, returned in the Completion.
	User uint64
	// Interrupt asks for the queue's MSI when this descriptor completes.
	Interrupt bool
}

// Completion is the outcome of one descriptor.
type Completion struct {
	User   uint64 // Desc.User
	Status uint16 // device status (model.StatusOK ...); StatusReset for descriptors failed by recovery
	Len    uint32 // bytes moved
	Err    error  // nil, or a completion error (ErrIOMMUFault ... ErrTimeout)
}

// QueueStats counts what a queue did. Single-owner, like the queue.
type QueueStats struct {
	Submitted   uint64 // descriptors written
	Doorbells   uint64 // SQ_TAIL writes
	Reaped      uint64 // completions taken from the completion ring
	HeadWrites  uint64 // CQ_HEAD writes
	Failed      uint64 // completions synthesized by recovery
	Errors      uint64 // completions with Err != nil (device or recovery)
	UnknownTags uint64 // completion entries whose tag matched no outstanding descriptor
	Timeouts    uint64
}

// slot is the driver's record of one submission-ring entry.
type slot struct {
	user      uint64
	submitted int64 // driver clock when the doorbell published it
	gen       uint32
	busy      bool
	timedOut  bool
}

// Queue is one HDMA queue pair. Its methods belong to one goroutine at a time.
type Queue struct {
	d      *Driver
	bar0   vfio.Region
	idx    int
	sq     []byte
	sqIOVA uint64
	cq     *ring.CompletionRing
	cqIOVA uint64

	entries, mask uint32
	sqTailReg     uint64
	cqHeadReg     uint64

	tail        uint32 // next SQ slot to write
	published   uint32 // tail as last written to SQ_TAIL
	oldest      uint32 // oldest slot that may be busy
	outstanding int    // written, not completed
	slots       []slot

	// headPending counts completion entries consumed but not yet released
	// to the device through CQ_HEAD (released in batches, see Reap).
	headPending int
	headBatch   int

	// Completions made by recovery, handed out by Reap before the ring's.
	failed            []Completion
	failHead, failLen int

	efd int
	irq bool
	st  QueueStats
}

// Index is the queue number.
func (q *Queue) Index() int { return q.idx }

// Entries is the ring size; at most Entries-1 descriptors are outstanding.
func (q *Queue) Entries() int { return int(q.entries) }

// Outstanding is the number of descriptors written and not yet reaped,
// including failed completions waiting in Reap.
func (q *Queue) Outstanding() int { return q.outstanding + q.failLen }

// Free is how many more descriptors Enqueue accepts now.
func (q *Queue) Free() int { return int(q.mask) - q.outstanding - q.failLen }

// room reports whether one more descriptor may be outstanding. The device
// sees a completion-ring entry as free only after CQ_HEAD releases it, so
// entries reaped but not yet released count against the ring too: with
// outstanding + unreleased ≤ Entries-1 the device never finds the completion
// ring full, and a lazy CQ_HEAD can never stall it. When only the unreleased
// entries stand in the way, room releases them (one CQ_HEAD write).
func (q *Queue) room() (bool, error) {
	if q.slots[q.tail].busy {
		return false, nil
	}
	if q.outstanding+q.failLen+q.headPending < int(q.mask) {
		return true, nil
	}
	if q.headPending > 0 && q.outstanding+q.failLen < int(q.mask) {
		if err := q.releaseHead(); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// releaseHead tells the device which completion entries it may reuse. When
// the register write fails (the device was closed under the driver), the
// entries stay counted as unreleased, so room never lets the host run ahead
// of what the device was told; the next Reap or Enqueue tries again.
func (q *Queue) releaseHead() error {
	if err := q.bar0.Write32(q.cqHeadReg, q.cq.Head()); err != nil {
		return fmt.Errorf("hdma: queue %d CQ_HEAD doorbell: %w", q.idx, err)
	}
	q.st.HeadWrites++
	q.headPending = 0
	return nil
}

// Stats returns the queue's counters.
func (q *Queue) Stats() QueueStats { return q.st }

// SetInterrupts switches the queue's MSI on or off (its IRQ register) —
// one register write, no system call, safe beside the queue's owner. Off,
// the device still writes completions (Reap finds them) but signals
// nothing, and an interrupt it would have sent meanwhile is not owed: a
// host that turns it back on and will sleep on EventFD looks at the
// completion ring once more first (the device checks the register after
// it publishes a completion, so any completion the look misses
// interrupts). Enable (and with it Start and Recover) turns it on. The
// queue must have Interrupts.
func (q *Queue) SetInterrupts(on bool) error {
	if q.efd < 0 {
		return fmt.Errorf("hdma: queue %d has no interrupts: %w", q.idx, nested(ErrBadConfig))
	}
	var v uint32
	if on {
		v = model.IRQEnable
	}
	if err := q.bar0.Write32(model.QueueReg(q.idx, model.QIRQ), v); err != nil {
		return fmt.Errorf("hdma: queue %d IRQ register: %w", q.idx, err)
	}
	return nil
}

// EventFD is the eventfd the queue's MSI vector signals, or -1 when the
// queue was set up without interrupts. Read it (8 bytes) directly, through
// WaitInterrupt, or with an io_uring READ.
func (q *Queue) EventFD() int { return q.efd }

// program writes the queue's registers (device disabled).
func (q *Queue) program() error {
	regs := []struct {
		off uint64
		v   uint64
		w64 bool
	}{
		{model.QueueReg(q.idx, model.QSQBase), q.sqIOVA, true},
		{model.QueueReg(q.idx, model.QSQSize), uint64(q.entries), false},
		{model.QueueReg(q.idx, model.QCQBase), q.cqIOVA, true},
		{model.QueueReg(q.idx, model.QCQSize), uint64(q.entries), false},
		{q.sqTailReg, 0, false},
		{q.cqHeadReg, 0, false},
	}
	if q.irq {
		regs = append(regs, struct {
			off uint64
			v   uint64
			w64 bool
		}{model.QueueReg(q.idx, model.QIRQ), model.IRQEnable, false})
	}
	for _, r := range regs {
		var err error
		if r.w64 {
			err = q.bar0.Write64(r.off, r.v)
		} else {
			err = q.bar0.Write32(r.off, uint32(r.v))
		}
		if err != nil {
			return fmt.Errorf("hdma: program queue %d register %#x: %w", q.idx, r.off, err)
		}
	}
	return nil
}

// Enqueue writes one descriptor into the submission ring without telling the
// device; Submit publishes. ErrQueueFull when Entries-1 are outstanding,
// ErrRecoveryNeeded after a device reset until Recover, ErrClosed after the
// driver's Close; the register error when room depends on releasing reaped
// completions (CQ_HEAD) and that write fails.
func (q *Queue) Enqueue(desc Desc) error {
	if b := q.d.blocked.Load(); b != blockNone {
		if b == blockClosed {
			return errDriverClosed
		}
		return ErrRecoveryNeeded
	}
	if ok, err := q.room(); err != nil {
		return err
	} else if !ok {
		return ErrQueueFull
	}
	i := q.tail
	s := &q.slots[i]
	s.busy, s.timedOut, s.user, s.submitted = true, false, desc.User, 0
	s.gen++
	var flags uint8
	if desc.Interrupt {
		flags = model.FlagInterrupt
	}
	// One cache line, written in place; the doorbell store in Submit
	// publishes it to the device.
	b := q.sq[int(i)*model.DescSize : int(i+1)*model.DescSize : int(i+1)*model.DescSize]
	binary.LittleEndian.PutUint64(b[0:], uint64(desc.Op)|uint64(flags)<<8|uint64(desc.Len)<<32)
	binary.LittleEndian.PutUint64(b[model.DescTag:], uint64(s.gen)<<32|uint64(i))
	binary.LittleEndian.PutUint64(b[model.DescSrc:], desc.Src)
	binary.LittleEndian.PutUint64(b[model.DescDst:], desc.Dst)
	clear(b[model.DescReserved:])
	q.tail = (i + 1) & q.mask
	q.outstanding++
	q.st.Submitted++
	return nil
}

// Submit publishes every descriptor enqueued since the last Submit with one
// SQ_TAIL doorbell (none when nothing is pending).
func (q *Queue) Submit() error {
	if q.published == q.tail {
		return nil
	}
	now := q.d.now()
	for i := q.published; i != q.tail; i = (i + 1) & q.mask {
		q.slots[i].submitted = now
	}
	// The doorbell: one 32-bit MMIO store. The descriptors written
	// before it are visible to the device when it sees the new tail:
	// Write32 stores after a DMB OSHST on arm64 (writel's barrier), x86
	// orders stores, and the mock's register store is an atomic release
	// that its worker's atomic load of SQ_TAIL pairs with.
	if err := q.bar0.Write32(q.sqTailReg, q.tail); err != nil {
		return fmt.Errorf("hdma: queue %d doorbell: %w", q.idx, err)
	}
	q.published = q.tail
	q.st.Doorbells++
	return nil
}

// SubmitBatch enqueues as many of descs as fit and publishes them with one
// doorbell. It returns how many were taken; fewer than len(descs) comes with
// ErrQueueFull (or ErrRecoveryNeeded).
func (q *Queue) SubmitBatch(descs []Desc) (int, error) {
	n := 0
	var err error
	for n < len(descs) {
		if err = q.Enqueue(descs[n]); err != nil {
			break
		}
		n++
	}
	if serr := q.Submit(); serr != nil {
		return n, serr
	}
	return n, err
}

// Reap fills out with completions — first those recovery synthesized, then
// ready entries of the completion ring, oldest first — and consumes them.
// The consumed entries go back to the device through CQ_HEAD once a quarter
// of the ring has accumulated (one register write per batch, see room). It
// returns how many it filled; it never blocks and never allocates.
func (q *Queue) Reap(out []Completion) int {
	n := 0
	for n < len(out) && q.failLen > 0 {
		out[n] = q.failed[q.failHead]
		q.failed[q.failHead] = Completion{}
		q.failHead = (q.failHead + 1) % len(q.failed)
		q.failLen--
		n++
	}
	if n == len(out) {
		return n
	}
	b := q.cq.Peek(len(out) - n)
	k := b.Len()
	if k == 0 {
		return n
	}
	// Peek loaded the k entries' phase words (acquire); the entries' other
	// fields are read after the device wrote them, for a DMA writer too:
	// Linux's dma_rmb (DMB OSHLD on arm64) once for the batch.
	vfio.DMAReadBarrier()
	for i := range k {
		if q.complete(b.Entry(i), &out[n]) {
			n++
		}
	}
	// Cannot fail: k entries were peeked.
	_ = q.cq.Release(k)
	q.st.Reaped += uint64(k)
	q.advanceOldest()
	// CQ_HEAD is written once per headBatch entries (a quarter of the
	// ring), not per Reap: busy-polling callers reap a few entries at a
	// time, and each MMIO write costs. Enqueue releases early if the
	// unreleased entries are what keeps it from submitting (room).
	q.headPending += k
	if q.headPending >= q.headBatch {
		// A failed write keeps headPending (see releaseHead); Enqueue
		// reports the error when the release is what it needs.
		_ = q.releaseHead()
	}
	return n
}

// complete turns a completion entry into c and frees its slot; false when
// the tag names no outstanding descriptor (the entry is dropped and counted).
func (q *Queue) complete(e []byte, c *Completion) bool {
	tag := binary.LittleEndian.Uint64(e[model.CplTag:])
	i := uint32(tag) & q.mask
	s := &q.slots[i]
	if uint32(tag) >= q.entries || !s.busy || s.gen != uint32(tag>>32) {
		q.st.UnknownTags++
		return false
	}
	status := binary.LittleEndian.Uint16(e[model.CplStatus:])
	c.User, c.Status = s.user, status
	c.Len = binary.LittleEndian.Uint32(e[model.CplLen:])
	c.Err = StatusErr(status)
	if s.timedOut {
		c.Err = ErrTimeout
	}
	if status == model.StatusReset {
		q.d.blocked.CompareAndSwap(blockNone, blockRecover)
	}
	if c.Err != nil {
		q.st.Errors++
	}
	s.busy, s.timedOut = false, false
	q.outstanding--
	return true
}

// advanceOldest moves the oldest-busy pointer past completed slots.
func (q *Queue) advanceOldest() {
	for q.oldest != q.tail && !q.slots[q.oldest].busy {
		q.oldest = (q.oldest + 1) & q.mask
	}
}

// CheckTimeout reports whether the oldest outstanding descriptor has been
// outstanding longer than Config.Timeout: the device is stalled. It marks
// that descriptor (it will complete with ErrTimeout, exactly once) and
// refuses further submissions until Driver.Recover. Call it from the
// queue's goroutine, e.g. when a wait for completions times out.
func (q *Queue) CheckTimeout() (user uint64, age time.Duration, stalled bool) {
	q.advanceOldest()
	if q.oldest == q.tail {
		return 0, 0, false
	}
	s := &q.slots[q.oldest]
	if !s.busy || s.submitted == 0 {
		return 0, 0, false // enqueued, not yet submitted
	}
	age = time.Duration(q.d.now() - s.submitted)
	if age <= q.d.cfg.Timeout {
		return 0, age, false
	}
	if !s.timedOut {
		s.timedOut = true
		q.st.Timeouts++
	}
	q.d.blocked.CompareAndSwap(blockNone, blockRecover)
	return s.user, age, true
}

// pristine reports whether the queue is in its initial state, where a
// device that was just enabled starts too: nothing written to the ring since
// setup or the last abort, nothing outstanding.
func (q *Queue) pristine() bool {
	return q.tail == 0 && q.published == 0 && q.outstanding == 0 && q.headPending == 0 &&
		q.cq.Head() == 0 && q.cq.Phase() == 1
}

// abort collects what the device completed and fails everything else,
// then returns the queue to its initial state (device reset, disabled).
func (q *Queue) abort() {
	var c Completion
	for {
		b := q.cq.Peek(q.cq.Cap())
		if b.Len() == 0 {
			break
		}
		for i := range b.Len() {
			if q.complete(b.Entry(i), &c) {
				q.pushFailed(c)
			}
		}
		_ = q.cq.Release(b.Len())
		q.st.Reaped += uint64(b.Len())
	}
	for i := q.oldest; i != q.tail; i = (i + 1) & q.mask {
		s := &q.slots[i]
		if !s.busy {
			continue
		}
		c := Completion{User: s.user, Status: model.StatusReset, Err: ErrDeviceReset}
		if s.timedOut {
			c.Err = ErrTimeout
		}
		q.pushFailed(c)
		q.st.Failed++
		q.st.Errors++
		s.busy, s.timedOut = false, false
		q.outstanding--
	}
	// Slots keep their generation counters: a stale tag can never match.
	q.tail, q.published, q.oldest, q.outstanding, q.headPending = 0, 0, 0, 0, 0
	q.cq.Reset()
	clear(q.sq)
}

func (q *Queue) pushFailed(c Completion) {
	q.failed[(q.failHead+q.failLen)%len(q.failed)] = c
	q.failLen++
}

// WaitInterrupt blocks until the queue's MSI eventfd is signalled or timeout
// passes (negative: forever) and returns the eventfd count (interrupts
// since the last read; 0 on timeout). The queue must have Interrupts.
func (q *Queue) WaitInterrupt(timeout time.Duration) (uint64, error) {
	if q.efd < 0 {
		return 0, fmt.Errorf("hdma: queue %d has no interrupts: %w", q.idx, nested(ErrBadConfig))
	}
	var deadline time.Time
	if timeout >= 0 {
		deadline = time.Now().Add(timeout)
	}
	// The eventfd blocks (see SetupQueue): poll first, then read what
	// poll found readable (the queue has one owner, nobody else reads).
	// Each poll waits for what is left of timeout, so a signal (EINTR)
	// does not restart the whole wait, and at most MaxInt32 ms: poll's
	// timeout is a C int, and a longer one would wrap.
	var buf [8]byte
	for {
		ms := -1
		if timeout >= 0 {
			left := time.Until(deadline)
			ms = int(min((max(left, 0)+time.Millisecond-1)/time.Millisecond, math.MaxInt32))
		}
		pfd := [1]unix.PollFd{{Fd: int32(q.efd), Events: unix.POLLIN}}
		k, err := unix.Poll(pfd[:], ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("hdma: queue %d: poll eventfd: %w", q.idx, err)
		}
		if k == 0 {
			if timeout >= 0 && time.Until(deadline) > 0 {
				continue // a wait capped at MaxInt32 ms ended early
			}
			return 0, nil
		}
		n, err := unix.Read(q.efd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != 8 {
			return 0, fmt.Errorf("hdma: queue %d: read eventfd (%d bytes): %w", q.idx, n, err)
		}
		return binary.LittleEndian.Uint64(buf[:]), nil
	}
}
