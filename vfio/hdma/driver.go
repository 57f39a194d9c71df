package hdma

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/ring"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
)

// Config configures the driver. The zero value is usable.
type Config struct {
	// Timeout is how long a descriptor may stay outstanding before
	// CheckTimeout reports its queue stalled (default 2s).
	Timeout time.Duration
	// ReadyTimeout bounds the enable and reset handshakes (default 2s).
	ReadyTimeout time.Duration
	// Logger receives rare events (resets, recoveries); default slog.Default().
	Logger *slog.Logger
}

// Info is what identification found.
type Info struct {
	Version         uint32
	Queues          int    // queue pairs (and MSI vectors)
	MaxQueueEntries int    // largest ring size
	DevMemSize      uint64 // bytes of device memory (BAR2)
	MaxTransfer     uint32 // largest len per descriptor (MAX_LEN)
}

// Driver drives one HDMA device. Open, SetupQueue, Enable, Reset, Recover
// and Close must not run concurrently with each other or with the queues'
// methods; each Queue belongs to one goroutine at a time.
type Driver struct {
	dev    vfio.Device
	bar0   vfio.Region
	bar2   vfio.Region
	cfg    Config
	log    *slog.Logger
	info   Info
	queues []*Queue
	epoch  time.Time

	enabled bool
	closed  bool
	// blocked refuses submissions: blockRecover after a queue reaped a
	// status-4 completion or found a timeout (the device is, or must be,
	// reset) until Recover; blockClosed after Close. Queues load it on
	// every Enqueue, from their own goroutines.
	blocked  atomic.Uint32
	recovers atomic.Uint64
}

const (
	blockNone uint32 = iota
	blockRecover
	blockClosed
)

// Open identifies the device behind dev and resets it. The caller keeps
// ownership of dev (Close does not close it).
func Open(dev vfio.Device, cfg Config) (*Driver, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout < 0 || cfg.ReadyTimeout < 0 {
		return nil, fmt.Errorf("hdma: negative timeout in %+v: %w", cfg, nested(ErrBadConfig))
	}
	name := dev.Info().Name
	bar0, err := dev.Region(vfio.RegionBAR0)
	if err != nil {
		return nil, fmt.Errorf("hdma: open %s: BAR0: %w", name, err)
	}
	if bar0.Size() < model.Bar0Size {
		return nil, fmt.Errorf("hdma: open %s: BAR0 is %d bytes, the model needs %d: %w", name, bar0.Size(), model.Bar0Size, nested(ErrNotHDMA))
	}
	d := &Driver{dev: dev, bar0: bar0, cfg: cfg, log: cfg.Logger.With("device", name), epoch: time.Now()}
	id, err := bar0.Read32(model.RegID)
	if err != nil {
		return nil, fmt.Errorf("hdma: open %s: read ID: %w", name, err)
	}
	if id != model.IDValue {
		return nil, fmt.Errorf("hdma: open %s: ID register %#x, want %#x: %w", name, id, model.IDValue, nested(ErrNotHDMA))
	}
	if d.info.Version, err = bar0.Read32(model.RegVersion); err != nil {
		return nil, fmt.Errorf("hdma: open %s: read VERSION: %w", name, err)
	}
	if d.info.Version != model.Version {
		return nil, fmt.Errorf("hdma: open %s: model version %d, driver knows %d: %w", name, d.info.Version, model.Version, nested(ErrVersion))
	}
	caps, err := bar0.Read32(model.RegCaps)
	if err != nil {
		return nil, fmt.Errorf("hdma: open %s: read CAPS: %w", name, err)
	}
	q, l := model.Caps(caps)
	if q == 0 || q > model.MaxQueues || l == 0 || l > 31 {
		return nil, fmt.Errorf("hdma: open %s: CAPS %#x (%d queues, 2^%d entries) is not sane: %w", name, caps, q, l, nested(ErrNotHDMA))
	}
	d.info.Queues, d.info.MaxQueueEntries = q, 1<<l
	if d.info.DevMemSize, err = bar0.Read64(model.RegDevMemSize); err != nil {
		return nil, fmt.Errorf("hdma: open %s: read DEVMEM_SIZE: %w", name, err)
	}
	if d.info.MaxTransfer, err = bar0.Read32(model.RegMaxLen); err != nil {
		return nil, fmt.Errorf("hdma: open %s: read MAX_LEN: %w", name, err)
	}
	if d.info.DevMemSize > 0 {
		if d.bar2, err = dev.Region(vfio.RegionBAR2); err != nil {
			return nil, fmt.Errorf("hdma: open %s: BAR2 (device memory): %w", name, err)
		}
	}
	d.queues = make([]*Queue, q)
	if err := d.Reset(); err != nil {
		return nil, err
	}
	return d, nil
}

