package hdmadev

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
)

// Defaults and limits of Config.
const (
	DefaultTimeout = 2 * time.Second
	MaxCPUThresh   = 1 << 20
)

// Config configures the backend.
type Config struct {
	// Queue is the HDMA queue index the backend uses (default 0).
	Queue int
	// CPUThreshold: host→device transfers of at most this many bytes are
	// copied by the CPU straight into device memory (BAR2) instead of
	// going to the DMA engine. 0 measures it at Attach; -1 disables the
	// CPU path; otherwise 1..MaxCPUThresh.
	CPUThreshold int
	// Timeout is how long a transfer may stay outstanding before the
	// device counts as stalled (default 2s; 1ms..1h).
	Timeout time.Duration
	// CloseDevice makes the backend close the device when it closes
	// (otherwise the device stays the caller's).
	CloseDevice bool
	// Logger receives recovery events (default: the engine's logger).
	Logger *slog.Logger
}

// Op codes (backend.Op.Code).
const (
	opH2D = 1 + iota
	opD2H
	opD2D
)

var devOps = [...]hdma.Op{opH2D: hdma.OpH2D, opD2H: hdma.OpD2H, opD2D: hdma.OpD2D}

// Backend drives one queue of an HDMA device. Create it with New and give it
// to engine.Open.
type Backend struct {
	cfg      Config
	dev      vfio.Device
	attached atomic.Bool
	log      *slog.Logger
	ctr      *backend.Counters

	dma    *vfio.DMASpace
	drv    *hdma.Driver
	q      *hdma.Queue
	info   hdma.Info
	rings  *hugepage.Arena // the queue's rings, DMA-mapped by the backend
	devMem []byte          // BAR2 as plain memory, for the CPU path (nil: none)
	cpuMax uint32          // CPU-path threshold in bytes (0: off)
	// devMemSize bounds device offsets: min(DEVMEM_SIZE, BAR2 size).
	devMemSize uint64
	desc       backend.Description

	// arenas are the pool's arenas by slot: their memory and IOVA.
	// MapArena writes a slot before the engine hands out its blocks;
	// Execute (CPU path, on submitters) reads it.
	arenas [backend.MaxArenas]arena

	cpl     []hdma.Completion
	queued  int
	recover bool      // a reset or stall was seen: Recover before forwarding
	failed  int       // completions the last Recover synthesized, still to reap
	nextTry time.Time // after a failed Recover
}

type arena struct {
	a    *hugepage.Arena
	mem  []byte
	iova uint64
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.InterruptGate = (*Backend)(nil)
)

// New returns a backend over dev, an HDMA device. It checks cfg; the
// device is opened at Attach (engine.Open).
func New(dev vfio.Device, cfg Config) (*Backend, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	switch {
	case dev == nil:
		return nil, fmt.Errorf("hdmadev: device is nil: give a vfio.Device (vfio.OpenPCI, or mock.New for a software device): %w", backend.ErrBadConfig)
	case cfg.Queue < 0:
		return nil, fmt.Errorf("hdmadev: Queue %d: want 0..(device queues-1): %w", cfg.Queue, backend.ErrBadConfig)
	case cfg.CPUThreshold < -1 || cfg.CPUThreshold > MaxCPUThresh:
		return nil, fmt.Errorf("hdmadev: CPUThreshold %d: want -1 (off), 0 (measure) or 1..%d bytes: %w", cfg.CPUThreshold, MaxCPUThresh, backend.ErrBadConfig)
	case cfg.Timeout < time.Millisecond || cfg.Timeout > time.Hour:
		return nil, fmt.Errorf("hdmadev: Timeout %v: want 1ms..1h (0 = %v): %w", cfg.Timeout, DefaultTimeout, backend.ErrBadConfig)
	}
	return &Backend{cfg: cfg, dev: dev}, nil
}

// Describe implements backend.Backend.
func (b *Backend) Describe() backend.Description { return b.desc }

// Driver is the HDMA driver, once attached (for statistics and tests).
func (b *Backend) Driver() *hdma.Driver { return b.drv }

