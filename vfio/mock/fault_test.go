package mock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func TestInjectFaultValidation(t *testing.T) {
	d := newDevice(t, mock.Config{})
	bad := []mock.Fault{
		{},
		{Kind: mock.FaultError},
		{Kind: mock.FaultError, Rate: 1.5},
		{Kind: mock.FaultLatency, Nth: 1},
		{Kind: mock.FaultStall, Nth: 1, Opcode: 9},
		{Kind: mock.FaultKind(99), Nth: 1},
	}
	for _, f := range bad {
		if err := d.InjectFault(f); !errors.Is(err, mock.ErrBadFault) {
			t.Errorf("InjectFault(%+v) = %v, want ErrBadFault", f, err)
		}
	}
}

// h2dBatch submits n host→device copies of 64 bytes (tag i+1, block i of
// the host buffer to block i of device memory) with one doorbell.
func h2dBatch(q *rawQueue, n int) {
	for i := range n {
		q.put(model.Descriptor{Opcode: model.OpH2D, Tag: uint64(i + 1), Len: 64, Src: dataIOVA + uint64(i)*64, Dst: uint64(i) * 64})
	}
	q.doorbell()
}

func faultSetup(t *testing.T) (*mock.Device, *rawQueue, *rawQueue, []byte, []byte) {
	d := newDevice(t, mock.Config{DevMemSize: 1 << 20, Seed: 42})
	q0 := newRawQueue(t, d, 0, 256)
	q1 := newRawQueue(t, d, 1, 256)
	mem := hostMem(t, 64<<10)
	for i := range mem {
		mem[i] = byte(i%251 + 1)
	}
	must(t, d.MapDMA(dataIOVA, mem, vfio.DMAReadWrite))
	bar2, _ := d.Region(vfio.RegionBAR2)
	enable(t, d)
	return d, q0, q1, mem, bar2.Mapped()
}

// TestFaultErrorExact: an error injected on the Nth descriptor of one queue
// and opcode hits exactly that descriptor; its data does not move, every
// other descriptor's does.
func TestFaultErrorExact(t *testing.T) {
	d, q0, q1, mem, dev := faultSetup(t)
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultError, Queues: 1 << 0, Opcode: model.OpH2D, Nth: 5, Status: model.StatusIOMMUFault}))
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultError, Queues: 1 << 1, Nth: 2}))
	// Fences on queue 0 do not count towards the H2D rule.
	q0.submit(model.Descriptor{Opcode: model.OpFence, Tag: 1000})
	q0.reap(1)
	h2dBatch(q0, 10)
	for _, c := range q0.reap(10) {
		want := uint16(model.StatusOK)
		if c.Tag == 5 {
			want = model.StatusIOMMUFault
		}
		if c.Status != want {
			t.Errorf("queue 0 tag %d: status %d, want %d", c.Tag, c.Status, want)
		}
		i := int(c.Tag - 1)
		moved := dev[i*64] == mem[i*64] && dev[i*64+63] == mem[i*64+63]
		if moved != (want == model.StatusOK) {
			t.Errorf("tag %d: data moved=%v with status %d", c.Tag, moved, c.Status)
		}
	}
	q1.submit(model.Descriptor{Opcode: model.OpFence, Tag: 1}, model.Descriptor{Opcode: model.OpFence, Tag: 2}, model.Descriptor{Opcode: model.OpFence, Tag: 3})
	for _, c := range q1.reap(3) {
		if (c.Status == model.StatusDeviceError) != (c.Tag == 2) {
			t.Errorf("queue 1 tag %d: status %d", c.Tag, c.Status)
		}
	}
	inj := d.Injections()
	if len(inj) != 2 || inj[0] != (mock.Injection{Kind: mock.FaultError, Queue: 0, Tag: 5, Seq: 6}) ||
		inj[1] != (mock.Injection{Kind: mock.FaultError, Queue: 1, Tag: 2, Seq: 2}) {
		t.Errorf("injections %+v", inj)
	}
	if c := d.Counters(); c.InjectedErrors != 2 {
		t.Errorf("InjectedErrors %d", c.InjectedErrors)
	}
}