// Info reports what identification found.
func (d *Driver) Info() Info { return d.info }

// DeviceMemory is device memory (BAR2) when the CPU may access it directly,
// else nil: the GDRCopy-style path for small payloads.
func (d *Driver) DeviceMemory() []byte {
	if d.bar2 == nil {
		return nil
	}
	return d.bar2.Mapped()
}

// DeviceRegion is the BAR2 region (nil when the device has no memory).
func (d *Driver) DeviceRegion() vfio.Region { return d.bar2 }

// Queue returns queue i if it was set up.
func (d *Driver) Queue(i int) *Queue {
	if i < 0 || i >= len(d.queues) {
		return nil
	}
	return d.queues[i]
}

// Recoveries counts completed Recover calls.
func (d *Driver) Recoveries() uint64 { return d.recovers.Load() }

// now is the driver's monotonic clock in nanoseconds (no allocation).
func (d *Driver) now() int64 { return int64(time.Since(d.epoch)) + 1 }

// Status reads STATUS and FAULT_ADDR.
func (d *Driver) Status() (status uint32, faultAddr uint64, err error) {
	if status, err = d.bar0.Read32(model.RegStatus); err != nil {
		return 0, 0, fmt.Errorf("hdma: read STATUS: %w", err)
	}
	if faultAddr, err = d.bar0.Read64(model.RegFaultAddr); err != nil {
		return 0, 0, fmt.Errorf("hdma: read FAULT_ADDR: %w", err)
	}
	return status, faultAddr, nil
}

// Healthy is nil when the device is enabled and ready, ErrFatal (with
// FAULT_ADDR) when it halted, ErrNotReady when it is disabled (after a
// reset it initiated, for instance).
func (d *Driver) Healthy() error {
	st, fa, err := d.Status()
	if err != nil {
		return err
	}
	switch {
	case st&model.StatusFatal != 0:
		return fmt.Errorf("hdma: STATUS %#x, FAULT_ADDR %#x: %w", st, fa, nested(ErrFatal))
	case st&model.StatusReady == 0:
		return fmt.Errorf("hdma: STATUS %#x: %w", st, nested(ErrNotReady))
	}
	return nil
}

// waitStatus polls STATUS until cond holds or ReadyTimeout passes.
func (d *Driver) waitStatus(what string, cond func(uint32) bool) error {
	deadline := time.Now().Add(d.cfg.ReadyTimeout)
	for sleep := time.Microsecond; ; sleep = min(2*sleep, time.Millisecond) {
		st, err := d.bar0.Read32(model.RegStatus)
		if err != nil {
			return fmt.Errorf("hdma: %s: read STATUS: %w", what, err)
		}
		if cond(st) {
			return nil
		}
		if st&model.StatusFatal != 0 && what == "enable" {
			_, fa, _ := d.Status()
			return fmt.Errorf("hdma: %s: STATUS %#x, FAULT_ADDR %#x: %w", what, st, fa, nested(ErrFatal))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hdma: %s: STATUS %#x after %v: %w", what, st, d.cfg.ReadyTimeout, nested(ErrNotReady))
		}
		time.Sleep(sleep)
	}
}

// Reset resets the device through CONTROL.reset and waits until STATUS
// reads 0. If the device does not come back, it falls back to a
// function-level reset (vfio.Device.Reset) when the device supports one.
// Queues keep their configuration in the driver; Enable reprograms them.
func (d *Driver) Reset() error {
	if d.closed {
		return fmt.Errorf("hdma: reset: driver %w", ErrClosed)
	}
	d.enabled = false
	if err := d.bar0.Write32(model.RegControl, model.ControlReset); err != nil {
		return fmt.Errorf("hdma: reset: write CONTROL: %w", err)
	}
	err := d.waitStatus("reset", func(st uint32) bool { return st == 0 })
	if err != nil && d.dev.Info().CanReset {
		d.log.Warn("controller reset did not complete; function-level reset", "err", err)
		if ferr := d.dev.Reset(); ferr != nil {
			return fmt.Errorf("hdma: reset: %w; function-level reset: %w", nested(err), ferr)
		}
		err = d.waitStatus("function-level reset", func(st uint32) bool { return st == 0 })
	}
	return err
}

