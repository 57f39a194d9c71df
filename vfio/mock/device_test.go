package mock_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

const dataIOVA = 0x4000_0000

func TestIdentifyRegisters(t *testing.T) {
	d := newDevice(t, mock.Config{Queues: 3, MaxQueueEntriesLog2: 10, DevMemSize: 1 << 20, MaxTransfer: 4096})
	bar0, err := d.Region(vfio.RegionBAR0)
	must(t, err)
	read32 := func(off uint64) uint32 {
		v, err := bar0.Read32(off)
		must(t, err)
		return v
	}
	if v := read32(model.RegID); v != model.IDValue {
		t.Errorf("ID = %#x", v)
	}
	if v := read32(model.RegVersion); v != model.Version {
		t.Errorf("VERSION = %d", v)
	}
	if q, l := model.Caps(read32(model.RegCaps)); q != 3 || l != 10 {
		t.Errorf("CAPS = %d queues, 2^%d entries", q, l)
	}
	if v, err := bar0.Read64(model.RegDevMemSize); err != nil || v != 1<<20 {
		t.Errorf("DEVMEM_SIZE = %d, %v", v, err)
	}
	if v := read32(model.RegMaxLen); v != 4096 {
		t.Errorf("MAX_LEN = %d", v)
	}
	if b, err := bar0.Read8(model.RegID + 3); err != nil || b != 'H' {
		t.Errorf("ID byte 3 = %q, %v", b, err)
	}
	// Writes to read-only registers are ignored.
	must(t, bar0.Write32(model.RegID, 0))
	if v := read32(model.RegID); v != model.IDValue {
		t.Errorf("ID after write = %#x", v)
	}
	bar2, err := d.Region(vfio.RegionBAR2)
	must(t, err)
	if bar2.Size() != 1<<20 || len(bar2.Mapped()) != 1<<20 {
		t.Errorf("BAR2 size %d mapped %d", bar2.Size(), len(bar2.Mapped()))
	}
	must(t, bar2.Write32(8, 0xdeadbeef))
	if bar2.Mapped()[8] != 0xef {
		t.Errorf("BAR2 write not visible through Mapped")
	}
	if d.IRQCount(vfio.IRQMSI) != 3 || d.IRQCount(vfio.IRQMSIX) != 0 {
		t.Errorf("IRQ counts")
	}

	errs := []struct {
		name string
		err  error
		want error
	}{
		{"misaligned read32", func() error { _, err := bar0.Read32(2); return err }(), vfio.ErrMisaligned},
		{"read64 past end", func() error { _, err := bar0.Read64(model.Bar0Size - 4); return err }(), vfio.ErrMisaligned},
		{"read32 past end", func() error { _, err := bar0.Read32(model.Bar0Size); return err }(), vfio.ErrOutOfRange},
		{"huge offset", func() error { _, err := bar0.Read32(^uint64(0) - 3); return err }(), vfio.ErrOutOfRange},
		{"write8 register", bar0.Write8(0, 1), vfio.ErrNotSupported},
		{"bar2 past end", bar2.Write64(1<<20, 1), vfio.ErrOutOfRange},
		{"bar2 misaligned", bar2.Write16(1, 1), vfio.ErrMisaligned},
		{"no BAR1", func() error { _, err := d.Region(vfio.RegionBAR1); return err }(), vfio.ErrNoRegion},
		{"no INTx", d.SetIRQs(vfio.IRQINTx, 0, []int{3}), vfio.ErrNoIRQ},
		{"MSI vector out of range", d.SetIRQs(vfio.IRQMSI, 2, []int{3, 4}), vfio.ErrNoIRQ},
	}
	for _, tc := range errs {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	must(t, d.Close())
	must(t, d.Close())
	if _, err := bar0.Read32(0); !errors.Is(err, vfio.ErrClosed) {
		t.Errorf("read after close: %v", err)
	}
}

func TestMapDMA(t *testing.T) {
	d := newDevice(t, mock.Config{IOVARanges: []vfio.IOVARange{{Start: 0x10000, End: 0xfffffff}}})
	mem := hostMem(t, 4*4096)
	must(t, d.MapDMA(0x100000, mem[:2*4096], vfio.DMAReadWrite))
	tests := []struct {
		name  string
		iova  uint64
		mem   []byte
		acc   vfio.Access
		want  error
		unmap bool
	}{
		{"unaligned iova", 0x200800, mem[:4096], vfio.DMARead, vfio.ErrBadMapping, false},
		{"unaligned length", 0x200000, mem[:100], vfio.DMARead, vfio.ErrBadMapping, false},
		{"empty", 0x200000, nil, vfio.DMARead, vfio.ErrBadMapping, false},
		{"no access", 0x200000, mem[:4096], 0, vfio.ErrBadMapping, false},
		{"below range", 0x1000, mem[:4096], vfio.DMARead, vfio.ErrBadMapping, false},
		{"above range", 0xfffffff000, mem[:4096], vfio.DMARead, vfio.ErrBadMapping, false},
		{"overlap start", 0x101000, mem[:4096], vfio.DMARead, vfio.ErrIOVAInUse, false},
		{"overlap around", 0x0ff000, mem[:4*4096], vfio.DMARead, vfio.ErrIOVAInUse, false},
		{"adjacent", 0x102000, mem[2*4096:], vfio.DMARead, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := d.MapDMA(tc.iova, tc.mem, tc.acc)
			if !errors.Is(err, tc.want) {
				t.Fatalf("MapDMA(%#x, %d): %v, want %v", tc.iova, len(tc.mem), err, tc.want)
			}
			if tc.unmap {
				must(t, d.UnmapDMA(tc.iova, uint64(len(tc.mem))))
			}
		})
	}
	if err := d.UnmapDMA(0x100000, 4096); !errors.Is(err, vfio.ErrNotMapped) {
		t.Errorf("partial unmap: %v", err)
	}
	must(t, d.UnmapDMA(0x100000, 2*4096))
	if d.Mappings() != 0 {
		t.Errorf("%d mappings left", d.Mappings())
	}
}

