package hdmadev_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// BenchmarkEngineVsDriver is the engine's device-path overhead against
// the bare HDMA driver, side by side in one run: host→device transfers of
// size bytes in batches of batch, the device model inline in the doorbell
// (mock.Config.Inline), so every nanosecond is CPU spent on this thread —
// engine or driver, plus the same device model's work for both.
//
//   - engine: SubmitBatch of the batch's Transfers (a pool block each, no
//     callback), then Drain; poll mode, DMA path (CPU path off),
//     QueueDepth 64.
//   - driver: what a user of vfio/hdma alone must do for the same work:
//     build each descriptor from its request (the buffer's IOVA plus
//     offset, the device offset, a cookie), enqueue them and ring one
//     doorbell (SubmitBatch), then poll the completion ring until every
//     one is back, checking each completion's error; its own DMA-mapped
//     arena, a queue of the engine's ring size, no interrupts (nobody
//     sleeps; the engine in poll mode asks for none either).
//
// Each op is one transfer on each side: the two run in alternating
// chunks of about 1024 transfers on one locked OS thread, each chunk timed
// by the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID: what other
// processes take from this thread's CPU while it waits is not counted,
// which on a shared, loaded machine is most of the noise in wall time),
// so both see the same machine. Reported per transfer: engine-ns and
// driver-ns (thread CPU time), engine/driver (their ratio: the issue's
// goal is ≤ 1.25 at batch 64, ≤ 2 at batch 1) and wall-engine/driver (the
// same ratio in wall-clock time); ns/op is wall time for one transfer on
// each side.
func BenchmarkEngineVsDriver(b *testing.B) {
	for _, batch := range []int{1, 64} {
		for _, size := range []int{64, 4096} {
			b.Run(fmt.Sprintf("batch=%d/size=%d", batch, size), func(b *testing.B) {
				eng := newEngineSide(b, batch, size)
				drv := newDriverSide(b, batch, size)
				chunk := max(batch, 1024/batch*batch)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var ce, cd, we, wd time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for done, round := 0, 0; done < b.N; round++ {
					n := min(chunk, (b.N-done+batch-1)/batch*batch)
					// Alternate which side goes first.
					for k := range 2 {
						run, c, w := eng, &ce, &we
						if (round+k)&1 == 1 {
							run, c, w = drv, &cd, &wd
						}
						c0, w0 := threadCPU(b), time.Now()
						run(n)
						*w += time.Since(w0)
						*c += threadCPU(b) - c0
					}
					done += n
				}
				b.StopTimer()
				e, d := float64(ce.Nanoseconds())/float64(b.N), float64(cd.Nanoseconds())/float64(b.N)
				b.ReportMetric(e, "engine-ns/xfer")
				b.ReportMetric(d, "driver-ns/xfer")
				b.ReportMetric(float64(we)/float64(wd), "wall-engine/driver")
				b.ReportMetric(e/d, "engine/driver")
			})
		}
	}
}

// BenchmarkEngineVsDriverSide runs one side of BenchmarkEngineVsDriver
// alone: b.N transfers (rounded up to whole batches) of the engine or of
// the bare driver, each in a process run of its own. It is the form a
// count of instructions per transfer needs (scripts/insn-per-op.sh runs it
// under callgrind: make bench-insn), whose engine ÷ driver ratio is the
// same on every run of one build, unlike the time the other benchmark
// measures.
func BenchmarkEngineVsDriverSide(b *testing.B) {
	const size = 4096
	for _, side := range []string{"engine", "driver"} {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/batch=%d/size=%d", side, batch, size), func(b *testing.B) {
				run := newEngineSide
				if side == "driver" {
					run = newDriverSide
				}
				move := run(b, batch, size)
				b.ReportAllocs()
				b.ResetTimer()
				move((b.N + batch - 1) / batch * batch)
			})
		}
	}
}

// newEngineSide opens an engine over an inline vfio-mock and returns a
// function that moves n transfers (n a multiple of batch).
func newEngineSide(b *testing.B, batch, size int) func(n int) {
	m, err := mock.New(mock.Config{Inline: true, DevMemSize: 64 << 20, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	be, err := hdmadev.New(m, hdmadev.Config{CPUThreshold: -1, CloseDevice: true})
	if err != nil {
		m.Close()
		b.Fatal(err)
	}
	e, err := engine.Open(engine.Config{Backend: be, Mode: engine.ModePoll, QueueDepth: 64, PoolSize: 8 << 20,
		Backings: benchBackings, Populate: true, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	span := max(size, 64)
	ts := make([]engine.Transfer, batch)
	for i := range ts {
		blk, err := e.Alloc(size) // a block per request, as an application holds them
		if err != nil {
			b.Fatal(err)
		}
		ts[i] = engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(uint64(i * span)), Len: size}
	}
	ctx := context.Background()
	return func(n int) {
		for i := 0; i < n; i += batch {
			if k, err := e.SubmitBatch(ts, nil); k != batch || err != nil {
				b.Fatalf("submit: %d of %d: %v", k, batch, err)
			}
			if err := e.Drain(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// request is a driver user's own record of a transfer.
type request struct {
	off  int    // in the user's DMA-mapped buffer
	dev  uint64 // device offset
	n    uint32
	done bool
}

// newDriverSide sets up the bare driver on its own inline vfio-mock, as a
// user of vfio/hdma without the engine would, and returns the same kind
// of function as newEngineSide.
func newDriverSide(b *testing.B, batch, size int) func(n int) {
	m, err := mock.New(mock.Config{Inline: true, DevMemSize: 64 << 20, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	const entries = 128 // the engine's backend: twice QueueDepth
	span := max(size, 64)
	ar, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 8 << 20, Backings: benchBackings, Populate: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ar.Close() })
	dma, err := vfio.NewDMASpace(m, vfio.DMAConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dma.Close() })
	iova, err := dma.MapArena(ar, vfio.DMAReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	mem := ar.Bytes()
	qc, err := hdma.LayoutQueue(0, entries, mem[:hdma.QueueBytes(entries)], iova, false)
	if err != nil {
		b.Fatal(err)
	}
	drv, q, err := hdma.Start(m, hdma.Config{Logger: quietLog()}, qc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { drv.Close() })
	data := (hdma.QueueBytes(entries) + 4095) &^ 4095
	reqs := make([]request, batch)
	for i := range reqs {
		reqs[i] = request{off: data + i*span, dev: uint64(i * span), n: uint32(size)}
	}
	descs := make([]hdma.Desc, batch)
	out := make([]hdma.Completion, batch)
	return func(n int) {
		for i := 0; i < n; i += batch {
			for j := range reqs {
				r := &reqs[j]
				r.done = false
				descs[j] = hdma.Desc{Op: hdma.OpH2D, Len: r.n, Src: iova + uint64(r.off), Dst: r.dev, User: uint64(j)}
			}
			if k, err := q.SubmitBatch(descs); k != batch || err != nil {
				b.Fatalf("driver submit: %d of %d: %v", k, batch, err)
			}
			for got := 0; got < batch; {
				k := q.Reap(out)
				for _, c := range out[:k] {
					if c.Err != nil {
						b.Fatal(c.Err)
					}
					reqs[c.User].done = true
				}
				got += k
			}
		}
	}
}

// benchBackings: the same page backing for both sides.
var benchBackings = []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// threadCPU is the CPU time the calling OS thread has used.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatalf("clock_gettime(CLOCK_THREAD_CPUTIME_ID): %v", err)
	}
	return time.Duration(ts.Nano())
}