// Enable routes MSI vectors to the eventfds of the queues that asked for
// interrupts, programs every queue set up, sets CONTROL.enable and waits for
// STATUS.ready. A queue used since it was set up (Enable after Reset) is
// first returned to its initial state as Recover does: what the device
// completed and everything outstanding come out of the next Reap calls,
// the latter failed with ErrDeviceReset.
func (d *Driver) Enable() error {
	if d.closed {
		return fmt.Errorf("hdma: enable: driver %w", ErrClosed)
	}
	if d.enabled {
		return nil
	}
	fds := make([]int, 0, len(d.queues))
	anyIRQ := false
	for _, q := range d.queues {
		fd := -1
		if q != nil && q.efd >= 0 {
			fd, anyIRQ = q.efd, true
		}
		fds = append(fds, fd)
	}
	if anyIRQ {
		if err := d.dev.SetIRQs(vfio.IRQMSI, 0, fds); err != nil {
			return fmt.Errorf("hdma: enable: route MSI vectors: %w", err)
		}
	}
	for _, q := range d.queues {
		if q == nil {
			continue
		}
		// The device starts every queue at SQ head 0, CQ tail 0, phase 1.
		// A queue used before a bare Reset (Recover has done this
		// already) must start there too, or the device would fetch and
		// run again the descriptors in slots 0..tail, and the host would
		// look for completions where the device does not write them.
		if !q.pristine() {
			q.abort()
		}
		if err := q.program(); err != nil {
			return err
		}
	}
	if err := d.bar0.Write32(model.RegControl, model.ControlEnable); err != nil {
		return fmt.Errorf("hdma: enable: write CONTROL: %w", err)
	}
	if err := d.waitStatus("enable", func(st uint32) bool { return st&model.StatusReady != 0 }); err != nil {
		return err
	}
	d.enabled = true
	d.blocked.Store(blockNone)
	return nil
}

// Recover brings the device back after a reset it initiated, a fatal fault
// or a stall: it resets the device (which completes what it can with status
// 4), collects every completion the device wrote, fails every descriptor
// still outstanding — ErrTimeout for one CheckTimeout reported, else
// ErrDeviceReset — exactly once, returns the rings to their initial state,
// and enables the device again. The failed completions come out of the
// queues' next Reap calls. Callers quiesce the queues first.
func (d *Driver) Recover() error {
	if d.closed {
		return fmt.Errorf("hdma: recover: driver %w", ErrClosed)
	}
	st, fa, _ := d.Status()
	d.log.Warn("recovering device", "status", st, "fault_addr", fa)
	if err := d.Reset(); err != nil {
		return fmt.Errorf("hdma: recover: %w", nested(err))
	}
	for _, q := range d.queues {
		if q != nil {
			q.abort()
		}
	}
	if err := d.Enable(); err != nil {
		return fmt.Errorf("hdma: recover: %w", nested(err))
	}
	d.recovers.Add(1)
	return nil
}

// Quiesce stops the device for good before its memory is released: it
// resets the device (which completes what it can with status 4), collects
// every completion the device wrote and fails every descriptor still
// outstanding with ErrDeviceReset, exactly once — among them descriptors
// the host published after the device had reset itself and which it will
// therefore never fetch. The completions come out of the queues' next Reap
// calls; the device stays disabled (Enable brings it back). If the reset
// fails, nothing is failed: the device may still own those descriptors.
func (d *Driver) Quiesce() error {
	if d.closed {
		return fmt.Errorf("hdma: quiesce: driver %w", ErrClosed)
	}
	if err := d.Reset(); err != nil {
		return fmt.Errorf("hdma: quiesce: %w", nested(err))
	}
	for _, q := range d.queues {
		if q != nil {
			q.abort()
		}
	}
	return nil
}

// Close resets the device, unroutes its interrupts and closes the queues'
// eventfds. It does not fail outstanding descriptors itself: the reset
// completes with status 4 what the device had been given (where its
// completion ring has room), and Reap still hands those out; descriptors
// enqueued and never submitted get no completion. To collect everything,
// Reset and Reap before Close. It does not close the vfio.Device.
func (d *Driver) Close() error {
	if d.closed {
		return nil
	}
	var errs []error
	if err := d.Reset(); err != nil {
		errs = append(errs, err)
	}
	d.closed = true
	d.blocked.Store(blockClosed)
	if err := d.dev.SetIRQs(vfio.IRQMSI, 0, nil); err != nil && !errors.Is(err, vfio.ErrClosed) {
		errs = append(errs, fmt.Errorf("hdma: close: unroute MSI: %w", err))
	}
	for _, q := range d.queues {
		if q != nil && q.efd >= 0 {
			if err := unix.Close(q.efd); err != nil {
				errs = append(errs, fmt.Errorf("hdma: close queue %d eventfd: %w", q.idx, err))
			}
			q.efd = -1
		}
	}
	return errors.Join(errs...)
}