// TestDataPaths moves data host→device, device→device and device→host in
// batches, one doorbell per batch, including a transfer that spans two
// IOVA-contiguous mappings.
func TestDataPaths(t *testing.T) {
	d := newDevice(t, mock.Config{DevMemSize: 1 << 20})
	q := newRawQueue(t, d, 1, 64)
	src := hostMem(t, 3*4096)
	dst := hostMem(t, 3*4096)
	// src is mapped as two mappings, contiguous in IOVA space.
	must(t, d.MapDMA(dataIOVA, src[:4096], vfio.DMARead))
	must(t, d.MapDMA(dataIOVA+4096, src[4096:], vfio.DMARead))
	must(t, d.MapDMA(dataIOVA+0x100000, dst, vfio.DMAWrite))
	enable(t, d)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	before := d.Counters()
	q.submit(
		model.Descriptor{Opcode: model.OpH2D, Tag: 1, Len: 3 * 4096, Src: dataIOVA, Dst: 0x1000},
		model.Descriptor{Opcode: model.OpD2D, Tag: 2, Len: 3 * 4096, Src: 0x1000, Dst: 0x8000},
		model.Descriptor{Opcode: model.OpFence, Tag: 3},
		model.Descriptor{Opcode: model.OpD2H, Tag: 4, Len: 3*4096 - 10, Src: 0x8000 + 10, Dst: dataIOVA + 0x100000},
	)
	cs := q.reap(4)
	for i, c := range cs {
		if c.Tag != uint64(i+1) || c.Status != model.StatusOK {
			t.Errorf("completion %d: %+v", i, c)
		}
	}
	if cs[0].Len != 3*4096 || cs[2].Len != 0 || cs[3].Len != 3*4096-10 {
		t.Errorf("lengths %+v", cs)
	}
	if !bytes.Equal(dst[:3*4096-10], src[10:]) {
		t.Errorf("data did not round-trip")
	}
	after := d.Counters()
	if n := after.SQDoorbells - before.SQDoorbells; n != 1 {
		t.Errorf("%d SQ doorbells for one batch", n)
	}
	if after.BytesH2D-before.BytesH2D != 3*4096 || after.BytesD2D-before.BytesD2D != 3*4096 ||
		after.BytesD2H-before.BytesD2H != 3*4096-10 || after.Fences-before.Fences != 1 {
		t.Errorf("byte counters %+v", after)
	}
	if qc := d.QueueCounters(1); qc.Descriptors != 4 || qc.Completions != 4 || qc.SQDoorbells != 1 || qc.CQDoorbells != 4 {
		t.Errorf("queue counters %+v", qc)
	}
}

