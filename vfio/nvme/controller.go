package nvme

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hcomm-go/hcomm/vfio/nvme/spec"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
)

// Config configures a Controller.
type Config struct {
	// DMA is the device's DMA space (required). The driver maps its own
	// arena (queues, PRP lists, identify buffers) there; the caller maps
	// the arenas that hold data buffers there too and passes their IOVAs.
	DMA *vfio.DMASpace
	// NSID is the namespace to use (default 1).
	NSID uint32
	// IOQueues is the number of I/O queue pairs (default 1).
	IOQueues int
	// QueueDepth is the number of entries of each I/O ring (default 64,
	// capped by CAP.MQES); at most QueueDepth-1 commands are outstanding
	// per queue.
	QueueDepth int
	// Interrupts routes one MSI-X vector per queue to an eventfd
	// (Queue.EventFD), which Queue.Wait sleeps on; otherwise the queues
	// are polled and the controller raises no interrupt for them.
	Interrupts bool
	// MaxTransfer caps the bytes per command below the controller's MDTS
	// (default and upper limit 2 MiB); it sizes the PRP list areas.
	MaxTransfer int
	// AdminTimeout bounds each admin command (default 10 s).
	AdminTimeout time.Duration
}

// Controller is one NVMe controller driven from user space over a
// vfio.Device.
type Controller struct {
	dev vfio.Device
	bar vfio.Region
	dma *vfio.DMASpace
	cfg Config

	cap     spec.Cap
	vs      spec.Version
	readyTO time.Duration
	ctrl    spec.IdentifyController
	ns      spec.Namespace
	maxXfer int

	arena     *hugepage.Arena
	base      uint64 // the arena's IOVA
	ident     []byte // one page for identify data
	identIOVA uint64

	adminMu sync.Mutex
	admin   *Queue
	io      []*Queue
	evs     []*vfio.EventFD // per vector (0: admin)

	cmb *CMB

	resets atomic.Uint64
	stray  atomic.Uint64
	closed atomic.Bool
}

