package baseline

import (
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
)

// DefaultStaging is the default size of the staging buffer: the largest
// transfer one call moves.
const DefaultStaging = 1 << 20

// stagingIOVA is where the staging memfd appears to the device. Any
// page-aligned address in the device's IOVA ranges does; this one is far
// from the engine's.
const stagingIOVA = 0x40_0000_0000

// The queue's rings fill the memfd's first pages (hdma.LayoutQueue); the
// staging buffer starts on the page after them.
const (
	ringEntries = 8
	stagingOff  = 2 * 4096 // hdma.QueueBytes(ringEntries): a page per ring (TestLayout)
)

// DeviceConfig configures the traditional device path.
type DeviceConfig struct {
	// Device is the HDMA device (required: vfio.OpenPCI, or mock.New for
	// vfio-mock). It stays the caller's.
	Device vfio.Device
	// Staging is the staging buffer's size in bytes, the largest transfer
	// (default DefaultStaging; rounded up to 4096).
	Staging int
	// Queue is the HDMA queue index (default 0).
	Queue int
	// Logger receives the driver's rare events; default slog.Default().
	Logger *slog.Logger
}

// Device is the traditional path to an HDMA device: a staging memfd the
// device maps, pwrite/pread to fill and drain it, one descriptor and
// doorbell per transfer, a blocking read of the completion eventfd. Its
// methods belong to one goroutine at a time, like a file descriptor used
// with a single outstanding request.
type Device struct {
	dev     vfio.Device
	drv     *hdma.Driver
	q       *hdma.Queue
	memfd   int
	mem     []byte // the memfd's mapping: rings, then staging
	staging int
	devSize uint64
	mapped  bool
	cpl     [1]hdma.Completion
	ev      [8]byte
	closed  bool
}

