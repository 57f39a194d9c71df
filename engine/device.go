package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// deviceTarget drives one queue of an HDMA device. Its queue belongs to the
// engine's owner (one goroutine at a time), as the driver requires.
type deviceTarget struct {
	dev     vfio.Device
	ownDev  bool
	dma     *vfio.DMASpace
	drv     *hdma.Driver
	q       *hdma.Queue
	info    hdma.Info
	devMem  []byte // BAR2 as plain memory, for the CPU path (nil: none)
	cpuMax  int    // CPU-path threshold in bytes (0: off)
	sq, cq  hugepage.Block
	cpl     []hdma.Completion
	queued  int
	recover bool      // a reset or stall was seen: Recover before forwarding
	failed  int       // completions the last Recover synthesized, still to reap
	nextTry time.Time // after a failed Recover
}

func openDevice(e *Engine) (_ *deviceTarget, err error) {
	cfg := &e.cfg
	d := &deviceTarget{dev: cfg.Device}
	defer func() {
		if err != nil {
			_ = d.close(e)
		}
	}()
	if d.dev == nil {
		m, err := mock.New(mock.Config{Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("engine: vfio-mock device: %w", err)
		}
		d.dev, d.ownDev = m, true
	}
	name := d.dev.Info().Name
	if d.drv, err = hdma.Open(d.dev, hdma.Config{Timeout: cfg.Timeout, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("engine: device %s: %w", name, err)
	}
	d.info = d.drv.Info()
	if cfg.DeviceQueue >= d.info.Queues {
		return nil, fmt.Errorf("engine: DeviceQueue %d: device %s has queues 0..%d: %w", cfg.DeviceQueue, name, d.info.Queues-1, ErrBadConfig)
	}
	// At most Entries-1 descriptors are outstanding, and recovery may
	// hold failed completions: give the queue twice the depth so it never
	// refuses what the staging ring admitted.
	entries := max(2, 2*e.depth)
	if entries > d.info.MaxQueueEntries {
		return nil, fmt.Errorf("engine: QueueDepth %d: device %s queues hold at most %d entries, so QueueDepth must be ≤ %d: %w",
			e.depth, name, d.info.MaxQueueEntries, d.info.MaxQueueEntries/2, ErrBadConfig)
	}
	if d.dma, err = vfio.NewDMASpace(d.dev, vfio.DMAConfig{}); err != nil {
		return nil, fmt.Errorf("engine: device %s: %w", name, err)
	}
	// Map the pool once, whole: no transfer ever maps anything.
	arenas := e.pool.Arenas()
	if len(arenas) != 1 {
		return nil, fmt.Errorf("engine: pool has %d arenas, the device target maps exactly one: %w", len(arenas), ErrUnsupported)
	}
	if e.arenaIOVA, err = d.dma.MapArena(arenas[0], vfio.DMAReadWrite); err != nil {
		return nil, fmt.Errorf("engine: DMA-map the %d-byte pool into %s: %w", arenas[0].Len(), name, err)
	}
	// The rings live in the pool too (already mapped).
	if d.sq, err = e.pool.AllocAligned(entries*64, 4096); err != nil {
		return nil, fmt.Errorf("engine: submission ring (%d entries) from the pool: %w", entries, err)
	}
	if d.cq, err = e.pool.AllocAligned(entries*16, 4096); err != nil {
		return nil, fmt.Errorf("engine: completion ring (%d entries) from the pool: %w", entries, err)
	}
	d.q, err = d.drv.SetupQueue(hdma.QueueConfig{
		Index: cfg.DeviceQueue, Entries: entries,
		SQ: d.sq.Bytes(), SQIOVA: e.arenaIOVA + uint64(d.sq.Offset()),
		CQ: d.cq.Bytes(), CQIOVA: e.arenaIOVA + uint64(d.cq.Offset()),
		Interrupts: true,
	})
	if err != nil {
		return nil, fmt.Errorf("engine: device %s: %w", name, err)
	}
	if err = d.drv.Enable(); err != nil {
		return nil, fmt.Errorf("engine: device %s: %w", name, err)
	}
	d.cpl = make([]hdma.Completion, entries)
	d.devMem = d.drv.DeviceMemory()
	if d.devMem != nil && uint64(len(d.devMem)) < d.info.DevMemSize {
		// Validation admits offsets up to DEVMEM_SIZE; the CPU path would
		// index past the mapping. DMA reaches all of it: CPU path off.
		e.fallbacks = append(e.fallbacks, fmt.Errorf("engine: device %s maps %d of its %d bytes of device memory for the CPU: CPU path off: %w",
			name, len(d.devMem), d.info.DevMemSize, ErrUnsupported))
		d.devMem = nil
	}
	switch {
	case cfg.CPUThreshold < 0 || d.devMem == nil:
		cfg.CPUThreshold = -1
	case cfg.CPUThreshold == 0:
		if cfg.CPUThreshold, err = d.measure(e); err != nil {
			return nil, err
		}
	}
	d.cpuMax = max(cfg.CPUThreshold, 0)
	e.dev = d
	return d, nil
}

// measure picks the CPU-path threshold: for sizes 64 B .. 64 KiB it times a
// CPU copy into device memory against a DMA round trip (submit, doorbell,
// completion) and returns the largest size at which the CPU is faster (0
// when it never is). Medians of a few runs; well under a millisecond on
// vfio-mock.
func (d *deviceTarget) measure(e *Engine) (int, error) {
	const maxSize = 64 << 10
	if len(d.devMem) < maxSize {
		return 0, nil
	}
	blk, err := e.pool.AllocAligned(maxSize, 4096)
	if err != nil {
		return 0, fmt.Errorf("engine: CPU-threshold measurement buffer: %w", err)
	}
	defer func() { _ = e.pool.Free(blk) }()
	host := blk.Bytes()
	iova := e.arenaIOVA + uint64(blk.Offset())
	// The measurement writes the first 64 KiB of device memory: keep what
	// a caller's device had there and put it back.
	saved := make([]byte, maxSize)
	copy(saved, d.devMem[:maxSize])
	defer copy(d.devMem[:maxSize], saved)
	best := 0
	const runs = 5
	var dma, cpu [runs]time.Duration
	for size := 64; size <= maxSize; size *= 4 {
		for i := range runs {
			t0 := time.Now()
			copy(d.devMem[:size], host[:size])
			cpu[i] = time.Since(t0)
			t0 = time.Now()
			if err := d.roundTrip(iova, uint32(size)); err != nil {
				return 0, fmt.Errorf("engine: measuring the CPU-path threshold: %w", err)
			}
			dma[i] = time.Since(t0)
		}
		slices.Sort(cpu[:])
		slices.Sort(dma[:])
		if cpu[runs/2] >= dma[runs/2] {
			break
		}
		best = size
	}
	return best, nil
}

// roundTrip moves size bytes host→device through the DMA engine and waits
// for the completion (Open only, before the reaper starts).
func (d *deviceTarget) roundTrip(iova uint64, size uint32) error {
	if _, err := d.q.SubmitBatch([]hdma.Desc{{Op: hdma.OpH2D, Len: size, Src: iova, Dst: 0}}); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	var c [1]hdma.Completion
	for d.q.Reap(c[:]) == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("no completion within 2s: %w", hdma.ErrTimeout)
		}
	}
	return c[0].Err
}