// TestFaultErrorRate: at a rate, the descriptors that fail are exactly those
// the device logged as injected.
func TestFaultErrorRate(t *testing.T) {
	d, q0, _, _, _ := faultSetup(t)
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultError, Rate: 0.25}))
	h2dBatch(q0, 200)
	failed := map[uint64]bool{}
	for _, c := range q0.reap(200) {
		if c.Status != model.StatusOK {
			if c.Status != model.StatusDeviceError {
				t.Errorf("tag %d status %d", c.Tag, c.Status)
			}
			failed[c.Tag] = true
		}
	}
	inj := d.Injections()
	if len(inj) != len(failed) || len(failed) < 20 || len(failed) > 90 {
		t.Fatalf("%d injections, %d failures (rate 0.25 of 200)", len(inj), len(failed))
	}
	for _, in := range inj {
		if !failed[in.Tag] {
			t.Errorf("injection %+v did not fail its descriptor", in)
		}
	}
}

// TestFaultLatency: a delayed descriptor completes after its latency, the
// rest of its queue waits behind it, other queues do not.
func TestFaultLatency(t *testing.T) {
	d, q0, q1, _, _ := faultSetup(t)
	const lat = 150 * time.Millisecond
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultLatency, Queues: 1, Nth: 1, Latency: lat}))
	start := time.Now()
	h2dBatch(q0, 3)
	q1.submit(model.Descriptor{Opcode: model.OpFence, Tag: 9})
	if c := q1.reap(1)[0]; c.Tag != 9 {
		t.Fatalf("queue 1: %+v", c)
	}
	cs := q0.reap(3)
	if el := time.Since(start); el < lat {
		t.Errorf("delayed descriptor completed after %v < %v", el, lat)
	}
	for i, c := range cs {
		if c.Tag != uint64(i+1) || c.Status != 0 {
			t.Errorf("queue 0 completion %d: %+v", i, c)
		}
	}
}

// TestFaultStallThenReset: a stalled descriptor never completes and blocks
// its queue; a controller reset completes it and everything behind it with
// status 4, and the device works again after re-setup.
func TestFaultStallThenReset(t *testing.T) {
	d, q0, q1, _, _ := faultSetup(t)
	bar0, _ := d.Region(vfio.RegionBAR0)
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultStall, Queues: 1, Opcode: model.OpH2D, Nth: 3}))
	h2dBatch(q0, 6)
	got := q0.reap(2)
	if got[0].Tag != 1 || got[1].Tag != 2 {
		t.Fatalf("completions before the stall: %+v", got)
	}
	q1.submit(model.Descriptor{Opcode: model.OpFence, Tag: 77})
	q1.reap(1)
	q0.none(50 * time.Millisecond)
	must(t, bar0.Write32(model.RegControl, model.ControlReset))
	got = q0.reap(4)
	for i, c := range got {
		if c.Tag != uint64(i+3) || c.Status != model.StatusReset {
			t.Errorf("after reset, completion %d: %+v", i, c)
		}
	}
	if st, _ := bar0.Read32(model.RegStatus); st != 0 {
		t.Errorf("STATUS after reset %#x", st)
	}
	// Re-setup and go on.
	q0.reinit(sqIOVA(0), cqIOVA(0))
	q1.reinit(sqIOVA(1), cqIOVA(1))
	enable(t, d)
	h2dBatch(q0, 4)
	for _, c := range q0.reap(4) {
		if c.Status != 0 {
			t.Errorf("after recovery: %+v", c)
		}
	}
}

// TestFaultInjectedReset: the device resets itself mid-stream; what was in
// flight completes with status 4, earlier descriptors were done, the device
// is disabled.
func TestFaultInjectedReset(t *testing.T) {
	d, q0, q1, _, _ := faultSetup(t)
	bar0, _ := d.Region(vfio.RegionBAR0)
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultReset, Queues: 1, Nth: 4}))
	// Queue 1 has work stuck behind a latency fault, so it is in flight at
	// the time of the reset.
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultLatency, Queues: 2, Nth: 1, Latency: time.Hour}))
	q1.submit(model.Descriptor{Opcode: model.OpFence, Tag: 50}, model.Descriptor{Opcode: model.OpFence, Tag: 51})
	time.Sleep(10 * time.Millisecond)
	h2dBatch(q0, 8)
	cs := q0.reap(8)
	for i, c := range cs {
		want := uint16(model.StatusOK)
		if i >= 3 {
			want = model.StatusReset
		}
		if c.Tag != uint64(i+1) || c.Status != want {
			t.Errorf("queue 0 completion %d: %+v, want status %d", i, c, want)
		}
	}
	for i, c := range q1.reap(2) {
		if c.Tag != uint64(50+i) || c.Status != model.StatusReset {
			t.Errorf("queue 1 completion %d: %+v", i, c)
		}
	}
	if st, _ := bar0.Read32(model.RegStatus); st != 0 {
		t.Errorf("STATUS after injected reset %#x", st)
	}
	if c := d.Counters(); c.InjectedResets != 1 || c.Completions[model.StatusReset] != 7 {
		t.Errorf("counters %+v", c)
	}
}