// OpenDevice sets up the traditional path: the staging memfd, its DMA
// mapping, the driver and one queue with its completion interrupt.
func OpenDevice(cfg DeviceConfig) (_ *Device, err error) {
	if cfg.Staging == 0 {
		cfg.Staging = DefaultStaging
	}
	if cfg.Staging < 0 || cfg.Staging > 1<<30 {
		return nil, fmt.Errorf("baseline: Staging %d bytes: want 1..%d (0 = %d): %w", cfg.Staging, 1<<30, DefaultStaging, ErrBadConfig)
	}
	if cfg.Queue < 0 {
		return nil, fmt.Errorf("baseline: Queue %d: want ≥ 0: %w", cfg.Queue, ErrBadConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Device == nil {
		return nil, fmt.Errorf("baseline: Device is nil: give an HDMA device (mock.New for vfio-mock): %w", ErrBadConfig)
	}
	d := &Device{dev: cfg.Device, memfd: -1, staging: (cfg.Staging + 4095) &^ 4095}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	size := stagingOff + d.staging
	if d.memfd, err = unix.MemfdCreate("hcomm-baseline-staging", unix.MFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("baseline: memfd_create: %w", err)
	}
	if err = unix.Ftruncate(d.memfd, int64(size)); err != nil {
		return nil, fmt.Errorf("baseline: size the %d-byte staging memfd: %w", size, err)
	}
	if d.mem, err = unix.Mmap(d.memfd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("baseline: map the %d-byte staging memfd: %w", size, err)
	}
	if err = d.dev.MapDMA(stagingIOVA, d.mem, vfio.DMAReadWrite); err != nil {
		return nil, fmt.Errorf("baseline: DMA-map the staging memfd at %#x: %w", uint64(stagingIOVA), err)
	}
	d.mapped = true
	qc, err := hdma.LayoutQueue(cfg.Queue, ringEntries, d.mem[:stagingOff], stagingIOVA, true)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if d.drv, d.q, err = hdma.Start(d.dev, hdma.Config{Logger: cfg.Logger}, qc); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	info := d.drv.Info()
	d.devSize = info.DevMemSize
	if uint64(d.staging) > uint64(info.MaxTransfer) {
		d.staging = int(info.MaxTransfer) &^ 4095
	}
	return d, nil
}

// MaxTransfer is the largest transfer one call moves (the staging size).
func (d *Device) MaxTransfer() int { return d.staging }

// DeviceMemory is the device's memory as the CPU sees it (BAR2), for
// checking what arrived; nil when the device does not expose it.
func (d *Device) DeviceMemory() []byte {
	if d.drv == nil {
		return nil
	}
	return d.drv.DeviceMemory()
}

func (d *Device) check(what string, n int, devOff uint64) error {
	switch {
	case d.closed:
		return fmt.Errorf("baseline: %s: %w", what, ErrClosed)
	case n <= 0 || n > d.staging:
		return fmt.Errorf("baseline: %s of %d bytes: want 1..%d (the staging buffer): %w", what, n, d.staging, ErrBadTransfer)
	case devOff > d.devSize || uint64(n) > d.devSize-devOff:
		return fmt.Errorf("baseline: %s of %d bytes at device offset %#x: beyond the %d bytes of device memory: %w", what, n, devOff, d.devSize, ErrBadTransfer)
	}
	return nil
}

// Write moves p to device memory at devOff: pwrite(2) into the staging
// buffer (the kernel copies), one descriptor and doorbell, then a blocking
// read(2) of the completion eventfd. Two system calls, one CPU copy.
func (d *Device) Write(p []byte, devOff uint64) error {
	if err := d.check("write", len(p), devOff); err != nil {
		return err
	}
	for done := 0; done < len(p); {
		n, err := unix.Pwrite(d.memfd, p[done:], int64(stagingOff+done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("baseline: write %d bytes: pwrite to the staging buffer: %w", len(p), err)
		}
		done += n
	}
	return d.run(hdma.Desc{Op: hdma.OpH2D, Len: uint32(len(p)), Src: stagingIOVA + stagingOff, Dst: devOff, Interrupt: true})
}

// Read moves len(p) bytes of device memory at devOff into p: one
// descriptor and doorbell, a blocking read(2) of the completion eventfd,
// then pread(2) out of the staging buffer (the kernel copies).
func (d *Device) Read(p []byte, devOff uint64) error {
	if err := d.check("read", len(p), devOff); err != nil {
		return err
	}
	if err := d.run(hdma.Desc{Op: hdma.OpD2H, Len: uint32(len(p)), Src: devOff, Dst: stagingIOVA + stagingOff, Interrupt: true}); err != nil {
		return err
	}
	for done := 0; done < len(p); {
		n, err := unix.Pread(d.memfd, p[done:], int64(stagingOff+done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("baseline: read %d bytes: pread from the staging buffer: %w", len(p), err)
		}
		if n == 0 {
			return fmt.Errorf("baseline: read %d bytes: staging buffer ended at %d: %w", len(p), done, ErrBadTransfer)
		}
		done += n
	}
	return nil
}

// run submits one descriptor, rings the doorbell and sleeps in read(2) on
// the completion eventfd until the device's interrupt, then takes the
// completion. Every descriptor asks for an interrupt, so each read
// consumes exactly the one this transfer raised.
func (d *Device) run(desc hdma.Desc) error {
	if err := d.q.Enqueue(desc); err != nil {
		return fmt.Errorf("baseline: %v of %d bytes: %w", desc.Op, desc.Len, err)
	}
	if err := d.q.Submit(); err != nil {
		return fmt.Errorf("baseline: %v of %d bytes: doorbell: %w", desc.Op, desc.Len, err)
	}
	efd := d.q.EventFD()
	for {
		_, err := unix.Read(efd, d.ev[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("baseline: %v of %d bytes: wait for the completion interrupt: %w", desc.Op, desc.Len, err)
		}
		if d.q.Reap(d.cpl[:]) == 1 {
			break
		}
	}
	c := &d.cpl[0]
	if c.Err != nil {
		return fmt.Errorf("baseline: %v of %d bytes: device status %d: %w", desc.Op, desc.Len, c.Status, c.Err)
	}
	if c.Len != desc.Len {
		return fmt.Errorf("baseline: %v of %d bytes: the device moved %d: %w", desc.Op, desc.Len, c.Len, ErrBadTransfer)
	}
	return nil
}

// Close tears the path down: driver, DMA mapping, staging memfd, and the
// device when OpenDevice created it. Closing twice is harmless.
func (d *Device) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if d.drv != nil {
		errs = append(errs, d.drv.Close())
	}
	if d.mapped {
		errs = append(errs, d.dev.UnmapDMA(stagingIOVA, uint64(len(d.mem))))
	}
	if d.mem != nil {
		errs = append(errs, unix.Munmap(d.mem))
		d.mem = nil
	}
	if d.memfd >= 0 {
		errs = append(errs, unix.Close(d.memfd))
		d.memfd = -1
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("baseline: close: %w", err)
	}
	return nil
}