// Open resets and enables the controller behind dev, identifies it and its
// namespace, and creates the I/O queue pairs. On error everything it set up
// is undone (dev stays open: it is the caller's).
func Open(dev vfio.Device, cfg Config) (_ *Controller, err error) {
	if cfg.DMA == nil {
		return nil, fmt.Errorf("nvme: Config.DMA is required")
	}
	if cfg.NSID == 0 {
		cfg.NSID = 1
	}
	if cfg.IOQueues <= 0 {
		cfg.IOQueues = 1
	}
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = 64
	}
	if cfg.MaxTransfer <= 0 || cfg.MaxTransfer > 2<<20 {
		cfg.MaxTransfer = 2 << 20
	}
	if cfg.AdminTimeout <= 0 {
		cfg.AdminTimeout = 10 * time.Second
	}
	bar, err := dev.Region(vfio.RegionBAR0)
	if err != nil {
		return nil, fmt.Errorf("nvme: BAR0: %w", err)
	}
	c := &Controller{dev: dev, bar: bar, dma: cfg.DMA, cfg: cfg}
	cp, err := bar.Read64(spec.RegCAP)
	if err != nil {
		return nil, fmt.Errorf("nvme: read CAP: %w", err)
	}
	c.cap = spec.Cap(cp)
	vs, err := bar.Read32(spec.RegVS)
	if err != nil {
		return nil, fmt.Errorf("nvme: read VS: %w", err)
	}
	c.vs = spec.Version(vs)
	if cp == ^uint64(0) || !c.cap.NVMCommandSet() || c.cap.MPSMin() > spec.PageSize {
		return nil, fmt.Errorf("%w: CAP %#x (NVM command set %v, minimum page %d bytes)", ErrNotNVMe, cp, c.cap.NVMCommandSet(), c.cap.MPSMin())
	}
	c.readyTO = time.Duration(max(c.cap.TimeoutUnits(), 1)) * 500 * time.Millisecond
	if cfg.QueueDepth > c.cap.MQES() {
		c.cfg.QueueDepth = c.cap.MQES()
	}
	if c.cfg.QueueDepth < 2 {
		return nil, fmt.Errorf("%w: queue depth %d", ErrBadTransfer, c.cfg.QueueDepth)
	}
	if err := vfio.EnableBusMaster(dev); err != nil {
		return nil, fmt.Errorf("nvme: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.disable(), c.teardown())
		}
	}()
	if err := c.allocMemory(); err != nil {
		return nil, err
	}
	if cfg.Interrupts {
		if err := c.setupInterrupts(); err != nil {
			return nil, err
		}
	}
	if err := c.enable(); err != nil {
		return nil, err
	}
	if err := c.identify(); err != nil {
		return nil, err
	}
	if err := c.setQueueCount(); err != nil {
		return nil, err
	}
	for _, q := range c.io {
		if err := c.createQueue(q); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// allocMemory maps one arena for the admin pair, the identify page and
// every I/O pair with its PRP list areas.
func (c *Controller) allocMemory() error {
	listPages := spec.PRPListPages(spec.PageSize-4, c.cfg.MaxTransfer) // worst case: an unaligned start
	listPages = max(listPages, 1)                                      // DSM ranges live there too
	const adminDepth = 32
	ioDepth := c.cfg.QueueDepth
	qbytes := func(depth int) int {
		return roundUp(depth*spec.SQESize, spec.PageSize) + roundUp(depth*spec.CQESize, spec.PageSize) + depth*listPages*spec.PageSize
	}
	size := spec.PageSize + qbytes(adminDepth) + c.cfg.IOQueues*qbytes(ioDepth)
	a, err := hugepage.NewArena(hugepage.ArenaConfig{Size: size, Populate: true})
	if err != nil {
		return fmt.Errorf("nvme: queue memory (%d bytes): %w", size, err)
	}
	c.arena = a
	base, err := c.dma.MapArena(a, vfio.DMAReadWrite)
	if err != nil {
		return fmt.Errorf("nvme: map queue memory: %w", err)
	}
	c.base = base
	mem := a.Bytes()
	off := 0
	take := func(n int) ([]byte, uint64) {
		b, iova := mem[off:off+n:off+n], base+uint64(off)
		off += n
		return b, iova
	}
	c.ident, c.identIOVA = take(spec.PageSize)
	stride := 4 << c.cap.DSTRD()
	newQ := func(id uint16, depth int) *Queue {
		q := &Queue{c: c, id: id, depth: depth, listPages: listPages, phase: true, vector: int(id)}
		q.sq, q.sqIOVA = take(roundUp(depth*spec.SQESize, spec.PageSize))
		q.cq, q.cqIOVA = take(roundUp(depth*spec.CQESize, spec.PageSize))
		q.lists, q.listsIOVA = take(depth * listPages * spec.PageSize)
		q.sqDB = spec.RegDoorbel + uint64(2*int(id)*stride)
		q.cqDB = spec.RegDoorbel + uint64((2*int(id)+1)*stride)
		q.slots = make([]slot, depth)
		q.free = make([]uint16, 0, depth)
		for cid := depth - 2; cid >= 0; cid-- { // depth-1 commands: the SQ never overflows
			q.free = append(q.free, uint16(cid))
		}
		q.backlog = make([]Completion, 0, depth)
		return q
	}
	c.admin = newQ(0, adminDepth)
	for i := 1; i <= c.cfg.IOQueues; i++ {
		c.io = append(c.io, newQ(uint16(i), ioDepth))
	}
	return nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// setupInterrupts routes MSI-X vectors 0 (admin) .. IOQueues to eventfds,
// all in one VFIO_DEVICE_SET_IRQS (the kernel sizes the MSI-X allocation
// by the first enable).
func (c *Controller) setupInterrupts() error {
	n := c.cfg.IOQueues + 1
	if got := c.dev.IRQCount(vfio.IRQMSIX); got < n {
		return fmt.Errorf("nvme: %d MSI-X vectors needed, the device has %d: %w", n, got, vfio.ErrNoIRQ)
	}
	fds := make([]int, n)
	for i := range n {
		ev, err := vfio.NewEventFD()
		if err != nil {
			return fmt.Errorf("nvme: %w", err)
		}
		c.evs = append(c.evs, ev)
		fds[i] = ev.Fd()
	}
	if err := c.dev.SetIRQs(vfio.IRQMSIX, 0, fds); err != nil {
		return fmt.Errorf("nvme: route MSI-X to eventfds: %w", err)
	}
	c.admin.ev = c.evs[0]
	for i, q := range c.io {
		q.ev = c.evs[i+1]
	}
	return nil
}

// waitReady polls CSTS until RDY equals want, within CAP.TO.
func (c *Controller) waitReady(want bool) error {
	deadline := time.Now().Add(c.readyTO)
	for {
		st, err := c.bar.Read32(spec.RegCSTS)
		if err != nil {
			return fmt.Errorf("nvme: read CSTS: %w", err)
		}
		if st == ^uint32(0) {
			return fmt.Errorf("%w: CSTS reads all ones (device gone?)", ErrFatal)
		}
		if st&spec.CSTSFatal != 0 && want {
			return fmt.Errorf("%w: CSTS %#x", ErrFatal, st)
		}
		if (st&spec.CSTSReady != 0) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: CSTS %#x, waiting for RDY=%v for %v", ErrNotReady, st, want, c.readyTO)
		}
		time.Sleep(time.Millisecond)
	}
}

// disable clears CC.EN and waits for CSTS.RDY to clear: the controller
// deletes every I/O queue and posts nothing more.
func (c *Controller) disable() error {
	cc, err := c.bar.Read32(spec.RegCC)
	if err != nil {
		return fmt.Errorf("nvme: read CC: %w", err)
	}
	if cc&spec.CCEnable != 0 {
		if err := c.bar.Write32(spec.RegCC, cc&^spec.CCEnable); err != nil {
			return fmt.Errorf("nvme: write CC: %w", err)
		}
	}
	return c.waitReady(false)
}

// enable resets the controller (CC.EN 1→0), programs the admin queue and
// sets CC.EN with 4 KiB pages and 64/16-byte entries.
func (c *Controller) enable() error {
	if err := c.disable(); err != nil {
		return err
	}
	a := c.admin
	a.reinit()
	aqa := uint32(a.depth-1) | uint32(a.depth-1)<<16
	for _, w := range []struct {
		off uint64
		v   uint64
		w64 bool
	}{{spec.RegAQA, uint64(aqa), false}, {spec.RegASQ, a.sqIOVA, true}, {spec.RegACQ, a.cqIOVA, true}} {
		var err error
		if w.w64 {
			err = c.bar.Write64(w.off, w.v)
		} else {
			err = c.bar.Write32(w.off, uint32(w.v))
		}
		if err != nil {
			return fmt.Errorf("nvme: program the admin queue: %w", err)
		}
	}
	if err := c.bar.Write32(spec.RegCC, spec.CCEnable|spec.CCIOSQES|spec.CCIOCQES); err != nil {
		return fmt.Errorf("nvme: write CC: %w", err)
	}
	return c.waitReady(true)
}

// AdminCommand runs one admin command to completion and returns DW0 of its
// completion. Admin commands serialise.
func (c *Controller) AdminCommand(ctx context.Context, cmd spec.Command) (uint32, error) {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	return c.adminLocked(ctx, cmd)
}

func (c *Controller) adminLocked(ctx context.Context, cmd spec.Command) (uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AdminTimeout)
	defer cancel()
	q := c.admin
	cid, err := q.Submit(&cmd, 0)
	if err != nil {
		return 0, err
	}
	if err := q.Ring(); err != nil {
		return 0, fmt.Errorf("nvme: admin doorbell: %w", err)
	}
	var out [1]Completion
	for {
		if err := q.Wait(ctx); err != nil {
			// The command stays outstanding (its CID busy) until a reset
			// clears the admin queue.
			return 0, fmt.Errorf("nvme: admin opcode %#x (CID %d): %w", cmd.Opcode, cid, err)
		}
		n, err := q.Reap(out[:])
		if err != nil {
			return 0, err
		}
		if n == 1 && out[0].CID == cid {
			if err := out[0].Err(); err != nil {
				return out[0].Result, fmt.Errorf("nvme: admin opcode %#x: %w", cmd.Opcode, err)
			}
			return out[0].Result, nil
		}
	}
}