// TestFunctionReset: Device.Reset forgets everything without writing
// completions; mappings survive.
func TestFunctionReset(t *testing.T) {
	d, q0, _, _, _ := faultSetup(t)
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultStall, Queues: 1, Nth: 1}))
	h2dBatch(q0, 3)
	time.Sleep(10 * time.Millisecond)
	must(t, d.Reset())
	q0.none(20 * time.Millisecond)
	if n := d.Mappings(); n != 5 {
		t.Errorf("%d mappings after reset, want 5", n)
	}
	q0.reinit(sqIOVA(0), cqIOVA(0))
	enable(t, d)
	h2dBatch(q0, 3)
	for _, c := range q0.reap(3) {
		if c.Status != 0 {
			t.Errorf("after reset: %+v", c)
		}
	}
}

// TestLateAfter: with Config.LateAfter the device counts the descriptors it
// completed later than that after their doorbell, their injected latency
// deducted. The device runs inline, so a descriptor waits until the next
// doorbell after its latency: the test decides how late it is. The margins
// are hundreds of milliseconds, so a slow machine cannot turn the verdicts.
func TestLateAfter(t *testing.T) {
	tests := []struct {
		name      string
		lateAfter time.Duration
		latency   time.Duration // injected on the first descriptor
		wait      time.Duration // before the doorbell that completes the first two
		want      uint64
	}{
		{"off", 0, time.Millisecond, 60 * time.Millisecond, 0},
		{"on time", 400 * time.Millisecond, time.Millisecond, 0, 0},
		// The first descriptor is held for its latency, the second
		// waits behind it: both complete at the next doorbell.
		{"late", 20 * time.Millisecond, time.Millisecond, 60 * time.Millisecond, 2},
		// Held 300 ms by the injected latency, done 310 ms after its
		// doorbell: 10 ms of its own, not late. The second one is.
		{"latency excused", 200 * time.Millisecond, 300 * time.Millisecond, 310 * time.Millisecond, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDevice(t, mock.Config{Inline: true, DevMemSize: 1 << 20, LateAfter: tt.lateAfter})
			q := newRawQueue(t, d, 0, 16)
			mem := hostMem(t, 4096)
			must(t, d.MapDMA(dataIOVA, mem, vfio.DMAReadWrite))
			enable(t, d)
			must(t, d.InjectFault(mock.Fault{Kind: mock.FaultLatency, Queues: 1, Nth: 1, Latency: tt.latency}))
			h2dBatch(q, 2)
			time.Sleep(max(tt.wait, tt.latency+time.Millisecond))
			// An inline device works in the doorbell: this one completes
			// the held descriptor, the one behind it and a third, on time.
			q.submit(model.Descriptor{Opcode: model.OpH2D, Tag: 3, Len: 64, Src: dataIOVA, Dst: 4096})
			q.reap(3)
			if got := d.Counters().Late; got != tt.want {
				t.Errorf("Counters().Late = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestLateAfterStall: a stalled descriptor never counts as late, nor does
// what waited behind it until the reset that completes them all; a slow
// device without a stall does (TestLateAfter).
func TestLateAfterStall(t *testing.T) {
	d := newDevice(t, mock.Config{Inline: true, DevMemSize: 1 << 20, LateAfter: 20 * time.Millisecond})
	q := newRawQueue(t, d, 0, 16)
	mem := hostMem(t, 4096)
	must(t, d.MapDMA(dataIOVA, mem, vfio.DMAReadWrite))
	enable(t, d)
	must(t, d.InjectFault(mock.Fault{Kind: mock.FaultStall, Queues: 1, Nth: 1}))
	h2dBatch(q, 2)
	time.Sleep(60 * time.Millisecond)
	bar0, _ := d.Region(vfio.RegionBAR0)
	must(t, bar0.Write32(model.RegControl, model.ControlReset))
	for i, c := range q.reap(2) {
		if c.Status != model.StatusReset {
			t.Errorf("completion %d after the reset: %+v, want status %d", i, c, model.StatusReset)
		}
	}
	if c := d.Counters(); c.InjectedStalls != 1 || c.Late != 0 {
		t.Errorf("injected stalls %d, late %d; want 1 and 0", c.InjectedStalls, c.Late)
	}
}
