package edu

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/vfio"
)

// fakeEdu is a register-level model of edu for host tests of the driver's
// logic (validation, register programming, chunking, completion paths). It
// fails the test on any access the real device would reject or crash on.
// The real device is tested in the VM (vm_test.go).
type fakeEdu struct {
	t        *testing.T
	id       uint32
	live     uint32
	irq      uint32
	src, dst uint64
	cnt      uint64
	cmd      uint32
	busyFor  int // polls of the command register that still see it running
	buf      [BufferSize]byte
	ram      []byte // IOVA ramBase.. maps here
	ramBase  uint64
	command  uint16 // PCI command register
	dmas     []Transfer
	unmasked int
	irqs     chan struct{}
}

const ramBase = 0x200000

func newFake(t *testing.T) *fakeEdu {
	return &fakeEdu{t: t, id: IDValue, ram: make([]byte, 64<<10), ramBase: ramBase, irqs: make(chan struct{}, 16)}
}

func (f *fakeEdu) Info() DeviceInfoT {
	return DeviceInfoT{Name: "fake-edu", VendorID: VendorID, DeviceID: DeviceID}
}

type DeviceInfoT = vfio.DeviceInfo

func (f *fakeEdu) Region(i int) (vfio.Region, error) {
	switch i {
	case vfio.RegionBAR0:
		return (*fakeBAR)(f), nil
	case vfio.RegionConfig:
		return (*fakeCfg)(f), nil
	}
	return nil, vfio.ErrNoRegion
}
func (f *fakeEdu) IOVARanges() []vfio.IOVARange             { return []vfio.IOVARange{{Start: 0, End: 1<<28 - 1}} }
func (f *fakeEdu) MapDMA(uint64, []byte, vfio.Access) error { return nil }
func (f *fakeEdu) UnmapDMA(uint64, uint64) error            { return nil }
func (f *fakeEdu) IRQCount(k vfio.IRQKind) int              { return 1 }
func (f *fakeEdu) SetIRQs(vfio.IRQKind, int, []int) error   { return nil }
func (f *fakeEdu) UnmaskIRQ(k vfio.IRQKind, i int) error    { f.unmasked++; return nil }
func (f *fakeEdu) Reset() error                             { return vfio.ErrNotSupported }
func (f *fakeEdu) Close() error                             { return nil }

// dma performs the programmed DMA the way QEMU's edu does, checking the
// device-side range as QEMU 7.2 does (the end must lie inside the buffer).
func (f *fakeEdu) dma() {
	toRAM := f.cmd&CmdToRAM != 0
	devAddr, ramAddr := f.dst, f.src
	if toRAM {
		devAddr, ramAddr = f.src, f.dst
	}
	end := devAddr + f.cnt
	if !(devAddr >= BufferAddr && devAddr < BufferAddr+BufferSize && end > devAddr && end < BufferAddr+BufferSize) {
		f.t.Fatalf("DMA device range %#x-%#x: QEMU 7.2 would abort (hw_error)", devAddr, end)
	}
	if ramAddr < f.ramBase || ramAddr+f.cnt > f.ramBase+uint64(len(f.ram)) {
		f.t.Fatalf("DMA RAM range %#x+%d outside the fake's RAM", ramAddr, f.cnt)
	}
	r := f.ram[ramAddr-f.ramBase : ramAddr-f.ramBase+f.cnt]
	b := f.buf[devAddr-BufferAddr : end-BufferAddr]
	dir := ToDevice
	if toRAM {
		copy(r, b)
		dir = FromDevice
	} else {
		copy(b, r)
	}
	f.dmas = append(f.dmas, Transfer{Dir: dir, IOVA: ramAddr, Offset: int(devAddr - BufferAddr), Len: int(f.cnt)})
	f.cmd &^= CmdStart
	if f.cmd&CmdIRQ != 0 {
		f.irq |= IRQDMA
		f.irqs <- struct{}{}
	}
}

type fakeBAR fakeEdu