func (c *Controller) identify() error {
	ctx := context.Background()
	if _, err := c.adminLocked(ctx, spec.Command{Opcode: spec.AdminIdentify, PRP1: c.identIOVA, CDW10: spec.CNSController}); err != nil {
		return fmt.Errorf("nvme: identify controller: %w", err)
	}
	ic, err := spec.ParseIdentifyController(c.ident)
	if err != nil {
		return err
	}
	c.ctrl = ic
	if _, err := c.adminLocked(ctx, spec.Command{Opcode: spec.AdminIdentify, NSID: c.cfg.NSID, PRP1: c.identIOVA, CDW10: spec.CNSNamespace}); err != nil {
		return fmt.Errorf("nvme: identify namespace %d: %w", c.cfg.NSID, err)
	}
	ns, err := spec.ParseIdentifyNamespace(c.cfg.NSID, c.ident)
	if err != nil {
		return err
	}
	c.ns = ns
	c.maxXfer = c.cfg.MaxTransfer
	if ic.MDTS != 0 && ic.MDTS < 32 {
		c.maxXfer = min(c.maxXfer, c.cap.MPSMin()<<ic.MDTS)
	}
	c.maxXfer = c.maxXfer / ns.LBASize * ns.LBASize
	if c.maxXfer == 0 {
		return fmt.Errorf("%w: MDTS %d allows less than one %d-byte block", ErrNotNVMe, ic.MDTS, ns.LBASize)
	}
	return nil
}