// TestIOMMUFault: every way out of the map faults with status 1 and
// FAULT_ADDR at the first refused byte, and nothing outside the map is read
// or written: the guard bytes around the mapping keep their value and no
// guard byte reaches device memory.
func TestIOMMUFault(t *testing.T) {
	const guard = 0xA5
	d := newDevice(t, mock.Config{DevMemSize: 64 << 10})
	q := newRawQueue(t, d, 0, 64)
	// One CPU allocation: [guard page][RW page][RO page][guard page][WO page][guard page].
	mem := hostMem(t, 6*4096)
	fill(mem, guard)
	rw, ro, wo := mem[4096:2*4096], mem[2*4096:3*4096], mem[4*4096:5*4096]
	fill(rw, 0x11)
	fill(ro, 0x22)
	fill(wo, 0x33)
	const base = dataIOVA
	must(t, d.MapDMA(base, rw, vfio.DMAReadWrite))
	must(t, d.MapDMA(base+4096, ro, vfio.DMARead))
	must(t, d.MapDMA(base+3*4096, wo, vfio.DMAWrite))
	bar0, _ := d.Region(vfio.RegionBAR0)
	devmem := func() []byte { b, _ := d.Region(vfio.RegionBAR2); return b.Mapped() }()
	enable(t, d)
	tests := []struct {
		name  string
		desc  model.Descriptor
		fault uint64
	}{
		{"read unmapped", model.Descriptor{Opcode: model.OpH2D, Len: 16, Src: 0x7000_0000}, 0x7000_0000},
		{"read below mapping", model.Descriptor{Opcode: model.OpH2D, Len: 64, Src: base - 32}, base - 32},
		{"read straddles end into hole", model.Descriptor{Opcode: model.OpH2D, Len: 64, Src: base + 2*4096 - 32}, base + 2*4096},
		{"read write-only", model.Descriptor{Opcode: model.OpH2D, Len: 8, Src: base + 3*4096}, base + 3*4096},
		{"write read-only", model.Descriptor{Opcode: model.OpD2H, Len: 8, Dst: base + 4096 + 8}, base + 4096 + 8},
		{"write spans into read-only", model.Descriptor{Opcode: model.OpD2H, Len: 64, Dst: base + 4096 - 32}, base + 4096},
		{"write straddles end of WO", model.Descriptor{Opcode: model.OpD2H, Len: 64, Dst: base + 4*4096 - 16}, base + 4*4096},
		{"write unmapped", model.Descriptor{Opcode: model.OpD2H, Len: 4096, Dst: base + 2*4096}, base + 2*4096},
		{"write max length from mapping", model.Descriptor{Opcode: model.OpD2H, Len: 64 << 10, Dst: base}, base + 4096},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.desc.Tag = uint64(100 + i)
			q.submit(tc.desc)
			c := q.reap(1)[0]
			if c.Tag != tc.desc.Tag || c.Status != model.StatusIOMMUFault || c.Len != 0 {
				t.Fatalf("completion %+v, want IOMMU fault", c)
			}
			fa, err := bar0.Read64(model.RegFaultAddr)
			must(t, err)
			if fa != tc.fault {
				t.Errorf("FAULT_ADDR = %#x, want %#x", fa, tc.fault)
			}
		})
	}
	if !allBytes(mem[:4096], guard) || !allBytes(mem[3*4096:4*4096], guard) || !allBytes(mem[5*4096:], guard) {
		t.Errorf("guard bytes changed")
	}
	if !allBytes(rw, 0x11) || !allBytes(ro, 0x22) || !allBytes(wo, 0x33) {
		t.Errorf("mapped memory changed by refused descriptors")
	}
	if !allBytes(devmem, 0) {
		t.Errorf("device memory changed by refused descriptors")
	}
	if c := d.Counters(); c.IOMMUFaults != uint64(len(tests)) || c.Completions[model.StatusIOMMUFault] != uint64(len(tests)) {
		t.Errorf("fault counters %+v", c)
	}
	// Unmapping takes effect at once: the same read that worked now faults.
	q.submit(model.Descriptor{Opcode: model.OpH2D, Tag: 7, Len: 16, Src: base})
	if c := q.reap(1)[0]; c.Status != model.StatusOK {
		t.Fatalf("mapped read: %+v", c)
	}
	must(t, d.UnmapDMA(base, 4096))
	q.submit(model.Descriptor{Opcode: model.OpH2D, Tag: 8, Len: 16, Src: base})
	if c := q.reap(1)[0]; c.Status != model.StatusIOMMUFault {
		t.Fatalf("read after unmap: %+v", c)
	}
}