func (e *Engine) validateDevice(t *Transfer, r *req) error {
	d := e.dev
	src, dst := &t.Src, &t.Dst
	switch {
	case src.kind == locHost && dst.kind == locDevice:
		r.op = opH2D
	case src.kind == locDevice && dst.kind == locHost:
		r.op = opD2H
	case src.kind == locDevice && dst.kind == locDevice:
		r.op = opD2D
	default:
		return fmt.Errorf("engine: %v → %v: the device target moves host↔device and device↔device: %w", *src, *dst, ErrBadTransfer)
	}
	if uint64(t.Len) > uint64(d.info.MaxTransfer) {
		return fmt.Errorf("engine: %v → %v: %d bytes, the device moves at most %d per transfer: %w", *src, *dst, t.Len, d.info.MaxTransfer, ErrOutOfBounds)
	}
	for _, l := range [2]*Loc{src, dst} {
		what := "source"
		if l == dst {
			what = "destination"
		}
		if l.kind == locHost {
			if err := e.checkHost(l, t.Len, what); err != nil {
				return err
			}
			continue
		}
		if l.off > d.info.DevMemSize || uint64(t.Len) > d.info.DevMemSize-l.off {
			return fmt.Errorf("engine: %s %v: %d bytes beyond the %d bytes of device memory: %w", what, *l, t.Len, d.info.DevMemSize, ErrOutOfBounds)
		}
	}
	r.path = uint8(PathDMA)
	switch r.op {
	case opH2D:
		r.src, r.dst = src.b.iova+src.off, dst.off
		if t.Len <= d.cpuMax {
			r.path, r.done = uint8(PathCPU), 1
		}
	case opD2H:
		r.src, r.dst = src.off, dst.b.iova+dst.off
	case opD2D:
		r.src, r.dst = src.off, dst.off
	}
	return nil
}