func (c *Controller) setQueueCount() error {
	n := uint32(c.cfg.IOQueues - 1)
	res, err := c.adminLocked(context.Background(), spec.Command{Opcode: spec.AdminSetFeatures, CDW10: spec.FeatureNumQueues, CDW11: n | n<<16})
	if err != nil {
		return fmt.Errorf("nvme: set number of queues to %d: %w", c.cfg.IOQueues, err)
	}
	if nsq, ncq := int(res&0xffff)+1, int(res>>16)+1; nsq < c.cfg.IOQueues || ncq < c.cfg.IOQueues {
		return fmt.Errorf("nvme: %d I/O queue pairs asked, the controller grants %d SQs and %d CQs: %w", c.cfg.IOQueues, nsq, ncq, ErrNotSupported)
	}
	return nil
}

func (c *Controller) createQueue(q *Queue) error {
	q.reinit()
	ctx := context.Background()
	// A polled queue names vector 0: a controller checks the vector even
	// with interrupts off (QEMU does, against the MSI-X vectors enabled).
	iv := uint16(0)
	if q.ev != nil {
		iv = uint16(q.vector)
	}
	if _, err := c.adminLocked(ctx, spec.CreateCQ(q.id, q.depth, q.cqIOVA, q.ev != nil, iv)); err != nil {
		return fmt.Errorf("nvme: create I/O completion queue %d: %w", q.id, err)
	}
	if _, err := c.adminLocked(ctx, spec.CreateSQ(q.id, q.depth, q.sqIOVA, q.id)); err != nil {
		return fmt.Errorf("nvme: create I/O submission queue %d: %w", q.id, err)
	}
	return nil
}

// Queue returns I/O queue pair i (0-based; its queue ID is i+1).
func (c *Controller) Queue(i int) *Queue { return c.io[i] }

// Queues is the number of I/O queue pairs.
func (c *Controller) Queues() int { return len(c.io) }

// Cap, Version, Identify and Namespace describe the controller.
func (c *Controller) Cap() spec.Cap                     { return c.cap }
func (c *Controller) Version() spec.Version             { return c.vs }
func (c *Controller) Identify() spec.IdentifyController { return c.ctrl }
func (c *Controller) Namespace() spec.Namespace         { return c.ns }

