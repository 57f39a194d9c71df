package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// benchCB is a callback that allocates nothing.
var benchCB = func(engine.Result) {}

// BenchmarkSubmit streams host→device transfers through the engine with a
// callback each, batch transfers per SubmitBatch, keeping the queue full
// (SubmitBatchContext waits for room), and reports per transfer: ns, the
// doorbells rung and allocations (0). Families:
//
//	device/…   DMA path (CPU path off)
//	cpu/…      CPU path into device memory (threshold forced high)
//	memory/…   the memory target (host→host copy), the ceiling
//	driver/…   the baseline: the same transfers hand-written on the HDMA
//	           driver by one goroutine (no engine), pipelined the same way
//	file/…     host→file writes through io_uring (registered buffer and
//	           file; one io_uring_enter per batch), 4 KiB and 64 KiB
//	writeat/…  the traditional file path: os.File.WriteAt per block from
//	           Go heap memory (one pwrite(2) per transfer)
func BenchmarkSubmit(b *testing.B) {
	for _, fam := range []string{"device", "cpu", "memory", "driver", "file", "writeat"} {
		for _, batch := range []int{1, 8, 64} {
			for _, size := range []int{64, 4096, 65536} {
				if fam == "cpu" && size > 4096 || (fam == "file" || fam == "writeat") && size < 4096 {
					continue
				}
				b.Run(fmt.Sprintf("%s/batch=%d/size=%d", fam, batch, size), func(b *testing.B) {
					switch fam {
					case "driver":
						benchDriver(b, batch, size)
						return
					case "writeat":
						benchWriteAt(b, batch, size)
						return
					}
					cfg := engine.Config{Backend: hdmaBE(b, nil, hdmadev.Config{CPUThreshold: -1}), QueueDepth: 256}
					switch fam {
					case "cpu":
						_ = cfg.Backend.Close()
						cfg.Backend = hdmaBE(b, nil, hdmadev.Config{CPUThreshold: 1 << 20})
					case "memory":
						_ = cfg.Backend.Close()
						cfg = engine.Config{Backend: memory.New(), QueueDepth: 256}
					case "file":
						f, err := os.Create(filepath.Join(b.TempDir(), "bench"))
						if err != nil {
							b.Fatal(err)
						}
						defer f.Close()
						_ = cfg.Backend.Close()
						cfg = engine.Config{Backend: fileBE(b, f), QueueDepth: 256, Alignment: 4096}
					}
					benchEngine(b, cfg, batch, size)
				})
			}
		}
	}
}

func benchEngine(b *testing.B, cfg engine.Config, batch, size int) {
	cfg.PoolSize = 32 << 20
	cfg.Backings = []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K}
	cfg.Logger = quiet()
	e, err := engine.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	src := alloc(b, e, size*batch)
	dst := alloc(b, e, size*batch)
	ts := make([]engine.Transfer, batch)
	for i := range ts {
		ts[i] = engine.Transfer{Src: engine.HostAt(src, i*size), Dst: engine.DeviceAt(uint64(i * size)), Len: size, Callback: benchCB}
		switch cfg.Backend.Describe().Name {
		case "memory":
			ts[i].Dst = engine.HostAt(dst, i*size)
		case "file":
			ts[i].Dst = engine.FileAt(int64(i * size))
		}
	}
	ctx := context.Background()
	before := e.Stats()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(batch, b.N-done)
		n, err := e.SubmitBatchContext(ctx, ts[:k], nil)
		if err != nil {
			b.Fatal(err)
		}
		done += n
	}
	if err := e.Drain(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	st := e.Stats()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/transfer")
	b.ReportMetric(float64(st.Doorbells-before.Doorbells)/float64(b.N), "doorbells/transfer")
	if cfg.Backend.Describe().Name == "file" {
		b.ReportMetric(float64(st.Syscalls-before.Syscalls)/float64(b.N), "syscalls/transfer")
	}
	if st.Completed-before.Completed != uint64(b.N) {
		b.Fatalf("%d completions for %d transfers", st.Completed-before.Completed, b.N)
	}
}