// TestValidation covers statuses 2 and 3 (and that refused descriptors move
// nothing).
func TestValidation(t *testing.T) {
	d := newDevice(t, mock.Config{DevMemSize: 64 << 10, MaxTransfer: 32 << 10})
	q := newRawQueue(t, d, 0, 64)
	mem := hostMem(t, 16<<10)
	must(t, d.MapDMA(dataIOVA, mem, vfio.DMAReadWrite))
	enable(t, d)
	ok := model.Descriptor{Opcode: model.OpH2D, Len: 64, Src: dataIOVA, Dst: 0}
	mod := func(f func(*model.Descriptor)) model.Descriptor { c := ok; f(&c); return c }
	tests := []struct {
		name   string
		desc   model.Descriptor
		raw    func([]byte)
		status uint16
	}{
		{"valid", ok, nil, model.StatusOK},
		{"opcode 0", mod(func(d *model.Descriptor) { d.Opcode = 0 }), nil, model.StatusBadDesc},
		{"opcode 5", mod(func(d *model.Descriptor) { d.Opcode = 5 }), nil, model.StatusBadDesc},
		{"opcode 255", mod(func(d *model.Descriptor) { d.Opcode = 255 }), nil, model.StatusBadDesc},
		{"unknown flag", mod(func(d *model.Descriptor) { d.Flags = 2 }), nil, model.StatusBadDesc},
		{"reserved u16", mod(func(d *model.Descriptor) { d.Rsvd = 1 }), nil, model.StatusBadDesc},
		{"reserved tail byte", ok, func(b []byte) { b[63] = 1 }, model.StatusBadDesc},
		{"zero length", mod(func(d *model.Descriptor) { d.Len = 0 }), nil, model.StatusBadDesc},
		{"over MAX_LEN", mod(func(d *model.Descriptor) { d.Len = 32<<10 + 1 }), nil, model.StatusBadDesc},
		{"huge length", mod(func(d *model.Descriptor) { d.Len = ^uint32(0) }), nil, model.StatusBadDesc},
		{"src wraps", mod(func(d *model.Descriptor) { d.Src = ^uint64(0) - 10 }), nil, model.StatusBadDesc},
		{"dst wraps", mod(func(d *model.Descriptor) { d.Opcode = model.OpD2H; d.Dst = ^uint64(0) - 63 }), nil, model.StatusBadDesc},
		{"fence with length", model.Descriptor{Opcode: model.OpFence, Len: 1}, nil, model.StatusBadDesc},
		{"fence with address", model.Descriptor{Opcode: model.OpFence, Src: 1}, nil, model.StatusBadDesc},
		{"devmem dst past end", mod(func(d *model.Descriptor) { d.Dst = 64<<10 - 63 }), nil, model.StatusDevMemBound},
		{"devmem dst far", mod(func(d *model.Descriptor) { d.Dst = 1 << 40 }), nil, model.StatusDevMemBound},
		{"devmem before iommu", mod(func(d *model.Descriptor) { d.Dst = 1 << 40; d.Src = 0x10 }), nil, model.StatusDevMemBound},
		{"d2d src past end", model.Descriptor{Opcode: model.OpD2D, Len: 64, Src: 64 << 10, Dst: 0}, nil, model.StatusDevMemBound},
		{"d2d dst past end", model.Descriptor{Opcode: model.OpD2D, Len: 64, Src: 0, Dst: 64<<10 - 1}, nil, model.StatusDevMemBound},
		{"d2d overlap ok", model.Descriptor{Opcode: model.OpD2D, Len: 64, Src: 0, Dst: 32}, nil, model.StatusOK},
		{"d2h src past end", model.Descriptor{Opcode: model.OpD2H, Len: 128, Src: 64<<10 - 64, Dst: dataIOVA}, nil, model.StatusDevMemBound},
	}
	before := d.Counters()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.desc.Tag = uint64(i + 1)
			var b [64]byte
			tc.desc.Encode(b[:])
			if tc.raw != nil {
				tc.raw(b[:])
			}
			q.putRaw(b[:])
			q.doorbell()
			c := q.reap(1)[0]
			if c.Tag != tc.desc.Tag || c.Status != tc.status {
				t.Fatalf("completion %+v, want status %d", c, tc.status)
			}
			if c.Status != model.StatusOK && c.Len != 0 {
				t.Errorf("error completion moved %d bytes", c.Len)
			}
		})
	}
	after := d.Counters()
	if after.BytesH2D-before.BytesH2D != 64 || after.BytesD2D-before.BytesD2D != 64 {
		t.Errorf("refused descriptors moved data: %+v", after)
	}
}