// Attach implements backend.Backend: it opens the driver, sets up the queue
// (twice the engine's depth: recovery may hold failed completions beside
// what the engine admitted), enables the device and measures the CPU-path
// threshold.
func (b *Backend) Attach(env backend.Env) (err error) {
	if !b.attached.CompareAndSwap(false, true) {
		return errors.New("hdmadev: backend already attached to an engine")
	}
	b.ctr, b.log = env.Counters, b.cfg.Logger
	if b.log == nil {
		b.log = env.Logger
	}
	name := b.dev.Info().Name
	b.desc = backend.Description{Name: "hdma", Device: name, Locs: 1 << backend.LocDevice, Align: 1, Timeout: b.cfg.Timeout}
	if b.drv, err = hdma.Open(b.dev, hdma.Config{Timeout: b.cfg.Timeout, Logger: b.log}); err != nil {
		return fmt.Errorf("hdmadev: device %s: %w", name, err)
	}
	b.info = b.drv.Info()
	// Device memory is what the device reports (DEVMEM_SIZE) and what its
	// BAR2 region really spans, whichever is smaller.
	b.devMemSize = b.info.DevMemSize
	if r := b.drv.DeviceRegion(); r != nil {
		b.devMemSize = min(b.devMemSize, r.Size())
	}
	if b.cfg.Queue >= b.info.Queues {
		return fmt.Errorf("hdmadev: Queue %d: device %s has queues 0..%d: %w", b.cfg.Queue, name, b.info.Queues-1, backend.ErrBadConfig)
	}
	entries := max(2, 2*env.QueueDepth)
	if entries > b.info.MaxQueueEntries {
		return fmt.Errorf("hdmadev: QueueDepth %d: device %s queues hold at most %d entries, so QueueDepth must be ≤ %d: %w",
			env.QueueDepth, name, b.info.MaxQueueEntries, b.info.MaxQueueEntries/2, backend.ErrBadConfig)
	}
	if b.dma, err = vfio.NewDMASpace(b.dev, vfio.DMAConfig{}); err != nil {
		return fmt.Errorf("hdmadev: device %s: %w", name, err)
	}
	if err = b.setupQueue(entries); err != nil {
		return fmt.Errorf("hdmadev: device %s: %w", name, err)
	}
	b.cpl = make([]hdma.Completion, entries)
	b.setupCPUPath(name)
	b.describe()
	return nil
}

// setupQueue puts the queue's rings (and the CPU-path measurement buffer)
// in an arena of the backend's own, DMA-mapped, and enables the device.
func (b *Backend) setupQueue(entries int) (err error) {
	size := hdma.QueueBytes(entries) + measureMax
	if b.rings, err = hugepage.NewArena(hugepage.ArenaConfig{Size: size, Backings: []hugepage.Backing{hugepage.Backing4K}, Populate: true}); err != nil {
		return fmt.Errorf("ring memory: %w", err)
	}
	iova, err := b.dma.MapArena(b.rings, vfio.DMAReadWrite)
	if err != nil {
		return fmt.Errorf("DMA-map %d bytes of ring memory: %w", size, err)
	}
	qc, err := hdma.LayoutQueue(b.cfg.Queue, entries, b.rings.Bytes(), iova, true)
	if err != nil {
		return err
	}
	if b.q, err = b.drv.SetupQueue(qc); err != nil {
		return err
	}
	return b.drv.Enable()
}