// benchDriver is the hand-written baseline: one goroutine drives an HDMA
// queue directly (no staging ring, no reaper, no callbacks), enqueueing a
// batch, ringing once, and reaping whatever is ready, with the same depth.
func benchDriver(b *testing.B, batch, size int) {
	dev, err := mock.New(mock.Config{Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	arena, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 32 << 20, Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K}})
	if err != nil {
		b.Fatal(err)
	}
	defer arena.Close()
	const iova = 1 << 32
	mem := arena.Bytes()
	if err := dev.MapDMA(iova, mem, vfio.DMAReadWrite); err != nil {
		b.Fatal(err)
	}
	drv, err := hdma.Open(dev, hdma.Config{Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer drv.Close()
	const entries = 512
	q, err := drv.SetupQueue(hdma.QueueConfig{Entries: entries, SQ: mem, SQIOVA: iova, CQ: mem[entries*64:], CQIOVA: iova + entries*64})
	if err != nil {
		b.Fatal(err)
	}
	if err := drv.Enable(); err != nil {
		b.Fatal(err)
	}
	const data = 1 << 20
	descs := make([]hdma.Desc, batch)
	for i := range descs {
		descs[i] = hdma.Desc{Op: hdma.OpH2D, Len: uint32(size), Src: iova + data + uint64(i*size), Dst: uint64(i * size)}
	}
	cpl := make([]hdma.Completion, entries)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	reaped := 0
	for done := 0; done < b.N; {
		k := min(batch, b.N-done)
		if q.Outstanding()+k <= 256 {
			n, err := q.SubmitBatch(descs[:k])
			if err != nil && n == 0 {
				b.Fatal(err)
			}
			done += n
		}
		reaped += q.Reap(cpl)
	}
	deadline := time.Now().Add(time.Minute)
	for reaped < b.N && time.Now().Before(deadline) {
		reaped += q.Reap(cpl)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/transfer")
	b.ReportMetric(float64(q.Stats().Doorbells)/float64(b.N), "doorbells/transfer")
}

// BenchmarkSubmitParallel: 1, 2, 8 and 64 goroutines each submit single
// 64-byte host→device transfers at once. Group commit: whoever wins the
// owner CAS drains everyone's staged transfers with one doorbell, so
// doorbells per transfer fall as submitters rise (submitters=1 is the
// baseline in the same run).
func BenchmarkSubmitParallel(b *testing.B) {
	for _, g := range []int{1, 2, 8, 64} {
		b.Run(fmt.Sprintf("submitters=%d", g), func(b *testing.B) {
			e, err := engine.Open(engine.Config{Backend: hdmaBE(b, nil, hdmadev.Config{CPUThreshold: -1}), PoolSize: 32 << 20, QueueDepth: 256, Logger: quiet(), Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K}})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			src := alloc(b, e, 64*g)
			ctx := context.Background()
			before := e.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for i := range g {
				n := b.N / g
				if i < b.N%g {
					n++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					t := engine.Transfer{Src: engine.HostAt(src, 64*i), Dst: engine.DeviceAt(uint64(64 * i)), Len: 64, Callback: benchCB}
					for range n {
						if _, err := e.SubmitContext(ctx, t); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := e.Drain(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			st := e.Stats()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/transfer")
			b.ReportMetric(float64(st.Doorbells-before.Doorbells)/float64(b.N), "doorbells/transfer")
			b.ReportMetric(float64(st.Transfers-before.Transfers)/float64(st.Batches-before.Batches), "transfers/batch")
		})
	}
}

// benchWriteAt is the traditional file path the file target is compared
// with: one WriteAt (pwrite) per block, from Go heap memory.
func benchWriteAt(b *testing.B, batch, size int) {
	f, err := os.Create(filepath.Join(b.TempDir(), "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, size*batch)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % batch
		if _, err := f.WriteAt(buf[k*size:(k+1)*size], int64(k*size)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/transfer")
}

// BenchmarkCallbackPipeline keeps depth 4 KiB host→device transfers in
// flight on the device model (its worker thread, DMA path) where each
// completion's callback submits the next transfer, the way a pipeline
// chains its steps; the submitting goroutine only waits. It reports ns and
// SQ doorbells per transfer: the callbacks of one completion batch ring one
// doorbell for what they submit.
func BenchmarkCallbackPipeline(b *testing.B) {
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		for _, depth := range []int{8, 32} {
			b.Run(fmt.Sprintf("%v/depth=%d", mode, depth), func(b *testing.B) {
				m, err := mock.New(mock.Config{Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				e, err := engine.Open(engine.Config{Mode: mode, Backend: hdmaBE(b, m, hdmadev.Config{CPUThreshold: -1}),
					PoolSize: 8 << 20, Backings: []hugepage.Backing{hugepage.Backing4K}, Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				blk, err := e.Alloc(4096)
				if err != nil {
					b.Fatal(err)
				}
				var left sync.WaitGroup
				remaining := b.N
				var submitErr error
				var next func(engine.Result)
				t := engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(0), Len: 4096}
				// remaining is only touched by callbacks, which run one at
				// a time (one completion round at a time).
				next = func(r engine.Result) {
					if r.Err != nil && submitErr == nil {
						submitErr = r.Err
					}
					if remaining > 0 {
						remaining--
						t := t
						t.Callback = next
						if _, err := e.Submit(t); err != nil && submitErr == nil {
							submitErr = err
						}
						return
					}
					left.Done()
				}
				start := min(depth, b.N)
				remaining -= start
				left.Add(start)
				before := m.Counters().SQDoorbells
				b.ResetTimer()
				for range start {
					t := t
					t.Callback = next
					if _, err := e.Submit(t); err != nil {
						b.Fatal(err)
					}
				}
				if mode == engine.ModePoll {
					ch := make(chan struct{})
					go func() { left.Wait(); close(ch) }()
					for polling := true; polling; {
						e.Poll()
						select {
						case <-ch:
							polling = false
						default:
						}
					}
				} else {
					left.Wait()
				}
				b.StopTimer()
				if submitErr != nil {
					b.Fatal(submitErr)
				}
				b.ReportMetric(float64(m.Counters().SQDoorbells-before)/float64(b.N), "doorbells/op")
			})
		}
	}
}
