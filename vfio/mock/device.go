package mock

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
)

// Identity the mock reports in DeviceInfo.
const (
	VendorID = 0x1234 // QEMU's vendor ID, as edu uses; the mock never meets real hardware
	DeviceID = 0x4844 // "HD"
)

// Config configures a mock device. The zero value is a usable device.
type Config struct {
	// Name is DeviceInfo.Name (default "vfio-mock0").
	Name string
	// Queues is the number of queue pairs and MSI vectors (default 4,
	// at most model.MaxQueues).
	Queues int
	// MaxQueueEntriesLog2 is log2 of the largest ring size (default 12:
	// 4096 entries; at most 16).
	MaxQueueEntriesLog2 int
	// DevMemSize is the size of device memory, BAR2 (default 16 MiB),
	// mapped off the Go heap.
	DevMemSize int
	// MaxTransfer is the largest len one descriptor may carry, the MAX_LEN
	// register (default 16 MiB).
	MaxTransfer uint32
	// IOVARanges are the IOVA ranges MapDMA accepts (default one range,
	// [0x1000, 2^48-1]).
	IOVARanges []vfio.IOVARange
	// Spin is how long the device worker polls for a doorbell after
	// running out of work before it sleeps (default 100µs; negative: never
	// spin). Spinning keeps the doorbell-to-fetch latency near a cache
	// miss, so benchmarks measure the host side.
	Spin time.Duration
	// Inline makes the device do its work inside the register write that
	// rings a doorbell (or enables it), on the caller's goroutine, instead
	// of on a worker goroutine: single-threaded and deterministic. A
	// benchmark then measures the whole software path (driver and device)
	// as CPU time, without cross-thread wake-ups or cache-line transfers
	// that depend on the machine's load. A latency fault's descriptor
	// completes at the first doorbell after its deadline.
	Inline bool
	// Seed seeds the generator behind rate-based fault injection.
	Seed uint64
	// LateAfter, when positive, makes the device time every descriptor
	// from the SQ_TAIL doorbell that published it to its completion and
	// count those that took longer (Counters.Late): a device model shares
	// the host's CPUs, and on an overloaded machine it can be slower than
	// a host's stall timeout without any injected fault. An injected
	// latency is not counted against a descriptor, an injected stall never
	// completes. Zero (the default) keeps no timestamps.
	LateAfter time.Duration
	// Logger receives the device's rare events (fatal faults, resets);
	// default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Name == "" {
		c.Name = "vfio-mock0"
	}
	if c.Queues == 0 {
		c.Queues = 4
	}
	if c.MaxQueueEntriesLog2 == 0 {
		c.MaxQueueEntriesLog2 = 12
	}
	if c.DevMemSize == 0 {
		c.DevMemSize = 16 << 20
	}
	if c.MaxTransfer == 0 {
		c.MaxTransfer = 16 << 20
	}
	if c.IOVARanges == nil {
		c.IOVARanges = []vfio.IOVARange{{Start: 0x1000, End: 1<<48 - 1}}
	}
	if c.Spin == 0 {
		c.Spin = 100 * time.Microsecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Queues < 1 || c.Queues > model.MaxQueues:
		return fmt.Errorf("mock: %d queues, want 1..%d: %w", c.Queues, model.MaxQueues, ErrBadConfig)
	case c.MaxQueueEntriesLog2 < 1 || c.MaxQueueEntriesLog2 > 16:
		return fmt.Errorf("mock: max queue entries 2^%d, want 2^1..2^16: %w", c.MaxQueueEntriesLog2, ErrBadConfig)
	case c.DevMemSize < 0:
		return fmt.Errorf("mock: device memory size %d: %w", c.DevMemSize, ErrBadConfig)
	}
	for _, r := range c.IOVARanges {
		if r.End < r.Start {
			return fmt.Errorf("mock: IOVA range [%#x, %#x] is empty: %w", r.Start, r.End, ErrBadConfig)
		}
	}
	return nil
}