func (b *fakeBAR) Index() int     { return vfio.RegionBAR0 }
func (b *fakeBAR) Size() uint64   { return 1 << 20 }
func (b *fakeBAR) Mapped() []byte { return nil }
func (b *fakeBAR) Read8(uint64) (uint8, error) {
	b.t.Fatal("8-bit access: edu ignores it")
	return 0, nil
}
func (b *fakeBAR) Read16(uint64) (uint16, error) {
	b.t.Fatal("16-bit access: edu ignores it")
	return 0, nil
}
func (b *fakeBAR) Write8(uint64, uint8) error   { b.t.Fatal("8-bit access"); return nil }
func (b *fakeBAR) Write16(uint64, uint16) error { b.t.Fatal("16-bit access"); return nil }
func (b *fakeBAR) Read32(off uint64) (uint32, error) {
	switch off {
	case RegID:
		return b.id, nil
	case RegLiveness:
		return ^b.live, nil
	case RegIRQStatus:
		return b.irq, nil
	case RegDMACmd:
		if b.busyFor > 0 {
			b.busyFor--
			if b.busyFor == 0 {
				(*fakeEdu)(b).dma()
			}
		}
		return b.cmd, nil
	}
	b.t.Fatalf("read32 of %#x", off)
	return 0, nil
}
func (b *fakeBAR) Read64(off uint64) (uint64, error) {
	switch off {
	case RegDMASrc:
		return b.src, nil
	case RegDMADst:
		return b.dst, nil
	case RegDMACount:
		return b.cnt, nil
	}
	b.t.Fatalf("read64 of %#x", off)
	return 0, nil
}
func (b *fakeBAR) Write32(off uint64, v uint32) error {
	switch off {
	case RegLiveness:
		b.live = v
	case RegIRQAck:
		b.irq &^= v
	case RegDMACmd:
		if b.cmd&CmdStart != 0 {
			b.t.Fatal("command written while a DMA runs")
		}
		b.cmd = v
		if v&CmdStart != 0 && b.busyFor == 0 {
			(*fakeEdu)(b).dma()
		}
	default:
		b.t.Fatalf("write32 of %#x", off)
	}
	return nil
}
func (b *fakeBAR) Write64(off uint64, v uint64) error {
	switch off {
	case RegDMASrc:
		b.src = v
	case RegDMADst:
		b.dst = v
	case RegDMACount:
		b.cnt = v
	default:
		b.t.Fatalf("write64 of %#x", off)
	}
	return nil
}

type fakeCfg fakeEdu

func (c *fakeCfg) Index() int                        { return vfio.RegionConfig }
func (c *fakeCfg) Size() uint64                      { return 256 }
func (c *fakeCfg) Mapped() []byte                    { return nil }
func (c *fakeCfg) Read8(uint64) (uint8, error)       { return 0, nil }
func (c *fakeCfg) Read32(uint64) (uint32, error)     { return 0, nil }
func (c *fakeCfg) Read64(uint64) (uint64, error)     { return 0, nil }
func (c *fakeCfg) Write8(uint64, uint8) error        { return nil }
func (c *fakeCfg) Write32(uint64, uint32) error      { return nil }
func (c *fakeCfg) Write64(uint64, uint64) error      { return nil }
func (c *fakeCfg) Read16(off uint64) (uint16, error) { return c.command, nil }
func (c *fakeCfg) Write16(off uint64, v uint16) error {
	if off == vfio.PCICommand {
		c.command = v
	}
	return nil
}

// chanWaiter waits on the fake's interrupt channel.
type chanWaiter struct{ f *fakeEdu }

