package edu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hcomm-go/hcomm/internal/errs"
	"github.com/hcomm-go/hcomm/vfio"
)

// PCI identity and register map (see the package documentation).
const (
	VendorID = 0x1234
	DeviceID = 0x11e8
	IDValue  = 0x010000ed

	RegID        = 0x00
	RegLiveness  = 0x04
	RegIRQStatus = 0x24
	RegIRQRaise  = 0x60
	RegIRQAck    = 0x64
	RegDMASrc    = 0x80
	RegDMADst    = 0x88
	RegDMACount  = 0x90
	RegDMACmd    = 0x98

	CmdStart = 1 << 0
	CmdToRAM = 1 << 1
	CmdIRQ   = 1 << 2

	// IRQDMA is the interrupt status bit edu sets when a DMA with CmdIRQ
	// completes.
	IRQDMA = 0x100

	// BufferAddr is the device-side address of edu's DMA buffer, BufferSize
	// its size.
	BufferAddr = 0x40000
	BufferSize = 4096
	// MaxDMA is the longest single DMA: a transfer must end before
	// BufferAddr+BufferSize (QEMU 7.2 aborts on one that ends exactly
	// there).
	MaxDMA = BufferSize - 1
	// DMAMask is the highest IOVA edu can address (28 bits).
	DMAMask = 1<<28 - 1
)

// Direction of a DMA.
type Direction int

const (
	// ToDevice moves bytes from RAM (an IOVA) into the device buffer.
	ToDevice Direction = iota
	// FromDevice moves bytes from the device buffer to RAM (an IOVA).
	FromDevice
)

func (d Direction) String() string {
	if d == ToDevice {
		return "RAM→device"
	}
	return "device→RAM"
}

// Checker validates an IOVA range before the device is pointed at it;
// *vfio.DMASpace implements it.
type Checker interface {
	Check(iova, n uint64, access vfio.Access) error
}

// Waiter waits for the next interrupt of the device (e.g. an eventfd read
// through io_uring, or vfio.EventFD.Wait).
type Waiter interface {
	Wait(ctx context.Context) error
}

// Config configures a Driver.
type Config struct {
	// Check validates every IOVA before a DMA (nil: no check; then an
	// unmapped IOVA is caught only by the IOMMU, silently).
	Check Checker
	// Wait, when set, makes Transfer ask for a completion interrupt and
	// wait for it instead of polling the command register. IRQ names the
	// interrupt kind routed to it; for INTx the driver unmasks after each
	// interrupt.
	Wait Waiter
	IRQ  vfio.IRQKind
	// PollInterval is the sleep between polls of the command register when
	// Wait is nil (default 1 ms).
	PollInterval time.Duration
}

// Driver drives one edu device. Its methods serialise on the device: edu
// has one DMA engine.
type Driver struct {
	dev vfio.Device
	bar vfio.Region
	cfg Config

	mu sync.Mutex
}

// Transfer is one DMA.
type Transfer struct {
	Dir Direction
	// IOVA is the RAM side's device address.
	IOVA uint64
	// Offset is the device-buffer side, from the start of the buffer.
	Offset int
	// Len is the number of bytes, 1..MaxDMA, with Offset+Len <= MaxDMA.
	Len int
}