// setupCPUPath maps device memory for the CPU and sets the threshold.
func (b *Backend) setupCPUPath(name string) {
	b.devMem = b.drv.DeviceMemory()
	if b.devMem != nil && uint64(len(b.devMem)) < b.devMemSize {
		// Validation admits offsets up to DEVMEM_SIZE; the CPU path would
		// index past the mapping. DMA reaches all of it: CPU path off.
		b.desc.Fallbacks = append(b.desc.Fallbacks, fmt.Errorf("hdmadev: device %s maps %d of its %d bytes of device memory for the CPU: CPU path off: %w",
			name, len(b.devMem), b.devMemSize, backend.ErrNotSupported))
		b.devMem = nil
	}
	th := b.cfg.CPUThreshold
	switch {
	case th < 0 || b.devMem == nil:
		th = -1
	case th == 0:
		var err error
		if th, err = b.measure(); err != nil {
			b.desc.Fallbacks = append(b.desc.Fallbacks, fmt.Errorf("hdmadev: CPU path off: %w", err))
			th = -1
		}
	}
	b.desc.CPUThreshold = th
	b.cpuMax = uint32(max(th, 0))
}

func (b *Backend) describe() {
	b.desc.MaxTransfer = b.info.MaxTransfer
	b.desc.DeviceMemory = b.devMemSize
	b.desc.Features = []string{"msi-eventfd", "doorbell-per-batch"}
	if b.cpuMax > 0 {
		b.desc.Features = append(b.desc.Features, "cpu-path")
	}
}

// measureMax is the largest size the CPU-path measurement tries.
const measureMax = 64 << 10