func (w chanWaiter) Wait(ctx context.Context) error {
	select {
	case <-w.f.irqs:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mapCheck accepts [lo, hi) with read and write access.
type mapCheck struct{ lo, hi uint64 }

func (m mapCheck) Check(iova, n uint64, _ vfio.Access) error {
	if iova < m.lo || iova+n > m.hi {
		return vfio.ErrNotMapped
	}
	return nil
}

func TestNew(t *testing.T) {
	f := newFake(t)
	d, err := New(f, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if f.command&vfio.PCICommandBusMaster == 0 {
		t.Errorf("bus mastering not enabled: command %#x", f.command)
	}
	if v, err := d.Liveness(0xf0f0); err != nil || v != ^uint32(0xf0f0) {
		t.Errorf("liveness %#x %v", v, err)
	}
	f2 := newFake(t)
	f2.id = 0x12345678
	if _, err := New(f2, Config{}); !errors.Is(err, ErrNotEdu) {
		t.Errorf("New on a non-edu: %v", err)
	}
}

func TestTransferValidation(t *testing.T) {
	d, err := New(newFake(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	bad := []Transfer{
		{Dir: ToDevice, IOVA: ramBase, Len: 0},
		{Dir: ToDevice, IOVA: ramBase, Len: 4096},              // ends at 0x41000: QEMU 7.2 aborts
		{Dir: ToDevice, IOVA: ramBase, Offset: 1, Len: MaxDMA}, // same end
		{Dir: FromDevice, IOVA: ramBase, Offset: -1, Len: 10},
		{Dir: ToDevice, IOVA: 1 << 28, Len: 10},   // beyond the DMA mask
		{Dir: ToDevice, IOVA: 1<<28 - 5, Len: 10}, // crosses it
		{Dir: Direction(7), IOVA: ramBase, Len: 10},
	}
	for _, tr := range bad {
		if err := d.Start(tr); !errors.Is(err, ErrBadTransfer) {
			t.Errorf("Start(%+v) = %v, want ErrBadTransfer", tr, err)
		}
	}
	if err := d.Do(context.Background(), Transfer{Dir: ToDevice, IOVA: ramBase, Len: MaxDMA}); err != nil {
		t.Errorf("4095 bytes at offset 0: %v", err)
	}
	if err := d.Do(context.Background(), Transfer{Dir: FromDevice, IOVA: ramBase, Offset: 4094, Len: 1}); err != nil {
		t.Errorf("last byte: %v", err)
	}
}

func TestCheckRefusesUnmapped(t *testing.T) {
	f := newFake(t)
	d, err := New(f, Config{Check: mapCheck{ramBase, ramBase + 4096}})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Start(Transfer{Dir: ToDevice, IOVA: ramBase + 4000, Len: 200})
	if !errors.Is(err, vfio.ErrNotMapped) {
		t.Fatalf("Start on a partly unmapped range: %v", err)
	}
	if len(f.dmas) != 0 || f.src != 0 {
		t.Fatalf("the device was programmed anyway: %+v", f.dmas)
	}
	if err := d.StartUnchecked(Transfer{Dir: ToDevice, IOVA: ramBase + 4000, Len: 200}); err != nil {
		t.Fatalf("StartUnchecked: %v", err)
	}
}

func TestCopyChunks(t *testing.T) {
	f := newFake(t)
	d, err := New(f, Config{Wait: chanWaiter{f}, IRQ: vfio.IRQMSI})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	for i := range f.ram[:n] {
		f.ram[i] = byte(i * 31)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Copy(ctx, ramBase+32<<10, ramBase, n); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.ram[32<<10:32<<10+n], f.ram[:n]) {
		t.Fatal("copy differs")
	}
	want := []int{4095, 4095, 4095, 4095, 1810, 1810}
	if len(f.dmas) != len(want) {
		t.Fatalf("%d DMAs, want %d: %+v", len(f.dmas), len(want), f.dmas)
	}
	for i, tr := range f.dmas {
		if tr.Len != want[i] || tr.Len > MaxDMA {
			t.Errorf("DMA %d: %d bytes, want %d", i, tr.Len, want[i])
		}
	}
	if f.irq != 0 {
		t.Errorf("interrupt status %#x left unacknowledged", f.irq)
	}
	if f.unmasked != 0 {
		t.Errorf("MSI path unmasked INTx %d times", f.unmasked)
	}
	if err := d.Copy(ctx, ramBase, ramBase, 0); !errors.Is(err, ErrBadTransfer) {
		t.Errorf("Copy of 0 bytes: %v", err)
	}
}

func TestCompletionPaths(t *testing.T) {
	t.Run("poll", func(t *testing.T) {
		f := newFake(t)
		d, err := New(f, Config{PollInterval: time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		f.busyFor = 3
		if err := d.Start(Transfer{Dir: ToDevice, IOVA: ramBase, Len: 10}); err != nil {
			t.Fatal(err)
		}
		if err := d.Start(Transfer{Dir: ToDevice, IOVA: ramBase, Len: 10}); !errors.Is(err, ErrBusy) {
			t.Fatalf("second Start while running: %v", err)
		}
		if err := d.Complete(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(f.dmas) != 1 {
			t.Fatalf("%d DMAs", len(f.dmas))
		}
		// A DMA that never completes times out.
		f.busyFor = 1 << 30
		if err := d.Start(Transfer{Dir: ToDevice, IOVA: ramBase, Len: 10}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := d.Complete(ctx); !errors.Is(err, ErrTimeout) {
			t.Fatalf("Complete of a stuck DMA: %v", err)
		}
	})
	t.Run("INTx", func(t *testing.T) {
		f := newFake(t)
		d, err := New(f, Config{Wait: chanWaiter{f}, IRQ: vfio.IRQINTx})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Do(context.Background(), Transfer{Dir: FromDevice, IOVA: ramBase, Len: 10}); err != nil {
			t.Fatal(err)
		}
		if f.unmasked != 1 || f.irq != 0 {
			t.Fatalf("after an INTx completion: unmasked %d times, status %#x", f.unmasked, f.irq)
		}
	})
}

// TestErrorPrefix: every error the driver returns starts with "edu: " once,
// a chunk's error inside Copy's included.
func TestErrorPrefix(t *testing.T) {
	d, err := New(newFake(t), Config{Check: mapCheck{ramBase, ramBase + 4096}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
	}{
		{"Start invalid", d.Start(Transfer{Dir: ToDevice, IOVA: ramBase, Len: 0})},
		{"Copy nothing", d.Copy(context.Background(), ramBase, ramBase, 0)},
		{"Copy chunk invalid", d.Copy(context.Background(), 1<<28, ramBase, 64)},
	}
	for _, tc := range tests {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if msg := tc.err.Error(); !strings.HasPrefix(msg, "edu: ") || strings.Count(msg, "edu:") != 1 {
			t.Errorf("%s: %q does not start with one \"edu: \"", tc.name, msg)
		}
	}
}
