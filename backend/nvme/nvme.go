package nvme

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	drv "github.com/hcomm-go/hcomm/vfio/nvme"
	"github.com/hcomm-go/hcomm/vfio/nvme/spec"
)

// DefaultTimeout is Config.Timeout's default.
const DefaultTimeout = 10 * time.Second

// DefaultDeferDoorbell is Config.DeferDoorbell's default: below it (a few
// synchronous submitters) every Flush rings at once, so that a command is
// never held back behind one or two others.
const DefaultDeferDoorbell = 4

// Config configures the backend.
type Config struct {
	// NSID is the namespace (default 1).
	NSID uint32
	// Polled: no interrupts; the engine polls the completion queue
	// (ReadyFD is -1). Default: the queue's MSI-X vector wakes the engine
	// through an eventfd.
	Polled bool
	// Timeout is how long a command may stay outstanding before the
	// controller counts as stalled and is reset (default 10 s; 1ms..1h).
	Timeout time.Duration
	// CloseDevice makes the backend close the device when it closes.
	CloseDevice bool
	// DeferDoorbell is the fewest commands in flight at the controller
	// (rung and not yet reaped) for which Flush leaves the submission
	// queue's tail doorbell to the next Reap, which rings it before it
	// looks for completions: while the controller has that much work, the
	// commands submitted one at a time between two completion passes go
	// out with one MMIO store rather than one each (SPDK's
	// delay_cmd_submit). A completion of one of those in flight wakes the
	// engine (the MSI-X eventfd, or its poll), so the deferred ones wait
	// at most one completion pass. Default (0): DefaultDeferDoorbell;
	// negative: ring at every Flush.
	DeferDoorbell int
	// Logger receives recovery events (default: the engine's).
	Logger *slog.Logger
}

// Op codes (backend.Op.Code).
const (
	opWrite = 1 + iota // host → namespace
	opRead             // namespace → host
)

