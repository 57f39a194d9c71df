package mock

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
)

// bar0Region is the register BAR. Reads have no side effects; writes to
// CONTROL, the doorbells and the queue registers do (see writeReg).
// 64-bit accesses are two 32-bit accesses, low word first, as on a bus that
// splits them. Byte and half-word reads work; byte and half-word writes are
// ErrNotSupported (the model defines none).
type bar0Region struct{ d *Device }

func (r *bar0Region) Index() int     { return vfio.RegionBAR0 }
func (r *bar0Region) Size() uint64   { return model.Bar0Size }
func (r *bar0Region) Mapped() []byte { return nil }

func (r *bar0Region) check(op string, off, width uint64) error {
	if r.d.closed.Load() {
		return fmt.Errorf("mock: BAR0 %s at %#x: %w", op, off, vfio.ErrClosed)
	}
	if off%width != 0 {
		return fmt.Errorf("mock: BAR0 %s at %#x: %w", op, off, vfio.ErrMisaligned)
	}
	if off >= model.Bar0Size || model.Bar0Size-off < width {
		return fmt.Errorf("mock: BAR0 %s at %#x (size %#x): %w", op, off, model.Bar0Size, vfio.ErrOutOfRange)
	}
	return nil
}

func (r *bar0Region) Read8(off uint64) (uint8, error) {
	if err := r.check("read8", off, 1); err != nil {
		return 0, err
	}
	return uint8(r.d.readReg(off&^3) >> (8 * (off & 3))), nil
}

func (r *bar0Region) Read16(off uint64) (uint16, error) {
	if err := r.check("read16", off, 2); err != nil {
		return 0, err
	}
	return uint16(r.d.readReg(off&^3) >> (8 * (off & 3))), nil
}

func (r *bar0Region) Read32(off uint64) (uint32, error) {
	if err := r.check("read32", off, 4); err != nil {
		return 0, err
	}
	return r.d.readReg(off), nil
}

func (r *bar0Region) Read64(off uint64) (uint64, error) {
	if err := r.check("read64", off, 8); err != nil {
		return 0, err
	}
	if off == model.RegFaultAddr {
		return r.d.faultAddr.Load(), nil
	}
	lo := r.d.readReg(off)
	hi := r.d.readReg(off + 4)
	return uint64(lo) | uint64(hi)<<32, nil
}

func (r *bar0Region) Write8(off uint64, v uint8) error {
	if err := r.check("write8", off, 1); err != nil {
		return err
	}
	return fmt.Errorf("mock: BAR0 write8 at %#x: HDMA registers take 32/64-bit writes: %w", off, vfio.ErrNotSupported)
}

func (r *bar0Region) Write16(off uint64, v uint16) error {
	if err := r.check("write16", off, 2); err != nil {
		return err
	}
	return fmt.Errorf("mock: BAR0 write16 at %#x: HDMA registers take 32/64-bit writes: %w", off, vfio.ErrNotSupported)
}

func (r *bar0Region) Write32(off uint64, v uint32) error {
	if err := r.check("write32", off, 4); err != nil {
		return err
	}
	r.d.writeReg(off, v)
	return nil
}

func (r *bar0Region) Write64(off uint64, v uint64) error {
	if err := r.check("write64", off, 8); err != nil {
		return err
	}
	r.d.writeReg(off, uint32(v))
	r.d.writeReg(off+4, uint32(v>>32))
	return nil
}

// readReg reads the 32-bit register at off (4-aligned, in range).
func (d *Device) readReg(off uint64) uint32 {
	switch off {
	case model.RegFaultAddr:
		return uint32(d.faultAddr.Load())
	case model.RegFaultAddr + 4:
		return uint32(d.faultAddr.Load() >> 32)
	}
	return d.regs[off/4].Load()
}

// qreg is the register word of queue q's register reg.
func (d *Device) qreg(q int, reg uint64) *atomic.Uint32 {
	return &d.regs[model.QueueReg(q, reg)/4]
}

