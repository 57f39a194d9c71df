package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/cmd/internal/baseline"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// The device model both paths drive: vfio-mock's HDMA device.
//
// worker: the device is its own thread (a goroutine), as hardware runs
// beside the CPU; it polls the doorbell for 1 ms before it sleeps (a
// hardware queue does not sleep; on two shared vCPUs a 20 µs spin would let
// load spikes put it to sleep and bill a goroutine wake-up to whichever path
// rang next). Both threads must run at once, so on a loaded 2-vCPU machine
// this mode measures the scheduler too.
//
// inline: the device does its work inside the doorbell store, on the
// caller's thread (mock.Config.Inline): the time is the CPU cost of the
// whole software path, host and device model, and barely moves with load.
func newMock(devMem int, inline bool) (*mock.Device, error) {
	return mock.New(mock.Config{Spin: time.Millisecond, DevMemSize: devMem, Inline: inline, Logger: quietLogger()})
}

// deviceMode names the device-model mode in variant names.
func deviceMode(inline bool) string {
	if inline {
		return "-inline"
	}
	return ""
}

var deviceSizes = []int{64, 4096, 65536}

func init() {
	for _, inline := range []bool{false, true} {
		for _, size := range deviceSizes {
			p := fmt.Sprintf("%d%s/", size, deviceMode(inline))
			register(&workload{scenario: "device-small", variant: p + "traditional", count: true, fresh: inline,
				setup: func(o *options) (*runner, error) { return setupTraditional(size, 64, false, inline) }})
			for _, batch := range []int{1, 8, 64} {
				register(&workload{scenario: "device-small", variant: fmt.Sprintf("%sengine-b%d", p, batch), count: true, fresh: inline,
					setup: func(o *options) (*runner, error) { return setupEngineDevice(size, batch, -1, false, inline) }})
			}
			register(&workload{scenario: "device-small", variant: p + "engine-b64x2", count: true, fresh: inline,
				setup: func(o *options) (*runner, error) { return setupEngineStream(size, inline) }})
			for _, batch := range []int{1, 64} {
				register(&workload{scenario: "device-small", variant: fmt.Sprintf("%sfloor-driver-b%d", p, batch), count: true, fresh: inline,
					setup: func(o *options) (*runner, error) { return setupDriverFloor(size, batch, inline) }})
			}
			register(&workload{scenario: "device-small", variant: p + "engine-cpu-b64", count: true, fresh: inline,
				setup: func(o *options) (*runner, error) { return setupEngineDevice(size, 64, 0, false, inline) }})
		}
	}
}