// measure picks the CPU-path threshold: for sizes 64 B .. 64 KiB it times a
// CPU copy into device memory against a DMA round trip (submit, doorbell,
// completion) and returns the largest size at which the CPU is faster (0
// when it never is). Medians of a few runs; well under a millisecond on
// vfio-mock. The buffer is the tail of the ring arena.
func (b *Backend) measure() (int, error) {
	if len(b.devMem) < measureMax {
		return 0, nil
	}
	mem := b.rings.Bytes()
	host := mem[len(mem)-measureMax:]
	base, _ := b.dma.ArenaIOVA(b.rings)
	iova := base + uint64(len(mem)-measureMax)
	// The measurement writes the first 64 KiB of device memory: keep what
	// a caller's device had there and put it back.
	saved := make([]byte, measureMax)
	copy(saved, b.devMem[:measureMax])
	defer copy(b.devMem[:measureMax], saved)
	best := 0
	const runs = 5
	var dma, cpu [runs]time.Duration
	for size := 64; size <= measureMax; size *= 4 {
		for i := range runs {
			t0 := time.Now()
			copy(b.devMem[:size], host[:size])
			cpu[i] = time.Since(t0)
			t0 = time.Now()
			if err := b.roundTrip(iova, uint32(size)); err != nil {
				return 0, fmt.Errorf("measuring the CPU-path threshold: %w", err)
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
// for the completion (Attach only, before the engine uses the queue).
func (b *Backend) roundTrip(iova uint64, size uint32) error {
	if _, err := b.q.SubmitBatch([]hdma.Desc{{Op: hdma.OpH2D, Len: size, Src: iova, Dst: 0}}); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	var c [1]hdma.Completion
	for b.q.Reap(c[:]) == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("no completion within 2s: %w", hdma.ErrTimeout)
		}
	}
	return c[0].Err
}

// MapArena implements backend.Backend: the arena is DMA-mapped into the
// device's IOMMU domain once, whole.
func (b *Backend) MapArena(slot int, a *hugepage.Arena) (uint64, error) {
	iova, err := b.dma.MapArena(a, vfio.DMAReadWrite)
	if err != nil {
		return 0, fmt.Errorf("hdmadev: DMA-map %d bytes into %s: %w", a.Len(), b.desc.Device, err)
	}
	b.arenas[slot] = arena{a: a, mem: a.Bytes(), iova: iova}
	return iova, nil
}

// UnmapArena implements backend.Backend.
func (b *Backend) UnmapArena(slot int) error {
	ar := b.arenas[slot]
	b.arenas[slot] = arena{}
	if ar.a == nil {
		return nil
	}
	if err := b.dma.UnmapArena(ar.a); err != nil {
		return fmt.Errorf("hdmadev: DMA-unmap arena %d from %s: %w", slot, b.desc.Device, err)
	}
	return nil
}

// Prepare implements backend.Backend: host↔device and device↔device. The
// common case (host→device) is checked first, straight-line: it runs per
// transfer on the submitter.
func (b *Backend) Prepare(src, dst backend.Endpoint, n uint32, op *backend.Op) error {
	switch {
	case src.Kind == backend.LocHost && dst.Kind == backend.LocDevice:
		if dst.Off > b.devMemSize || uint64(n) > b.devMemSize-dst.Off {
			return b.beyond(dst.Off, n)
		}
		op.Code, op.HostArena, op.Src, op.Dst = opH2D, uint16(src.Arena), src.Addr, dst.Off
		if n <= b.cpuMax {
			op.Path, op.Inline = backend.PathCPU, true
		}
		return nil // op.Path is PathDMA (0): the engine zeroed op
	case src.Kind == backend.LocDevice && dst.Kind == backend.LocHost:
		if src.Off > b.devMemSize || uint64(n) > b.devMemSize-src.Off {
			return b.beyond(src.Off, n)
		}
		op.Code, op.HostArena, op.Src, op.Dst = opD2H, uint16(dst.Arena), src.Off, dst.Addr
	case src.Kind == backend.LocDevice && dst.Kind == backend.LocDevice:
		if src.Off > b.devMemSize || uint64(n) > b.devMemSize-src.Off {
			return b.beyond(src.Off, n)
		}
		if dst.Off > b.devMemSize || uint64(n) > b.devMemSize-dst.Off {
			return b.beyond(dst.Off, n)
		}
		op.Code, op.Src, op.Dst = opD2D, src.Off, dst.Off
	default:
		return fmt.Errorf("hdmadev: %v → %v: the HDMA device moves host↔device and device↔device: %w", src.Kind, dst.Kind, backend.ErrBadTransfer)
	}
	op.Path = backend.PathDMA
	return nil
}

// beyond is Prepare's error for device memory out of bounds.
func (b *Backend) beyond(off uint64, n uint32) error {
	return fmt.Errorf("hdmadev: device memory %#x: %d bytes beyond the %d bytes of device memory: %w", off, n, b.devMemSize, backend.ErrOutOfBounds)
}

// Execute implements backend.Backend: the CPU path, a copy straight into
// device memory (BAR2). It is not ordered with DMA transfers in flight.
func (b *Backend) Execute(op *backend.Op) (uint32, backend.Status) {
	ar := &b.arenas[op.HostArena&(backend.MaxArenas-1)]
	off := op.Src - ar.iova
	if ar.mem == nil || off+uint64(op.Len) > uint64(len(ar.mem)) {
		return 0, backend.StatusCanceled
	}
	n := copy(b.devMem[op.Dst:op.Dst+uint64(op.Len)], ar.mem[off:off+uint64(op.Len)])
	return uint32(n), backend.StatusOK
}

// interruptBytes: a descriptor of at least this many bytes asks for its own
// interrupt, not only the last of its batch. A batch of large transfers then
// completes one by one, as the device finishes each, instead of all at once
// when the last one does: a path that refills a block as soon as its write
// ends (Engine.Copy) keeps the disk busy instead of stepping in lockstep. An
// interrupt per 64 KiB or more is cheap beside the bytes moved.
const interruptBytes = 64 << 10

// Forward implements backend.Backend: one 64-byte descriptor into the
// device's submission ring, asking for an interrupt when it is the last of
// the batch or large (interruptBytes).
func (b *Backend) Forward(tag uint64, op *backend.Op, last bool) bool {
	if b.recover {
		return false
	}
	err := b.q.Enqueue(hdma.Desc{Op: devOps[op.Code], Len: op.Len, Src: op.Src, Dst: op.Dst, User: tag, Interrupt: last || op.Len >= interruptBytes})
	if err != nil {
		if errors.Is(err, hdma.ErrRecoveryNeeded) {
			b.recover = true
		}
		return false
	}
	b.queued++
	return true
}

// Flush implements backend.Backend: one 32-bit MMIO store of SQ_TAIL.
func (b *Backend) Flush() {
	if b.queued == 0 {
		return
	}
	b.queued = 0
	if err := b.q.Submit(); err != nil {
		b.log.Warn("hdmadev: doorbell failed", "err", err)
		b.recover = true
		return
	}
	b.ctr.Doorbells++
}

// Reap implements backend.Backend: every ready completion, one CQ_HEAD
// store per batch.
func (b *Backend) Reap(out []backend.Completion) int {
	n := b.q.Reap(b.cpl[:min(len(out), len(b.cpl))])
	for i := range n {
		c := &b.cpl[i]
		if c.Err == nil && b.failed == 0 {
			out[i] = backend.Completion{Tag: c.User, N: c.Len} // StatusOK
			continue
		}
		st := statusOf(c.Err)
		// Reap hands out what Recover failed first; a reset status
		// reported by the device itself means it reset and is disabled.
		if b.failed > 0 {
			b.failed--
		} else if st == statusReset {
			b.recover = true
		}
		out[i] = backend.Completion{Tag: c.User, N: c.Len, Status: st}
		c.Err = nil
	}
	return n
}

// Check implements backend.Backend: it detects a stalled device and recovers
// from resets. Recover fails every outstanding descriptor exactly once (the
// stalled one with ErrTimeout); those completions come out of the next Reap.
func (b *Backend) Check() {
	if !b.recover && b.q.Outstanding() > 0 {
		if _, _, stalled := b.q.CheckTimeout(); stalled {
			b.recover = true
		}
	}
	if !b.recover || time.Now().Before(b.nextTry) {
		return
	}
	pending := b.q.Outstanding()
	if err := b.drv.Recover(); err != nil {
		b.log.Warn("hdmadev: device recovery failed; retrying in 100ms", "err", err)
		b.nextTry = time.Now().Add(100 * time.Millisecond)
		return
	}
	b.recover = false
	b.failed = pending // Recover fails everything outstanding, exactly once
	b.ctr.Recoveries++
}

// Outstanding implements backend.Backend.
func (b *Backend) Outstanding() int { return b.q.Outstanding() }

// GateInterrupts implements backend.InterruptGate: the queue's IRQ
// register (hdma.Queue.SetInterrupts).
func (b *Backend) GateInterrupts(on bool) error { return b.q.SetInterrupts(on) }

// ReadyFD implements backend.Backend: the queue's MSI eventfd.
func (b *Backend) ReadyFD() (int, bool) { return b.q.EventFD(), true }

// Cancel implements backend.Backend: it quiesces the device (a reset, which
// completes what the device has in flight with status 4), collects
// everything it wrote and fails, as canceled, what it never saw — such as
// descriptors published after the device had reset itself. A device that
// does not reset keeps what it holds (it may still write there).
func (b *Backend) Cancel(out []backend.Completion) int {
	if b.q.Outstanding() > 0 {
		if err := b.drv.Quiesce(); err != nil {
			b.log.Warn("hdmadev: close: device reset failed; its transfers stay outstanding", "err", err, "outstanding", b.q.Outstanding())
		}
	}
	n := 0
	for n < len(out) {
		k := b.Reap(out[n:])
		if k == 0 {
			break
		}
		for i := n; i < n+k; i++ {
			if out[i].Status == statusReset {
				out[i].Status = statusCanceledReset
			}
		}
		n += k
	}
	return n
}

// Close implements backend.Backend: the driver, the DMA mappings, the ring
// memory and (with Config.CloseDevice) the device.
func (b *Backend) Close() error {
	var errs []error
	if b.drv != nil {
		errs = append(errs, b.drv.Close())
	}
	if b.dma != nil {
		errs = append(errs, b.dma.Close()) // unmaps the rings and any arena left
	}
	if b.rings != nil {
		errs = append(errs, b.rings.Close())
	}
	if b.cfg.CloseDevice && b.dev != nil {
		errs = append(errs, b.dev.Close())
	}
	b.drv, b.dma, b.rings, b.dev = nil, nil, nil, nil
	return errors.Join(errs...)
}