// queue is the device-side state of one queue pair, latched from the queue
// registers at enable. Guarded by Device.mu.
type queue struct {
	active         bool
	sqBase, cqBase uint64
	sqSize, cqSize uint32
	sqHead         uint32 // next submission entry to fetch
	cqTail         uint32 // next completion entry to write
	phase          uint32 // phase of the entries written on this pass (1 first)
	seq            uint64 // descriptors fetched since enable

	// A fetched descriptor that has not completed: delayed (latency
	// fault, ready at heldReady) or stalled forever.
	held      bool
	heldStall bool
	heldRZ    bool // its reserved bytes were zero
	heldReady time.Time
	heldDesc  model.Descriptor
	heldPub   int64         // when heldDesc was published (Config.LateAfter)
	heldLate  time.Duration // the injected latency heldDesc is excused

	// Publication times for Config.LateAfter: pubAt[i] is when entry i
	// was published (nil when LateAfter is 0); entries before seenTail
	// have theirs; lastPub is the last time handed out.
	pubAt    []int64
	seenTail uint32
	lastPub  int64

	irqPending bool
}

// Device is vfio-mock: a software HDMA device behind vfio.Device.
//
// Threading: one device worker goroutine per Device does all device-side work
// (descriptor fetch, validation, IOMMU translation, data copies, completion
// writes, MSIs). Doorbell writes (SQ_TAIL, CQ_HEAD) are lock-free: an atomic
// register store, a doorbell counter bump, and a wake-up of the worker only
// when it sleeps. The worker holds Device.mu while it runs a pass over the
// queues; everything else that changes device state (CONTROL, queue
// configuration, MapDMA/UnmapDMA, SetIRQs, Reset, fault rules) takes mu too,
// so it happens between passes and never under a copy in progress. After a
// pass without work the worker spins on the doorbell counter for Config.Spin,
// then sleeps until a doorbell, a latency deadline or Close.
type Device struct {
	cfg  Config
	info vfio.DeviceInfo
	log  *slog.Logger

	regs      [model.Bar0Size / 4]atomic.Uint32
	faultAddr atomic.Uint64
	devmem    []byte
	maxLen    uint64
	bar0      *bar0Region
	bar2      *bar2Region
	qctr      []queueCounters
	ctr       counters

	mu      sync.Mutex
	enabled bool
	queues  []queue
	iommu   iommu
	msi     []int // eventfd per MSI vector, -1 when not routed
	rules   []*rule
	rng     *rand.Rand
	injLog  [injectionLogSize]Injection
	injN    uint64
	one     [8]byte // the 8-byte eventfd increment

	epoch    time.Time     // the device clock's zero (Config.LateAfter)
	sleeps   atomic.Uint64 // worker sleeps (counted outside mu)
	bell     atomic.Uint64 // bumped by every doorbell write
	sleeping atomic.Bool   // the worker is about to sleep or sleeps
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	closed   atomic.Bool
	once     sync.Once
}

var _ vfio.Device = (*Device)(nil)