// TestCompletionRingFull: the device never overwrites an unreleased
// completion; a full ring stalls the queue until CQ_HEAD moves.
func TestCompletionRingFull(t *testing.T) {
	d := newDevice(t, mock.Config{})
	bar0, _ := d.Region(vfio.RegionBAR0)
	// SQ of 16, CQ of 4: at most 3 completions outstanding.
	q := newRawQueue(t, d, 0, 16)
	must(t, bar0.Write32(model.QueueReg(0, model.QCQSize), 4))
	enable(t, d)
	q.entries = 16
	for i := range 10 {
		q.put(model.Descriptor{Opcode: model.OpFence, Tag: uint64(i)})
	}
	q.doorbell()
	deadline := time.Now().Add(20 * time.Second)
	for d.QueueCounters(0).Completions < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no completions")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if n := d.QueueCounters(0).Completions; n != 3 {
		t.Fatalf("%d completions written into a 4-entry ring never released", n)
	}
	if d.Counters().CQFullWaits == 0 {
		t.Errorf("CQFullWaits not counted")
	}
	// Now consume with the 4-entry geometry.
	q.entries = 4
	var tags []uint64
	for len(tags) < 10 {
		if c, ok := q.poll(); ok {
			if c.Status != 0 {
				t.Fatalf("completion %+v", c)
			}
			tags = append(tags, c.Tag)
		} else if time.Now().After(deadline) {
			t.Fatalf("got %d of 10 completions", len(tags))
		}
	}
	for i, tag := range tags {
		if tag != uint64(i) {
			t.Fatalf("completions out of order: %v", tags)
		}
	}
}