// MaxTransfer is the most bytes one command moves: MDTS, capped by
// Config.MaxTransfer, rounded down to whole blocks.
func (c *Controller) MaxTransfer() int { return c.maxXfer }

// ReadyTimeout is CAP.TO as a duration.
func (c *Controller) ReadyTimeout() time.Duration { return c.readyTO }

// Resets counts controller resets (Reset) since Open.
func (c *Controller) Resets() uint64 { return c.resets.Load() }

// Stray counts completions for commands that were not outstanding (none on
// a healthy controller).
func (c *Controller) Stray() uint64 { return c.stray.Load() }

// QueueMemory is the IOVA range of the driver's own memory (queues, PRP
// lists, identify data): transfers may not name it.
func (c *Controller) QueueMemory() vfio.IOVARange {
	return vfio.IOVARange{Start: c.base, End: c.base + uint64(c.arena.Len()) - 1}
}

// DMA is the controller's DMA space.
func (c *Controller) DMA() *vfio.DMASpace { return c.dma }

// validate checks a transfer before a command is built.
func (c *Controller) validate(t Transfer) error {
	lba := c.ns.LBASize
	switch t.Opcode {
	case spec.OpRead, spec.OpWrite, spec.OpWriteZeroes:
	default:
		return fmt.Errorf("%w: opcode %#x is not a transfer", ErrBadTransfer, t.Opcode)
	}
	if t.Len <= 0 || t.Len%lba != 0 || t.Offset%uint64(lba) != 0 {
		return fmt.Errorf("%w: %d bytes at namespace offset %d: both must be multiples of the %d-byte LBA", ErrBadTransfer, t.Len, t.Offset, lba)
	}
	if t.Len > c.maxXfer && t.Opcode != spec.OpWriteZeroes {
		return fmt.Errorf("%w: %d bytes in one command, the controller's limit (MDTS) is %d", ErrBadTransfer, t.Len, c.maxXfer)
	}
	if size := c.ns.Bytes(); t.Offset > size || uint64(t.Len) > size-t.Offset {
		return fmt.Errorf("%w: %d bytes at offset %d beyond the %d-byte namespace", ErrBadTransfer, t.Len, t.Offset, size)
	}
	if t.Opcode == spec.OpWriteZeroes {
		if c.ctrl.ONCS&spec.ONCSWriteZeroes == 0 {
			return fmt.Errorf("nvme: Write Zeroes (ONCS %#x): %w", c.ctrl.ONCS, ErrNotSupported)
		}
		if t.Len/lba > 1<<16 {
			return fmt.Errorf("%w: %d blocks in one Write Zeroes (at most 65536)", ErrBadTransfer, t.Len/lba)
		}
		return nil
	}
	if t.IOVA&3 != 0 {
		return fmt.Errorf("%w: buffer IOVA %#x is not dword aligned", ErrBadTransfer, t.IOVA)
	}
	if end := c.base + uint64(c.arena.Len()); t.IOVA < end && t.IOVA+uint64(t.Len) > c.base {
		return fmt.Errorf("%w: buffer IOVA %#x+%d overlaps the driver's queue memory", ErrBadTransfer, t.IOVA, t.Len)
	}
	if c.cmb != nil && c.cmb.contains(t.IOVA, t.Len) {
		if !c.cmb.dataOK(t.Opcode) {
			return fmt.Errorf("%w: the CMB does not take %s data (CMBSZ %#x)", ErrBadTransfer, opName(t.Opcode), c.cmb.sz)
		}
		return nil
	}
	access := vfio.DMARead // a write: the controller reads memory
	if t.Opcode == spec.OpRead {
		access = vfio.DMAWrite
	}
	if err := c.dma.Check(t.IOVA, uint64(t.Len), access); err != nil {
		return fmt.Errorf("nvme: %s of %d bytes: %w", opName(t.Opcode), t.Len, err)
	}
	return nil
}