// cpuWrite is the CPU path: the submitter copies the bytes straight into
// device memory (BAR2), as GDRCopy does for GPU memory. It is not ordered
// with DMA transfers still in flight.
func (d *deviceTarget) cpuWrite(t *Transfer) uint64 {
	src := t.Src.b.hb.Bytes()
	if src == nil {
		return packRes(codeCanceled, 0)
	}
	n := copy(d.devMem[t.Dst.off:t.Dst.off+uint64(t.Len)], src[t.Src.off:])
	return packRes(codeOK, uint32(n))
}

var devOps = [...]hdma.Op{opH2D: hdma.OpH2D, opD2H: hdma.OpD2H, opD2D: hdma.OpD2D}

// forward writes one 64-byte descriptor into the device's submission ring.
func (d *deviceTarget) forward(e *Engine, pos uint64, r *req, last bool) bool {
	if d.recover {
		return false
	}
	err := d.q.Enqueue(hdma.Desc{Op: devOps[r.op], Len: r.n, Src: r.src, Dst: r.dst, User: pos, Interrupt: last})
	if err != nil {
		if errors.Is(err, hdma.ErrRecoveryNeeded) {
			d.recover = true
		}
		return false
	}
	d.queued++
	return true
}

// flush rings the doorbell once: one 32-bit MMIO store of SQ_TAIL.
func (d *deviceTarget) flush(e *Engine) {
	if d.queued == 0 {
		return
	}
	d.queued = 0
	if err := d.q.Submit(); err != nil {
		e.log.Warn("engine: doorbell failed", "err", err)
		d.recover = true
		return
	}
	e.ctr.doorbells++
}

// reap takes every ready completion (one CQ_HEAD store per batch).
func (d *deviceTarget) reap(e *Engine, out []completion) int {
	n := d.q.Reap(d.cpl[:min(len(out), len(d.cpl))])
	for i := range n {
		c := &d.cpl[i]
		code := hdmaCode(c.Err)
		// Reap hands out what Recover failed first; a reset status
		// reported by the device itself means it reset and is disabled.
		if d.failed > 0 {
			d.failed--
		} else if code == codeReset {
			d.recover = true
		}
		out[i] = completion{pos: c.User, res: packRes(code, c.Len)}
		c.Err = nil
	}
	return n
}

// check detects a stalled device and recovers from resets: Recover fails
// every outstanding descriptor exactly once (the stalled one with
// ErrTimeout), and those completions come out of the next reap.
func (d *deviceTarget) check(e *Engine) {
	if !d.recover && d.q.Outstanding() > 0 {
		if _, _, stalled := d.q.CheckTimeout(); stalled {
			d.recover = true
		}
	}
	if !d.recover || time.Now().Before(d.nextTry) {
		return
	}
	pending := d.q.Outstanding()
	if err := d.drv.Recover(); err != nil {
		e.log.Warn("engine: device recovery failed; retrying in 100ms", "err", err)
		d.nextTry = time.Now().Add(100 * time.Millisecond)
		return
	}
	d.recover = false
	d.failed = pending // Recover fails everything outstanding, exactly once
	e.ctr.recoveries++
}

func (d *deviceTarget) outstanding() int { return d.q.Outstanding() }

func (d *deviceTarget) sleepFd() (int, bool) { return d.q.EventFD(), true }

// cancel resets the device, which completes what it has in flight with
// status 4 (reported as canceled), and collects everything it wrote.
func (d *deviceTarget) cancel(e *Engine, out []completion) int {
	if d.q.Outstanding() > 0 {
		if err := d.drv.Reset(); err != nil {
			e.log.Warn("engine: close: device reset", "err", err)
		}
	}
	n := 0
	for n < len(out) {
		k := d.reap(e, out[n:])
		if k == 0 {
			break
		}
		for i := n; i < n+k; i++ {
			if out[i].res>>32 == codeReset {
				out[i].res = packRes(codeCanceledReset, 0)
			}
		}
		n += k
	}
	return n
}

func (d *deviceTarget) close(e *Engine) error {
	var errs []error
	if d.drv != nil {
		errs = append(errs, d.drv.Close())
	}
	if d.dma != nil {
		errs = append(errs, d.dma.Close())
	}
	if d.ownDev && d.dev != nil {
		errs = append(errs, d.dev.Close())
	}
	d.drv, d.dma = nil, nil
	if d.ownDev {
		d.dev = nil
	}
	return errors.Join(errs...)
}