// TestFatalRingFault: a descriptor fetch the IOMMU refuses halts the device
// with STATUS.fatal and FAULT_ADDR; a reset clears it.
func TestFatalRingFault(t *testing.T) {
	d := newDevice(t, mock.Config{})
	bar0, _ := d.Region(vfio.RegionBAR0)
	q := newRawQueue(t, d, 0, 64)
	enable(t, d)
	must(t, d.UnmapDMA(sqIOVA(0), 4096))
	q.submit(model.Descriptor{Opcode: model.OpFence, Tag: 1})
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _ := bar0.Read32(model.RegStatus)
		if st == model.StatusFatal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("STATUS %#x, want fatal", st)
		}
		time.Sleep(time.Millisecond)
	}
	if fa, _ := bar0.Read64(model.RegFaultAddr); fa != sqIOVA(0) {
		t.Errorf("FAULT_ADDR %#x, want %#x", fa, sqIOVA(0))
	}
	// Enable is refused while fatal; reset clears it.
	must(t, bar0.Write32(model.RegControl, model.ControlEnable))
	if st, _ := bar0.Read32(model.RegStatus); st != model.StatusFatal {
		t.Errorf("STATUS after enable while fatal %#x", st)
	}
	must(t, bar0.Write32(model.RegControl, model.ControlReset))
	if st, _ := bar0.Read32(model.RegStatus); st != 0 {
		t.Errorf("STATUS after reset %#x", st)
	}
	if fa, _ := bar0.Read64(model.RegFaultAddr); fa != 0 {
		t.Errorf("FAULT_ADDR after reset %#x", fa)
	}
	// A bad queue configuration is a fatal fault at enable.
	must(t, bar0.Write32(model.QueueReg(0, model.QSQSize), 3))
	must(t, bar0.Write32(model.QueueReg(0, model.QCQSize), 4))
	must(t, bar0.Write32(model.RegControl, model.ControlEnable))
	if st, _ := bar0.Read32(model.RegStatus); st != model.StatusFatal {
		t.Errorf("STATUS after enabling a 3-entry SQ: %#x", st)
	}
}

// TestInline: with Config.Inline the device works inside the doorbell write:
// the completions are in the ring when Write32 returns, and no worker runs.
func TestInline(t *testing.T) {
	d := newDevice(t, mock.Config{Inline: true, DevMemSize: 1 << 20})
	q := newRawQueue(t, d, 0, 64)
	mem := hostMem(t, 4096)
	fill(mem, 0x77)
	must(t, d.MapDMA(dataIOVA, mem, vfio.DMAReadWrite))
	enable(t, d)
	q.submit(
		model.Descriptor{Opcode: model.OpH2D, Tag: 1, Len: 4096, Src: dataIOVA},
		model.Descriptor{Opcode: model.OpFence, Tag: 2},
	)
	for tag := uint64(1); tag <= 2; tag++ {
		c, ok := q.poll()
		if !ok || c.Tag != tag || c.Status != 0 {
			t.Fatalf("completion %d not there when the doorbell returned: %+v %v", tag, c, ok)
		}
	}
	bar2, _ := d.Region(vfio.RegionBAR2)
	if !allBytes(bar2.Mapped()[:4096], 0x77) {
		t.Error("data not moved")
	}
	// A latency fault completes at the first doorbell after its deadline.
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultLatency, Nth: 1, Latency: 10 * time.Millisecond}))
	q.submit(model.Descriptor{Opcode: model.OpFence, Tag: 3})
	if _, ok := q.poll(); ok {
		t.Fatal("delayed descriptor completed at once")
	}
	time.Sleep(20 * time.Millisecond)
	q.submit(model.Descriptor{Opcode: model.OpFence, Tag: 4})
	for tag := uint64(3); tag <= 4; tag++ {
		if c, ok := q.poll(); !ok || c.Tag != tag {
			t.Fatalf("after the deadline: %+v %v", c, ok)
		}
	}
	if c := d.Counters(); c.WorkerSleeps != 0 {
		t.Errorf("inline device has a worker: %d sleeps", c.WorkerSleeps)
	}
}