// QueueConfig describes one queue pair. The rings live in caller memory that
// the caller has mapped for the device: SQ readable by the device (at
// SQIOVA), CQ writable (at CQIOVA). Both are 64-byte aligned IOVAs.
type QueueConfig struct {
	// Index is the queue number, 0 ≤ Index < Info().Queues.
	Index int
	// Entries is the ring size (power of two, 2..Info().MaxQueueEntries);
	// at most Entries-1 descriptors are outstanding.
	Entries int
	// SQ holds at least Entries*64 bytes; SQIOVA is its IOVA.
	SQ     []byte
	SQIOVA uint64
	// CQ holds at least Entries*16 bytes; CQIOVA is its IOVA.
	CQ     []byte
	CQIOVA uint64
	// Interrupts creates an eventfd, routes the queue's MSI vector to it
	// and enables the queue's IRQ register.
	Interrupts bool
}

// SetupQueue prepares a queue while the device is disabled (after Open,
// Reset, or before Enable). Setting up an index again replaces it.
func (d *Driver) SetupQueue(cfg QueueConfig) (*Queue, error) {
	if d.closed {
		return nil, fmt.Errorf("hdma: setup queue: driver %w", ErrClosed)
	}
	if d.enabled {
		return nil, fmt.Errorf("hdma: setup queue %d: %w", cfg.Index, nested(ErrEnabled))
	}
	n := cfg.Entries
	switch {
	case cfg.Index < 0 || cfg.Index >= d.info.Queues:
		return nil, fmt.Errorf("hdma: setup queue %d: the device has %d queues: %w", cfg.Index, d.info.Queues, nested(ErrBadConfig))
	case n < 2 || n > d.info.MaxQueueEntries || n&(n-1) != 0:
		return nil, fmt.Errorf("hdma: setup queue %d: %d entries, want a power of two in 2..%d: %w", cfg.Index, n, d.info.MaxQueueEntries, nested(ErrBadConfig))
	case len(cfg.SQ) < n*model.DescSize || len(cfg.CQ) < n*model.CplSize:
		return nil, fmt.Errorf("hdma: setup queue %d: SQ %d bytes, CQ %d bytes, %d entries need %d and %d: %w",
			cfg.Index, len(cfg.SQ), len(cfg.CQ), n, n*model.DescSize, n*model.CplSize, nested(ErrBadConfig))
	case cfg.SQIOVA%model.DescSize != 0 || cfg.CQIOVA%model.DescSize != 0:
		return nil, fmt.Errorf("hdma: setup queue %d: ring IOVAs %#x, %#x must be 64-byte aligned: %w", cfg.Index, cfg.SQIOVA, cfg.CQIOVA, nested(ErrBadConfig))
	}
	cq, err := ring.NewCompletionRing(cfg.CQ[:n*model.CplSize:n*model.CplSize], model.CplSize, model.CplPhase)
	if err != nil {
		return nil, fmt.Errorf("hdma: setup queue %d: completion ring: %w: %w", cfg.Index, nested(ErrBadConfig), err)
	}
	q := &Queue{
		d: d, bar0: d.bar0, idx: cfg.Index,
		sq: cfg.SQ[: n*model.DescSize : n*model.DescSize], sqIOVA: cfg.SQIOVA,
		cq: cq, cqIOVA: cfg.CQIOVA,
		entries: uint32(n), mask: uint32(n - 1),
		slots:     make([]slot, n),
		failed:    make([]Completion, n),
		sqTailReg: model.QueueReg(cfg.Index, model.QSQTail),
		cqHeadReg: model.QueueReg(cfg.Index, model.QCQHead),
		efd:       -1,
		irq:       cfg.Interrupts,
		headBatch: max(1, n/4),
	}
	if old := d.queues[cfg.Index]; old != nil && old.efd >= 0 {
		if cfg.Interrupts {
			q.efd, old.efd = old.efd, -1
		} else {
			unix.Close(old.efd)
		}
	}
	if cfg.Interrupts && q.efd < 0 {
		if q.efd, err = newEventfd(); err != nil {
			return nil, fmt.Errorf("hdma: setup queue %d: eventfd: %w", cfg.Index, err)
		}
	}
	clear(q.sq)
	d.queues[cfg.Index] = q
	return q, nil
}