// writeReg performs a 32-bit register write and its side effect. Writes to
// read-only and reserved registers are ignored, as on hardware.
func (d *Device) writeReg(off uint64, v uint32) {
	if off == model.RegControl {
		d.writeControl(v)
		if d.cfg.Inline {
			d.runInline()
		}
		return
	}
	if off < model.QueueBase || off >= model.QueueBase+model.QueueStride*uint64(d.cfg.Queues) {
		return
	}
	q := int((off - model.QueueBase) / model.QueueStride)
	switch reg := (off - model.QueueBase) % model.QueueStride; reg {
	case model.QSQTail:
		// Doorbell. The atomic store publishes the descriptors the host
		// wrote before it (release); the worker's atomic load of the tail
		// acquires them. The publication time goes first, so a worker
		// that sees the new tail finds a time no later than it.
		if d.cfg.LateAfter > 0 {
			d.qctr[q].bellSince.CompareAndSwap(0, d.clock())
		}
		d.regs[off/4].Store(v)
		d.qctr[q].sqDoorbells.Add(1)
		d.ring()
		if d.cfg.Inline {
			d.runInline()
		}
	case model.QCQHead:
		// Release of completion entries: the host has finished reading
		// them before this store, the device overwrites them only after
		// loading it.
		d.regs[off/4].Store(v)
		d.qctr[q].cqDoorbells.Add(1)
		d.ring()
		if d.cfg.Inline {
			d.runInline()
		}
	case model.QIRQ:
		d.regs[off/4].Store(v & model.IRQEnable)
	case model.QSQBase, model.QSQBase + 4, model.QSQSize, model.QCQBase, model.QCQBase + 4, model.QCQSize:
		// Queue configuration: latched at enable, read-only while enabled.
		d.mu.Lock()
		if d.enabled {
			d.ctr.ignoredWrites++
		} else {
			d.regs[off/4].Store(v)
		}
		d.mu.Unlock()
	}
}

// writeControl handles CONTROL: reset (wins over enable, self-clearing,
// complete when the write returns), enable (latches and validates the queue
// configuration) and disable (an orderly reset, as NVMe's CC.EN=0).
func (d *Device) writeControl(v uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case v&model.ControlReset != 0:
		d.resetLocked(true)
	case v&model.ControlEnable != 0:
		if !d.enabled && d.regs[model.RegStatus/4].Load()&model.StatusFatal == 0 {
			d.enableLocked()
		}
	default:
		if d.enabled || d.regs[model.RegStatus/4].Load() != 0 {
			d.resetLocked(true)
		}
	}
}

// bar2Region is device memory: plain memory, also reachable through Mapped.
type bar2Region struct {
	d   *Device
	mem []byte
}

func (r *bar2Region) Index() int   { return vfio.RegionBAR2 }
func (r *bar2Region) Size() uint64 { return uint64(len(r.mem)) }
func (r *bar2Region) Mapped() []byte {
	if r.d.closed.Load() {
		return nil
	}
	return r.mem
}

func (r *bar2Region) check(op string, off, width uint64) error {
	if r.d.closed.Load() {
		return fmt.Errorf("mock: BAR2 %s at %#x: %w", op, off, vfio.ErrClosed)
	}
	if off%width != 0 {
		return fmt.Errorf("mock: BAR2 %s at %#x: %w", op, off, vfio.ErrMisaligned)
	}
	if off >= uint64(len(r.mem)) || uint64(len(r.mem))-off < width {
		return fmt.Errorf("mock: BAR2 %s at %#x (size %#x): %w", op, off, len(r.mem), vfio.ErrOutOfRange)
	}
	return nil
}

func (r *bar2Region) Read8(off uint64) (uint8, error) {
	if err := r.check("read8", off, 1); err != nil {
		return 0, err
	}
	return r.mem[off], nil
}

func (r *bar2Region) Read16(off uint64) (uint16, error) {
	if err := r.check("read16", off, 2); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(r.mem[off:]), nil
}

// 32- and 64-bit accesses are single atomic accesses (the memory is
// allocated aligned and off is checked aligned), as one bus transaction.
func (r *bar2Region) Read32(off uint64) (uint32, error) {
	if err := r.check("read32", off, 4); err != nil {
		return 0, err
	}
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[off]))), nil
}

func (r *bar2Region) Read64(off uint64) (uint64, error) {
	if err := r.check("read64", off, 8); err != nil {
		return 0, err
	}
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.mem[off]))), nil
}

func (r *bar2Region) Write8(off uint64, v uint8) error {
	if err := r.check("write8", off, 1); err != nil {
		return err
	}
	r.mem[off] = v
	return nil
}

func (r *bar2Region) Write16(off uint64, v uint16) error {
	if err := r.check("write16", off, 2); err != nil {
		return err
	}
	binary.LittleEndian.PutUint16(r.mem[off:], v)
	return nil
}

func (r *bar2Region) Write32(off uint64, v uint32) error {
	if err := r.check("write32", off, 4); err != nil {
		return err
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&r.mem[off])), v)
	return nil
}

func (r *bar2Region) Write64(off uint64, v uint64) error {
	if err := r.check("write64", off, 8); err != nil {
		return err
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&r.mem[off])), v)
	return nil
}