// Backend drives one I/O queue pair of an NVMe controller. Create it with
// New and give it to engine.Open.
type Backend struct {
	cfg      Config
	dev      vfio.Device
	attached atomic.Bool
	log      *slog.Logger
	ctr      *backend.Counters
	desc     backend.Description

	dma *vfio.DMASpace
	c   *drv.Controller
	q   *drv.Queue

	// Fixed after Attach, read by Prepare on submitters.
	lba     uint64
	nsBytes uint64
	maxXfer uint32

	arenas [backend.MaxArenas]*hugepage.Arena

	lens []uint32 // by CID: the bytes of the command in that slot
	cpl  []drv.Completion
	// queued: forwarded since the last Flush; unrung: forwarded and not
	// yet rung (Flush deferred the doorbell, or no Flush yet); deferred:
	// Flush left unrung commands for Reap to ring.
	queued, unrung int
	deferred       bool
	// deferredRings counts the doorbells Flush left to Reap (Deferred).
	deferredRings uint64
	stalled       bool      // a timeout or a failed doorbell: reset before forwarding
	nextTry       time.Time // after a failed reset
	errs          [8 << 8]error
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend over dev, an NVMe controller (bound to vfio-pci).
// The controller is opened at Attach (engine.Open).
func New(dev vfio.Device, cfg Config) (*Backend, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.NSID == 0 {
		cfg.NSID = 1
	}
	if cfg.DeferDoorbell == 0 {
		cfg.DeferDoorbell = DefaultDeferDoorbell
	}
	switch {
	case dev == nil:
		return nil, fmt.Errorf("nvme: device is nil: give a vfio.Device (vfio.OpenPCI of an NVMe controller bound to vfio-pci): %w", backend.ErrBadConfig)
	case cfg.Timeout < time.Millisecond || cfg.Timeout > time.Hour:
		return nil, fmt.Errorf("nvme: Timeout %v: want 1ms..1h (0 = %v): %w", cfg.Timeout, DefaultTimeout, backend.ErrBadConfig)
	}
	return &Backend{cfg: cfg, dev: dev}, nil
}

// Controller is the driver, once attached (for statistics and tests).
func (b *Backend) Controller() *drv.Controller { return b.c }

// Describe implements backend.Backend.
func (b *Backend) Describe() backend.Description { return b.desc }

// Attach implements backend.Backend: it opens the controller with one I/O
// queue pair one entry deeper than the engine's queue (a ring of N entries
// holds N-1 commands).
func (b *Backend) Attach(env backend.Env) (err error) {
	if !b.attached.CompareAndSwap(false, true) {
		return errors.New("nvme: backend already attached to an engine")
	}
	b.ctr, b.log = env.Counters, b.cfg.Logger
	if b.log == nil {
		b.log = env.Logger
	}
	name := b.dev.Info().Name
	if b.dma, err = vfio.NewDMASpace(b.dev, vfio.DMAConfig{}); err != nil {
		return fmt.Errorf("nvme: device %s: %w", name, err)
	}
	depth := env.QueueDepth + 1
	b.c, err = drv.Open(b.dev, drv.Config{DMA: b.dma, NSID: b.cfg.NSID, IOQueues: 1, QueueDepth: depth, Interrupts: !b.cfg.Polled})
	if err != nil {
		return fmt.Errorf("nvme: device %s: %w", name, err)
	}
	if mq := b.c.Cap().MQES(); depth > mq {
		return fmt.Errorf("nvme: QueueDepth %d: the controller's queues hold at most %d entries, so QueueDepth must be ≤ %d: %w",
			env.QueueDepth, mq, mq-1, backend.ErrBadConfig)
	}
	b.q = b.c.Queue(0)
	ns := b.c.Namespace()
	b.lba, b.nsBytes, b.maxXfer = uint64(ns.LBASize), ns.Bytes(), uint32(b.c.MaxTransfer())
	b.lens = make([]uint32, b.q.Depth())
	b.cpl = make([]drv.Completion, b.q.Depth())
	features := []string{"doorbell-per-batch", "prp-lists"}
	if b.cfg.DeferDoorbell > 0 {
		features = append(features, "deferred-doorbell")
	}
	if b.cfg.Polled {
		features = append(features, "polled")
	} else {
		features = append(features, "msix-eventfd")
	}
	b.desc = backend.Description{
		Name: "nvme", Device: name, Locs: 1 << backend.LocDevice,
		MaxTransfer: b.maxXfer, DeviceMemory: b.nsBytes, Align: ns.LBASize,
		CPUThreshold: -1, Timeout: b.cfg.Timeout, Features: features,
	}
	b.buildErrors()
	return nil
}

// statusDevice+s is the engine status of an error completion with NVMe
// status s (SCT<<8|SC).
const (
	statusDevice = backend.StatusBackend
	statusEnd    = statusDevice + 8<<8
)

// buildErrors makes every error Err can return, so that Err allocates
// nothing.
func (b *Backend) buildErrors() {
	for i := range b.errs {
		s := drv.Status(i)
		b.errs[i] = fmt.Errorf("%w: %s: %w", backend.ErrDevice, b.desc.Device, drv.StatusErr(s))
	}
}

// Err implements backend.Backend.
func (b *Backend) Err(s backend.Status) error {
	if s > statusDevice && s < statusEnd {
		return b.errs[s-statusDevice]
	}
	return fmt.Errorf("%w: unknown status %#x", backend.ErrDevice, uint32(s))
}

// MapArena implements backend.Backend: the arena is DMA-mapped into the
// controller's IOMMU domain once, whole.
func (b *Backend) MapArena(slot int, a *hugepage.Arena) (uint64, error) {
	iova, err := b.dma.MapArena(a, vfio.DMAReadWrite)
	if err != nil {
		return 0, fmt.Errorf("nvme: DMA-map %d bytes into %s: %w", a.Len(), b.desc.Device, err)
	}
	b.arenas[slot] = a
	return iova, nil
}

// UnmapArena implements backend.Backend.
func (b *Backend) UnmapArena(slot int) error {
	a := b.arenas[slot]
	b.arenas[slot] = nil
	if a == nil {
		return nil
	}
	if err := b.dma.UnmapArena(a); err != nil {
		return fmt.Errorf("nvme: DMA-unmap arena %d from %s: %w", slot, b.desc.Device, err)
	}
	return nil
}

// Prepare implements backend.Backend: host → namespace (Write) and
// namespace → host (Read), whole logical blocks, within MDTS and the
// namespace. It allocates nothing when it succeeds.
func (b *Backend) Prepare(src, dst backend.Endpoint, n uint32, op *backend.Op) error {
	var ns *backend.Endpoint
	switch {
	case src.Kind == backend.LocHost && dst.Kind == backend.LocDevice:
		op.Code, op.HostArena, op.Src, op.Dst, ns = opWrite, uint16(src.Arena), src.Addr, dst.Off, &dst
	case src.Kind == backend.LocDevice && dst.Kind == backend.LocHost:
		op.Code, op.HostArena, op.Src, op.Dst, ns = opRead, uint16(dst.Arena), src.Off, dst.Addr, &src
	default:
		return fmt.Errorf("nvme: %v → %v: the NVMe backend moves host blocks to and from the namespace: %w", src.Kind, dst.Kind, backend.ErrBadTransfer)
	}
	switch {
	case uint64(n)%b.lba != 0 || ns.Off%b.lba != 0:
		return fmt.Errorf("nvme: %d bytes at namespace offset %d: both must be multiples of the %d-byte LBA: %w", n, ns.Off, b.lba, backend.ErrAlignment)
	case n > b.maxXfer:
		return fmt.Errorf("nvme: %d bytes in one transfer, the controller's limit (MDTS) is %d: %w", n, b.maxXfer, backend.ErrOutOfBounds)
	case ns.Off > b.nsBytes || uint64(n) > b.nsBytes-ns.Off:
		return fmt.Errorf("nvme: %d bytes at namespace offset %d beyond the %d-byte namespace: %w", n, ns.Off, b.nsBytes, backend.ErrOutOfBounds)
	}
	if (op.Code == opWrite && op.Src&3 != 0) || (op.Code == opRead && op.Dst&3 != 0) {
		return fmt.Errorf("nvme: host address not dword aligned: %w", backend.ErrAlignment)
	}
	op.Path = backend.PathDMA
	return nil
}

// Execute implements backend.Backend; Prepare never makes an inline op.
func (b *Backend) Execute(*backend.Op) (uint32, backend.Status) { return 0, backend.StatusCanceled }

// Forward implements backend.Backend: one submission entry (its PRPs built
// in the command slot's list page), no doorbell.
func (b *Backend) Forward(tag uint64, op *backend.Op, last bool) bool {
	if b.stalled || b.q.Free() == 0 {
		return false
	}
	t := drv.Transfer{Opcode: spec.OpWrite, Offset: op.Dst, IOVA: op.Src, Len: int(op.Len)}
	if op.Code == opRead {
		t = drv.Transfer{Opcode: spec.OpRead, Offset: op.Src, IOVA: op.Dst, Len: int(op.Len)}
	}
	// Prepare checked the namespace side, the engine the host side (a
	// live block of a mapped arena).
	cid, err := b.q.SubmitTransferUnchecked(t, tag)
	if err != nil {
		b.log.Warn("nvme: submit", "err", err)
		return false
	}
	b.lens[cid] = op.Len
	b.queued++
	b.unrung++
	return true
}

// Flush implements backend.Backend: one 32-bit MMIO store of the SQ tail —
// or none while Config.DeferDoorbell commands or more are in flight at the
// controller: the next Reap rings for everything forwarded until then.
func (b *Backend) Flush() {
	if b.queued == 0 {
		return
	}
	b.queued = 0
	if deferRing(b.q.Outstanding()-b.unrung, b.cfg.DeferDoorbell) {
		b.deferred = true
		b.deferredRings++
		return
	}
	b.ring()
}

// deferRing says whether Flush may leave the doorbell to the next Reap with
// atController commands rung and not yet reaped: only while at least
// threshold (≥ 1) are, so that a completion is sure to come and bring
// the Reap that rings — never with the controller idle.
func deferRing(atController, threshold int) bool {
	return threshold > 0 && atController >= threshold
}

// ring stores the SQ tail: the commands forwarded so far go to the
// controller.
func (b *Backend) ring() {
	b.deferred = false
	if b.unrung == 0 {
		return
	}
	b.unrung = 0
	if err := b.q.Ring(); err != nil {
		b.log.Warn("nvme: doorbell failed", "err", err)
		b.stalled = true
		return
	}
	b.ctr.Doorbells++
}

// Deferred is how many Flushes left their doorbell to the next Reap
// (Config.DeferDoorbell); owner only, like the engine's counters.
func (b *Backend) Deferred() uint64 { return b.deferredRings }

// Reap implements backend.Backend: a doorbell Flush deferred first (the
// controller starts on it while the completions are read), then
// completions by phase tag, one CQ head store per batch.
func (b *Backend) Reap(out []backend.Completion) int {
	if b.deferred {
		b.ring()
	}
	n, err := b.q.Reap(b.cpl[:min(len(out), len(b.cpl))])
	if err != nil {
		b.log.Warn("nvme: completion doorbell failed", "err", err)
		b.stalled = true
	}
	for i := range n {
		out[i] = b.completion(&b.cpl[i])
	}
	return n
}

func (b *Backend) completion(c *drv.Completion) backend.Completion {
	ec := backend.Completion{Tag: c.Tag}
	switch {
	case c.Status.OK():
		ec.N = b.lens[c.CID]
	case c.Status == drv.StatusReset:
		// Only Check (a stall) and Cancel (which relabels) reset.
		ec.Status = backend.StatusTimeout
	default:
		ec.Status = statusDevice + backend.Status(c.Status&0x7ff)
	}
	return ec
}

// Check implements backend.Backend: a command outstanding longer than the
// timeout (or a failed doorbell) resets the controller; every transfer in
// flight then completes exactly once through Reap, as a timeout.
func (b *Backend) Check() {
	if !b.stalled && !b.q.Expired(b.cfg.Timeout) {
		return
	}
	b.stalled = true
	if time.Now().Before(b.nextTry) {
		return
	}
	inFlight := b.q.Outstanding()
	// A reset fails every command the queue holds, rung or not.
	b.unrung, b.queued, b.deferred = 0, 0, false
	if err := b.c.Reset(); err != nil {
		b.log.Warn("nvme: controller reset failed; retrying in 100ms", "device", b.desc.Device, "err", err)
		b.nextTry = time.Now().Add(100 * time.Millisecond)
		return
	}
	b.stalled = false
	b.ctr.Recoveries++
	b.log.Warn("nvme: controller reset after a stall", "device", b.desc.Device, "outstanding", inFlight, "timeout", b.cfg.Timeout)
}

// Outstanding implements backend.Backend.
func (b *Backend) Outstanding() int { return b.q.Outstanding() }

// ReadyFD implements backend.Backend: the queue's MSI-X eventfd.
func (b *Backend) ReadyFD() (int, bool) {
	if ev := b.q.EventFD(); ev != nil {
		return ev.Fd(), true
	}
	return -1, false
}

// Cancel implements backend.Backend: a controller reset ends what is in
// flight; completions posted before it stay as they were, the rest are
// canceled.
func (b *Backend) Cancel(out []backend.Completion) int {
	if b.q.Outstanding() > 0 {
		b.unrung, b.queued, b.deferred = 0, 0, false
		if err := b.c.Reset(); err != nil {
			b.log.Warn("nvme: close: controller reset", "device", b.desc.Device, "err", err)
		}
	}
	n := 0
	for n < len(out) {
		k, err := b.q.Reap(b.cpl[:min(len(out)-n, len(b.cpl))])
		if err != nil || k == 0 {
			break
		}
		for i := range k {
			c := b.completion(&b.cpl[i])
			if b.cpl[i].Status == drv.StatusReset {
				c.Status = backend.StatusCanceled
			}
			out[n+i] = c
		}
		n += k
	}
	return n
}

// Close implements backend.Backend: the controller (shut down), the DMA
// mappings and (with Config.CloseDevice) the device.
func (b *Backend) Close() error {
	var errs []error
	if b.c != nil {
		errs = append(errs, b.c.Close())
	}
	if b.dma != nil {
		errs = append(errs, b.dma.Close())
	}
	if b.cfg.CloseDevice && b.dev != nil {
		errs = append(errs, b.dev.Close())
	}
	b.c, b.dma, b.dev = nil, nil, nil
	return errors.Join(errs...)
}