// New creates a mock device and starts its worker. Close stops it.
func New(cfg Config) (*Device, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	d := &Device{
		cfg: cfg,
		info: vfio.DeviceInfo{
			Name: cfg.Name, VendorID: VendorID, DeviceID: DeviceID,
			NumRegions: vfio.RegionConfig + 1, NumIRQs: int(vfio.IRQMSIX) + 1, CanReset: true,
		},
		log:    cfg.Logger.With("device", cfg.Name),
		epoch:  time.Now(),
		maxLen: uint64(cfg.MaxTransfer),
		qctr:   make([]queueCounters, cfg.Queues),
		queues: make([]queue, cfg.Queues),
		msi:    make([]int, cfg.Queues),
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	d.one[0] = 1
	if cfg.DevMemSize > 0 {
		// Device memory lives off the Go heap, like a BAR mapping: the
		// host synchronizes with the device through the completion
		// ring (memory the race detector does not see either), so
		// heap memory here would only produce false race reports.
		mem, err := unix.Mmap(-1, 0, cfg.DevMemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("mock: map %d bytes of device memory: %w", cfg.DevMemSize, err)
		}
		// A BAR is one physically contiguous range; transparent
		// hugepages make the model's device memory contiguous in 2 MiB
		// pieces too, where 4 KiB pages would land anywhere and make
		// its copies' cache behaviour differ from one device to the
		// next. Only advice: without THP it stays 4 KiB pages.
		_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
		d.devmem = mem
	}
	for i := range d.msi {
		d.msi[i] = -1
	}
	d.bar0 = &bar0Region{d: d}
	d.bar2 = &bar2Region{d: d, mem: d.devmem}
	d.regs[model.RegID/4].Store(model.IDValue)
	d.regs[model.RegVersion/4].Store(model.Version)
	d.regs[model.RegCaps/4].Store(model.MakeCaps(cfg.Queues, cfg.MaxQueueEntriesLog2))
	d.regs[model.RegDevMemSize/4].Store(uint32(uint64(cfg.DevMemSize)))
	d.regs[model.RegDevMemSize/4+1].Store(uint32(uint64(cfg.DevMemSize) >> 32))
	d.regs[model.RegMaxLen/4].Store(cfg.MaxTransfer)
	if cfg.Inline {
		close(d.done)
	} else {
		go d.run()
	}
	return d, nil
}

// Info describes the device.
func (d *Device) Info() vfio.DeviceInfo { return d.info }

// Region returns BAR0 (registers) or BAR2 (device memory); other indices
// are ErrNoRegion.
func (d *Device) Region(index int) (vfio.Region, error) {
	if d.closed.Load() {
		return nil, fmt.Errorf("mock: region %d: %w", index, vfio.ErrClosed)
	}
	switch index {
	case vfio.RegionBAR0:
		return d.bar0, nil
	case vfio.RegionBAR2:
		return d.bar2, nil
	}
	return nil, fmt.Errorf("mock: region %d: %w", index, vfio.ErrNoRegion)
}

// IOVARanges lists the IOVA ranges MapDMA accepts.
func (d *Device) IOVARanges() []vfio.IOVARange {
	return append([]vfio.IOVARange(nil), d.cfg.IOVARanges...)
}

// MapDMA adds mem at iova to the emulated IOMMU. The device can reach exactly
// mem[:len(mem)] through it, never the slice's spare capacity.
func (d *Device) MapDMA(iova uint64, mem []byte, access vfio.Access) error {
	if d.closed.Load() {
		return fmt.Errorf("mock: map DMA %#x: %w", iova, vfio.ErrClosed)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.iommu.add(iova, mem, access, d.cfg.IOVARanges)
}

// UnmapDMA removes the mapping [iova, iova+size) exactly as mapped. When it
// returns, the device no longer touches that memory.
func (d *Device) UnmapDMA(iova, size uint64) error {
	if d.closed.Load() {
		return fmt.Errorf("mock: unmap DMA %#x: %w", iova, vfio.ErrClosed)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.iommu.remove(iova, size)
}

// IRQCount: the mock offers one MSI vector per queue, no INTx, no MSI-X.
func (d *Device) IRQCount(kind vfio.IRQKind) int {
	if kind == vfio.IRQMSI {
		return d.cfg.Queues
	}
	return 0
}

// SetIRQs routes MSI vectors start.. to eventfds (-1 leaves a vector
// unrouted); nil or empty eventfds unroutes them all. The device signals a
// vector by writing an 8-byte 1 to its eventfd, as the kernel does.
//
// Like the kernel, which takes a reference to every eventfd it routes, the
// mock keeps its own duplicate of each one until the vector is unrouted or
// the device closed: a host that closes its descriptor early does not make
// the device write into whatever file reuses the number. A descriptor that
// is closed (EBADF) or is not an eventfd (EINVAL) is refused, as the kernel
// refuses it; nothing changes then.
func (d *Device) SetIRQs(kind vfio.IRQKind, start int, eventfds []int) error {
	if d.closed.Load() {
		return fmt.Errorf("mock: set IRQs: %w", vfio.ErrClosed)
	}
	if kind != vfio.IRQMSI {
		if len(eventfds) == 0 {
			return nil
		}
		return fmt.Errorf("mock: set %v IRQs: the mock has only MSI: %w", kind, vfio.ErrNoIRQ)
	}
	if len(eventfds) > 0 && (start < 0 || start+len(eventfds) > d.cfg.Queues) {
		return fmt.Errorf("mock: set MSI vectors %d..%d of %d: %w", start, start+len(eventfds)-1, d.cfg.Queues, vfio.ErrNoIRQ)
	}
	dups := make([]int, len(eventfds))
	for i, fd := range eventfds {
		dups[i] = -1
		if fd < 0 {
			continue
		}
		dup, err := dupEventfd(fd)
		if err != nil {
			closeFDs(dups[:i])
			return fmt.Errorf("mock: set MSI vector %d to fd %d: %w", start+i, fd, err)
		}
		dups[i] = dup
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() { // Close ran meanwhile: it already dropped the routing
		closeFDs(dups)
		return fmt.Errorf("mock: set IRQs: %w", vfio.ErrClosed)
	}
	if len(eventfds) == 0 {
		d.unrouteLocked()
		return nil
	}
	for i, dup := range dups {
		if old := d.msi[start+i]; old >= 0 {
			unix.Close(old)
		}
		d.msi[start+i] = dup
	}
	return nil
}

// unrouteLocked unroutes every MSI vector and closes the device's eventfd
// duplicates.
func (d *Device) unrouteLocked() {
	closeFDs(d.msi)
	for i := range d.msi {
		d.msi[i] = -1
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// UnmaskIRQ is a no-op for MSI (never masked); other kinds do not exist.
func (d *Device) UnmaskIRQ(kind vfio.IRQKind, index int) error {
	if kind == vfio.IRQMSI && index >= 0 && index < d.cfg.Queues {
		return nil
	}
	return fmt.Errorf("mock: unmask %v vector %d: %w", kind, index, vfio.ErrNoIRQ)
}

// Reset is a function-level reset (VFIO_DEVICE_RESET): the device forgets
// everything in flight without writing completions, its registers return to
// their reset values, DMA mappings and MSI routing stay.
func (d *Device) Reset() error {
	if d.closed.Load() {
		return fmt.Errorf("mock: reset: %w", vfio.ErrClosed)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resetLocked(false)
	return nil
}

// Close stops the worker, unroutes interrupts, drops every DMA mapping and
// unmaps device memory: like a kernel BAR mapping, a slice from
// Region(RegionBAR2).Mapped() must not be used after Close. Register and
// device-memory accesses after Close return vfio.ErrClosed; one racing with
// Close may touch unmapped device memory (as with a kernel device's BAR), so
// the caller stops its users first. Closing twice is harmless.
func (d *Device) Close() (err error) {
	d.once.Do(func() {
		d.closed.Store(true)
		close(d.stop)
		<-d.done
		d.mu.Lock()
		defer d.mu.Unlock()
		d.resetLocked(false)
		d.iommu.maps = nil
		d.unrouteLocked()
		if d.devmem != nil {
			err = unix.Munmap(d.devmem)
		}
	})
	return err
}

// InjectFault adds a fault-injection rule.
func (d *Device) InjectFault(f Fault) error {
	if err := f.validate(); err != nil {
		return err
	}
	if f.Kind == FaultError && f.Status == model.StatusOK {
		f.Status = model.StatusDeviceError
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rules = append(d.rules, &rule{Fault: f})
	return nil
}

// ClearFaults removes every fault-injection rule. Descriptors already
// delayed or stalled stay so.
func (d *Device) ClearFaults() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rules = nil
}

// Injections returns the faults that fired, oldest first (the latest 1024).
func (d *Device) Injections() []Injection {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.injN
	first := uint64(0)
	if n > injectionLogSize {
		first = n - injectionLogSize
	}
	out := make([]Injection, 0, n-first)
	for i := first; i < n; i++ {
		out = append(out, d.injLog[i%injectionLogSize])
	}
	return out
}

// Mappings returns the number of live DMA mappings.
func (d *Device) Mappings() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.iommu.maps)
}

// ring is the doorbell side effect: count it and wake the worker if it sleeps.
// The worker publishes sleeping=true before re-reading bell, and the doorbell
// bumps bell before reading sleeping (both sequentially consistent atomics),
// so one of the two always sees the other: no lost wake-up.
func (d *Device) ring() {
	d.bell.Add(1)
	if d.sleeping.Load() {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// raiseMSILocked signals MSI vector v.
func (d *Device) raiseMSILocked(v int) {
	if v >= len(d.msi) || d.msi[v] < 0 {
		return
	}
	d.ctr.msis++
	if _, err := unix.Write(d.msi[v], d.one[:]); err != nil {
		d.ctr.msiErrors++
	}
}