func opName(op uint8) string {
	switch op {
	case spec.OpRead:
		return "read"
	case spec.OpWrite:
		return "write"
	case spec.OpWriteZeroes:
		return "write zeroes"
	case spec.OpFlush:
		return "flush"
	case spec.OpDSM:
		return "dataset management"
	}
	return fmt.Sprintf("opcode %#x", op)
}

// Abort asks the controller to abort command cid of I/O queue q. It
// returns whether the controller says it aborted it (CQE DW0 bit 0 clear);
// either way the command itself still completes once, through Reap.
func (c *Controller) Abort(ctx context.Context, q *Queue, cid uint16) (bool, error) {
	res, err := c.AdminCommand(ctx, spec.Abort(q.id, cid))
	if err != nil {
		return false, err
	}
	return res&1 == 0, nil
}

// Reset recovers the controller: it disables it (CC.EN=0: every I/O queue
// is gone, nothing more is posted), collects the completions already in
// the rings, completes every command still outstanding with StatusReset
// (ErrReset) — so each command completes exactly once, through Reap — and
// enables it again with the same queues. Call it from the goroutine that
// owns the queues.
func (c *Controller) Reset() error {
	if c.closed.Load() {
		return errControllerClosed
	}
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	c.resets.Add(1)
	derr := c.disable()
	for _, q := range c.io {
		q.harvest()
		q.failOutstanding(StatusReset)
	}
	c.admin.harvest()
	c.admin.failOutstanding(StatusReset)
	c.admin.backlog, c.admin.bhead = c.admin.backlog[:0], 0
	if derr != nil {
		return fmt.Errorf("nvme: reset: %w", derr)
	}
	for _, ev := range c.evs {
		_, _ = ev.TryRead()
	}
	if err := c.enable(); err != nil {
		return fmt.Errorf("nvme: reset: %w", err)
	}
	if err := c.setQueueCount(); err != nil {
		return fmt.Errorf("nvme: reset: %w", err)
	}
	if c.cmb != nil {
		if err := c.cmb.program(); err != nil {
			return fmt.Errorf("nvme: reset: %w", err)
		}
	}
	for _, q := range c.io {
		if err := c.createQueue(q); err != nil {
			return fmt.Errorf("nvme: reset: %w", err)
		}
	}
	return nil
}

// Close shuts the controller down (CC.SHN normal shutdown, then CC.EN=0),
// disables its interrupts, unmaps and frees its memory. Commands still
// outstanding are abandoned (reap them, or Reset, first). The vfio.Device
// stays open. Idempotent.
func (c *Controller) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	var errs []error
	if cc, err := c.bar.Read32(spec.RegCC); err == nil && cc&spec.CCEnable != 0 {
		if err := c.bar.Write32(spec.RegCC, cc&^spec.CCShnMask|spec.CCShnNormal); err == nil {
			deadline := time.Now().Add(c.readyTO)
			for time.Now().Before(deadline) {
				st, err := c.bar.Read32(spec.RegCSTS)
				if err != nil || st&spec.CSTSShstMask == spec.CSTSShstDone {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	errs = append(errs, c.disable(), c.teardown())
	return errors.Join(errs...)
}

// teardown releases interrupts, the CMB and the memory.
func (c *Controller) teardown() error {
	var errs []error
	if len(c.evs) > 0 {
		errs = append(errs, c.dev.SetIRQs(vfio.IRQMSIX, 0, nil))
		for _, ev := range c.evs {
			errs = append(errs, ev.Close())
		}
		c.evs = nil
	}
	if c.cmb != nil {
		errs = append(errs, c.cmb.disable())
		c.cmb = nil
	}
	if c.arena != nil {
		if _, ok := c.dma.ArenaIOVA(c.arena); ok {
			errs = append(errs, c.dma.UnmapArena(c.arena))
		}
		errs = append(errs, c.arena.Close())
		c.arena = nil
	}
	errs = append(errs, vfio.DisableBusMaster(c.dev))
	return errors.Join(errs...)
}