// New checks that dev is an edu device (BAR0 identification register) and
// enables bus mastering.
func New(dev vfio.Device, cfg Config) (*Driver, error) {
	bar, err := dev.Region(vfio.RegionBAR0)
	if err != nil {
		return nil, fmt.Errorf("edu: BAR0: %w", err)
	}
	id, err := bar.Read32(RegID)
	if err != nil {
		return nil, fmt.Errorf("edu: read ID: %w", err)
	}
	if id != IDValue {
		return nil, fmt.Errorf("%w: ID register %#08x, want %#08x", ErrNotEdu, id, IDValue)
	}
	if err := vfio.EnableBusMaster(dev); err != nil {
		return nil, fmt.Errorf("edu: %w", err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Millisecond
	}
	return &Driver{dev: dev, bar: bar, cfg: cfg}, nil
}

// ID reads the identification register.
func (d *Driver) ID() (uint32, error) { return d.bar.Read32(RegID) }

// Liveness writes v to the liveness register and returns what the device
// reads back (^v when it is alive).
func (d *Driver) Liveness(v uint32) (uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.bar.Write32(RegLiveness, v); err != nil {
		return 0, fmt.Errorf("edu: write liveness: %w", err)
	}
	return d.bar.Read32(RegLiveness)
}

func (t Transfer) validate() error {
	if t.Len <= 0 || t.Len > MaxDMA || t.Offset < 0 || t.Offset > MaxDMA-t.Len {
		return fmt.Errorf("%w: %v of %d bytes at buffer offset %d (at most %d bytes, ending before %#x)",
			ErrBadTransfer, t.Dir, t.Len, t.Offset, MaxDMA, BufferAddr+BufferSize)
	}
	if t.Dir != ToDevice && t.Dir != FromDevice {
		return fmt.Errorf("%w: direction %d", ErrBadTransfer, int(t.Dir))
	}
	if t.IOVA > DMAMask || uint64(t.Len-1) > DMAMask-t.IOVA {
		return fmt.Errorf("%w: IOVA %#x+%d beyond the 28-bit DMA mask", ErrBadTransfer, t.IOVA, t.Len)
	}
	return nil
}

func (t Transfer) access() vfio.Access {
	if t.Dir == ToDevice {
		return vfio.DMARead // the device reads RAM
	}
	return vfio.DMAWrite
}

// Start programs and starts one DMA and returns without waiting. It checks
// the IOVA range against Config.Check first.
func (d *Driver) Start(t Transfer) error {
	if err := t.validate(); err != nil {
		return err
	}
	if d.cfg.Check != nil {
		if err := d.cfg.Check.Check(t.IOVA, uint64(t.Len), t.access()); err != nil {
			return fmt.Errorf("edu: %v of %d bytes: %w", t.Dir, t.Len, err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.startLocked(t, d.cfg.Wait != nil)
}

// StartUnchecked is Start without the IOVA check (the device-side bounds and
// the DMA mask are still enforced, so QEMU is not crashed). Tests use it to
// prove that the IOMMU blocks an unmapped IOVA.
func (d *Driver) StartUnchecked(t Transfer) error {
	if err := t.validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.startLocked(t, d.cfg.Wait != nil)
}

func (d *Driver) startLocked(t Transfer, irq bool) error {
	cmd, err := d.bar.Read32(RegDMACmd)
	if err != nil {
		return fmt.Errorf("edu: read DMA command: %w", err)
	}
	if cmd&CmdStart != 0 {
		return ErrBusy
	}
	src, dst := t.IOVA, uint64(BufferAddr+t.Offset)
	cmd = CmdStart
	if t.Dir == FromDevice {
		src, dst = dst, src
		cmd |= CmdToRAM
	}
	if irq {
		cmd |= CmdIRQ
	}
	for _, w := range []struct {
		reg uint64
		v   uint64
	}{{RegDMASrc, src}, {RegDMADst, dst}, {RegDMACount, uint64(t.Len)}} {
		if err := d.bar.Write64(w.reg, w.v); err != nil {
			return fmt.Errorf("edu: program DMA: %w", err)
		}
	}
	// The command write starts the engine; it comes after the three
	// parameter writes (the accessors are not reordered).
	if err := d.bar.Write32(RegDMACmd, cmd); err != nil {
		return fmt.Errorf("edu: start DMA: %w", err)
	}
	return nil
}

// Busy reports whether a DMA is running.
func (d *Driver) Busy() (bool, error) {
	cmd, err := d.bar.Read32(RegDMACmd)
	if err != nil {
		return false, fmt.Errorf("edu: read DMA command: %w", err)
	}
	return cmd&CmdStart != 0, nil
}

// IRQStatus reads the interrupt status register.
func (d *Driver) IRQStatus() (uint32, error) { return d.bar.Read32(RegIRQStatus) }

// AckIRQ clears the given interrupt status bits; for INTx it also unmasks
// the line in the kernel.
func (d *Driver) AckIRQ(bits uint32) error {
	if err := d.bar.Write32(RegIRQAck, bits); err != nil {
		return fmt.Errorf("edu: acknowledge interrupt: %w", err)
	}
	if d.cfg.Wait != nil && d.cfg.IRQ == vfio.IRQINTx {
		if err := d.dev.UnmaskIRQ(vfio.IRQINTx, 0); err != nil {
			return fmt.Errorf("edu: %w", err)
		}
	}
	return nil
}

// Complete waits for the running DMA to finish: on the interrupt when
// Config.Wait is set (then it checks and acknowledges IRQDMA), by polling
// the command register otherwise.
func (d *Driver) Complete(ctx context.Context) error {
	if d.cfg.Wait != nil {
		if err := d.cfg.Wait.Wait(ctx); err != nil {
			return fmt.Errorf("%w: waiting for the interrupt: %w", ErrTimeout, err)
		}
		st, err := d.IRQStatus()
		if err != nil {
			return err
		}
		if st&IRQDMA == 0 {
			return fmt.Errorf("edu: interrupt without the DMA-done bit (status %#x)", st)
		}
		if err := d.AckIRQ(st); err != nil {
			return err
		}
		if busy, err := d.Busy(); err != nil || busy {
			return fmt.Errorf("edu: DMA still running after its interrupt (err %v)", err)
		}
		return nil
	}
	t := time.NewTicker(d.cfg.PollInterval)
	defer t.Stop()
	for {
		busy, err := d.Busy()
		if err != nil || !busy {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		case <-t.C:
		}
	}
}

// Do runs one DMA to completion.
func (d *Driver) Do(ctx context.Context, t Transfer) error {
	if err := d.Start(t); err != nil {
		return err
	}
	return d.Complete(ctx)
}

// Copy copies n bytes from RAM at src to RAM at dst through the device, in
// chunks of at most MaxDMA bytes (each chunk: RAM→device buffer, then device
// buffer→RAM). It is the edu equivalent of a DMA engine's memory copy.
func (d *Driver) Copy(ctx context.Context, dst, src uint64, n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: copy of %d bytes", ErrBadTransfer, n)
	}
	for done := 0; done < n; {
		c := min(n-done, MaxDMA)
		if err := d.Do(ctx, Transfer{Dir: ToDevice, IOVA: src + uint64(done), Len: c}); err != nil {
			return fmt.Errorf("edu: copy chunk at %d: %w", done, errs.Nested("edu: ", err))
		}
		if err := d.Do(ctx, Transfer{Dir: FromDevice, IOVA: dst + uint64(done), Len: c}); err != nil {
			return fmt.Errorf("edu: copy chunk at %d: %w", done, errs.Nested("edu: ", err))
		}
		done += c
	}
	return nil
}