// setupTraditional: per transfer, pwrite from a Go heap buffer into the
// staging memfd, descriptor + doorbell, blocking read of the completion
// eventfd (package baseline); `slots` heap buffers and device offsets in
// turn, as many as the engine run it is compared with has blocks. back:
// device→host instead.
func setupTraditional(size, slots int, back, inline bool) (*runner, error) {
	m, err := newMock(64<<20, inline)
	if err != nil {
		return nil, err
	}
	d, err := baseline.OpenDevice(baseline.DeviceConfig{Device: m, Staging: max(size, 4096), Logger: quietLogger()})
	if err != nil {
		m.Close()
		return nil, err
	}
	devSpan := uint64(max(size, 64))
	slots = max(1, min(slots, int(uint64(64<<20)/devSpan)))
	bufs := make([][]byte, slots)
	for i := range bufs {
		bufs[i] = make([]byte, size)
		for j := range bufs[i] {
			bufs[i][j] = byte(i + j)
		}
	}
	r := &runner{per: 1, bytes: size,
		devSyscalls: func() uint64 { return m.Counters().MSIs },
		desc:        "pwrite(2) from a Go heap buffer into a DMA-mapped staging memfd, descriptor+doorbell, blocking read(2) of the completion eventfd",
		close: func() error {
			err := d.Close()
			if e := m.Close(); err == nil {
				err = e
			}
			return err
		},
	}
	r.check = func() error {
		if back {
			return nil
		}
		// The bytes really arrived: the last value each slot wrote.
		if !bytes.Equal(d.DeviceMemory()[:size], bufs[0]) {
			return fmt.Errorf("device memory does not hold what was written")
		}
		return nil
	}
	r.run = func(n int) error {
		for i := range n {
			s := i % slots
			var err error
			if back {
				err = d.Read(bufs[s], uint64(s)*devSpan)
			} else {
				err = d.Write(bufs[s], uint64(s)*devSpan)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if back {
		r.desc = "descriptor+doorbell, blocking read(2) of the completion eventfd, pread(2) from the staging memfd into a Go heap buffer"
	}
	return r, nil
}

// setupEngineDevice: batches of `batch` transfers through engine.SubmitBatch
// and Drain, in poll mode (the caller reaps: no goroutine hand-off). cpu is
// Config.CPUThreshold: -1 forces the DMA engine (descriptor, doorbell,
// completion ring); 0 lets the engine measure where the CPU path into
// device memory is faster.
func setupEngineDevice(size, batch, cpu int, back, inline bool) (*runner, error) {
	m, err := newMock(64<<20, inline)
	if err != nil {
		return nil, err
	}
	e, err := openDeviceEngine(m, engine.Config{PoolSize: 32 << 20, QueueDepth: 64, Mode: engine.ModePoll,
		Populate: true, Logger: quietLogger()}, hdmadev.Config{CPUThreshold: cpu})
	if err != nil {
		m.Close()
		return nil, err
	}
	ts, blk0, err := deviceBatch(e, size, batch, back)
	if err != nil {
		ctx, cancel := closeCtx()
		defer cancel()
		e.Shutdown(ctx)
		m.Close()
		return nil, err
	}
	ctx := context.Background()
	r := &runner{per: batch, bytes: size, oneThread: inline,
		devSyscalls: func() uint64 { return m.Counters().MSIs },
		close: func() error {
			cctx, cancel := closeCtx()
			defer cancel()
			err := e.Shutdown(cctx)
			if e := m.Close(); err == nil {
				err = e
			}
			return err
		},
	}
	thr := e.Backend().CPUThreshold
	switch {
	case thr >= size:
		r.desc = fmt.Sprintf("engine, batches of %d: the CPU copies each block straight into device memory (BAR2; measured threshold %d B), no descriptor", batch, thr)
	default:
		r.desc = fmt.Sprintf("engine, batches of %d: one 64-byte descriptor per transfer from the DMA-mapped pool, one doorbell per batch, completions polled from the ring", batch)
	}
	devMem := func() []byte {
		reg, err := m.Region(vfio.RegionBAR2)
		if err != nil {
			return nil
		}
		return reg.Mapped()
	}
	r.check = func() error {
		if dm := devMem(); !back && (dm == nil || !bytes.Equal(dm[:size], blk0.Bytes()[:size])) {
			return fmt.Errorf("device memory does not hold what was written")
		}
		st := e.Stats()
		if bad := st.DeviceErrors + st.Timeouts + st.Canceled + st.IOErrors; bad > 0 {
			return fmt.Errorf("%d transfers failed (device %d, timeouts %d, canceled %d)", bad, st.DeviceErrors, st.Timeouts, st.Canceled)
		}
		return nil
	}
	r.run = func(n int) error {
		for i := 0; i < n; i += batch {
			if k, err := e.SubmitBatch(ts, nil); err != nil || k != batch {
				return fmt.Errorf("submit batch: %d of %d: %w", k, batch, err)
			}
			if err := e.Drain(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	return r, nil
}

// deviceBatch allocates batch blocks of size bytes, fills them with a
// pattern and returns one transfer per block, host→device (device→host
// when back) at consecutive device offsets; blk0 is the first block.
func deviceBatch(e *engine.Engine, size, batch int, back bool) (ts []engine.Transfer, blk0 engine.Block, err error) {
	ts = make([]engine.Transfer, batch)
	devSpan := uint64(max(size, 64))
	for i := range ts {
		b, err := e.Alloc(size)
		if err != nil {
			return nil, blk0, err
		}
		for j, p := 0, b.Bytes(); j < size; j++ {
			p[j] = byte(i + j)
		}
		if i == 0 {
			blk0 = b
		}
		if back {
			ts[i] = engine.Transfer{Src: engine.DeviceAt(uint64(i) * devSpan), Dst: engine.Host(b), Len: size}
		} else {
			ts[i] = engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(i) * devSpan), Len: size}
		}
	}
	return ts, blk0, nil
}

// setupEngineStream: batches of 64 with two batches in flight (QueueDepth
// 128): the host stages and rings batch k+1 while the device works on
// batch k, as a streaming application does; completions counted by a
// callback (made once, no allocation per transfer), poll mode.
func setupEngineStream(size int, inline bool) (*runner, error) {
	const batch = 64
	m, err := newMock(64<<20, inline)
	if err != nil {
		return nil, err
	}
	e, err := openDeviceEngine(m, engine.Config{PoolSize: 32 << 20, QueueDepth: 2 * batch, Mode: engine.ModePoll,
		Populate: true, Logger: quietLogger()}, hdmadev.Config{CPUThreshold: -1})
	if err != nil {
		m.Close()
		return nil, err
	}
	closeAll := func() error {
		cctx, cancel := closeCtx()
		defer cancel()
		err := e.Shutdown(cctx)
		if cerr := m.Close(); err == nil {
			err = cerr
		}
		return err
	}
	var done, failed int
	cb := func(r engine.Result) {
		done++
		if r.Err != nil {
			failed++
		}
	}
	devSpan := uint64(max(size, 64))
	var ts [2][]engine.Transfer
	for k := range ts {
		for i := range batch {
			b, err := e.Alloc(size)
			if err != nil {
				closeAll()
				return nil, err
			}
			for j, p := 0, b.Bytes(); j < size; j++ {
				p[j] = byte(i + j + k)
			}
			ts[k] = append(ts[k], engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(k*batch+i) * devSpan), Len: size, Callback: cb})
		}
	}
	return &runner{per: batch, bytes: size, close: closeAll,
		devSyscalls: func() uint64 { return m.Counters().MSIs },
		desc:        "engine, batches of 64 with two in flight: the host stages and rings the next batch while the device moves the current one",
		check: func() error {
			if failed > 0 {
				return fmt.Errorf("%d transfers failed", failed)
			}
			return nil
		},
		run: func(n int) error {
			start, submitted, pos := done, 0, 0
			for k := 0; submitted < n || done-start < n; {
				// At most two batches in flight.
				if submitted < n && submitted-(done-start) <= batch {
					got, err := e.SubmitBatch(ts[k&1][pos:], nil)
					submitted, pos = submitted+got, pos+got
					if pos == batch {
						k, pos = k+1, 0
					}
					if err != nil && !errors.Is(err, engine.ErrQueueFull) {
						return err
					}
					if got > 0 {
						continue
					}
				}
				e.Poll()
			}
			return nil
		}}, nil
}

// setupDriverFloor drives the same device with the HDMA driver directly,
// no engine, doing what a user of vfio/hdma alone must for the engine
// variant's work: its own DMA-mapped arena; per batch of `batch`, build
// each descriptor from its request (buffer IOVA + offset, device offset,
// length, a cookie), enqueue them and ring one doorbell, then poll the
// completion ring until all are back, checking each completion's error
// and marking its request done. No interrupts: a polling user asks for
// none, and neither does the engine in poll mode. It is the floor under
// the engine's device path (driver and device model, nothing else), so
// the tables show how much of the engine's time is the engine's.
func setupDriverFloor(size, batch int, inline bool) (*runner, error) {
	f, err := openDriverFloor(size, batch, inline)
	if err != nil {
		return nil, err
	}
	return &runner{per: batch, bytes: size, close: f.close, oneThread: inline,
		devSyscalls: func() uint64 { return f.m.Counters().MSIs },
		desc:        fmt.Sprintf("the floor: the HDMA driver alone on the same device, no engine: batches of %d descriptors built from the caller's requests, one doorbell, completions polled and checked", batch),
		check: func() error {
			if f.failed > 0 {
				return fmt.Errorf("%d descriptors failed", f.failed)
			}
			return nil
		},
		run: f.run}, nil
}

// driverFloor is the HDMA driver on its own: one queue in a DMA-mapped
// hugepage arena, and batch requests of size bytes each.
type driverFloor struct {
	m      *mock.Device
	ar     *hugepage.Arena
	drv    *hdma.Driver
	q      *hdma.Queue
	reqs   []floorRequest
	descs  []hdma.Desc
	out    []hdma.Completion
	failed int
}

type floorRequest struct {
	off  int    // in the DMA-mapped arena
	dev  uint64 // device offset
	n    uint32
	done bool
}

const floorEntries, floorIOVA = 128, 0x1_0000_0000 // the engine's ring: twice QueueDepth 64

func openDriverFloor(size, batch int, inline bool) (*driverFloor, error) {
	m, err := newMock(64<<20, inline)
	if err != nil {
		return nil, err
	}
	span := max(size, 64)
	dataOff := (hdma.QueueBytes(floorEntries) + 4095) &^ 4095
	arenaSize := (dataOff + batch*span + 2<<20 - 1) &^ (2<<20 - 1)
	ar, err := hugepage.NewArena(hugepage.ArenaConfig{Size: arenaSize, Populate: true})
	if err != nil {
		m.Close()
		return nil, err
	}
	f := &driverFloor{m: m, ar: ar, reqs: make([]floorRequest, batch), descs: make([]hdma.Desc, batch), out: make([]hdma.Completion, batch)}
	mem := ar.Bytes()[:ar.Len()]
	err = m.MapDMA(floorIOVA, mem, vfio.DMAReadWrite)
	if err == nil {
		var qc hdma.QueueConfig
		if qc, err = hdma.LayoutQueue(0, floorEntries, mem[:dataOff], floorIOVA, false); err == nil {
			f.drv, f.q, err = hdma.Start(m, hdma.Config{Logger: quietLogger()}, qc)
		}
	}
	if err != nil {
		f.close()
		return nil, err
	}
	for i := range f.reqs {
		f.reqs[i] = floorRequest{off: dataOff + i*span, dev: uint64(i * span), n: uint32(size)}
		for j := range size {
			mem[f.reqs[i].off+j] = byte(i + j)
		}
	}
	return f, nil
}

func (f *driverFloor) close() error {
	var errs []error
	if f.drv != nil {
		errs = append(errs, f.drv.Close())
	}
	errs = append(errs, f.m.Close(), f.ar.Close())
	return errors.Join(errs...)
}

// run moves n transfers: batches of descriptors, one doorbell each,
// completions polled.
func (f *driverFloor) run(n int) error {
	batch := len(f.reqs)
	for i := 0; i < n; i += batch {
		for j := range f.reqs {
			r := &f.reqs[j]
			r.done = false
			f.descs[j] = hdma.Desc{Op: hdma.OpH2D, Len: r.n, Src: floorIOVA + uint64(r.off), Dst: r.dev, User: uint64(j)}
		}
		if k, err := f.q.SubmitBatch(f.descs); err != nil || k != batch {
			return fmt.Errorf("driver submit: %d of %d: %w", k, batch, err)
		}
		for got, idle := 0, 0; got < batch; {
			k := f.q.Reap(f.out)
			for _, c := range f.out[:k] {
				if c.Err != nil {
					f.failed++
				}
				f.reqs[c.User].done = true
			}
			got += k
			// Yield now and then, as the engine's Drain does: a device
			// worker woken by the doorbell may sit in this P's run queue.
			if idle++; k != 0 {
				idle = 0
			} else if idle%16 == 0 {
				runtime.Gosched()
			}
		}
	}
	return nil
}

// openDeviceEngine opens an engine over the HDMA backend on m (which stays
// the caller's to close, after the engine).
func openDeviceEngine(m *mock.Device, cfg engine.Config, dc hdmadev.Config) (*engine.Engine, error) {
	be, err := hdmadev.New(m, dc)
	if err != nil {
		return nil, err
	}
	cfg.Backend = be
	return engine.Open(cfg)
}
