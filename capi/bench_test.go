package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// BenchmarkSubmit measures nanoseconds per submit of one flow three ways,
// side by side: the Go engine API (engine.Submit / SubmitBatch with a Go
// callback), the C ABI's Go half called from Go (pointer resolution and the
// callback table, no cgo), and the C ABI from C (tests/capi/bench_submit,
// a C loop calling hcomm_submit_transfer / hcomm_submit_batch through
// libhcomm.so; run `make capi-tests` first, or it is skipped).
//
// The flow, identical in all three: a 64 MiB pool, queue depth 64, the
// mock device; per round, 64 host→device transfers of 128 KiB (DMA path),
// timing only the submit calls, then waiting for all 64 and their
// callbacks. The memory variants use the memory target and 64-byte
// host→host copies instead (the submitter copies: no device goroutine
// competes for the CPU during the timed loop). The metric is ns/submit (b.N rounds of 64 submits). The
// refused variants submit a pointer that is not hcomm memory, so the call
// returns EFAULT before the engine is involved: c-abi minus go-capi there
// is the cost of crossing from C into Go.
func BenchmarkSubmit(b *testing.B) {
	b.Run("go-capi/refused", benchCapiGoRefused)
	b.Run("c-abi/refused", func(b *testing.B) { benchC(b, "refused") })
	for _, mode := range []string{"single", "batch", "memory", "memory-batch"} {
		batch, mem := strings.HasSuffix(mode, "batch"), strings.HasPrefix(mode, "memory")
		b.Run("go-engine/"+mode, func(b *testing.B) { benchEngine(b, batch, mem) })
		b.Run("go-capi/"+mode, func(b *testing.B) { benchCapiGo(b, batch, mem) })
		b.Run("c-abi/"+mode, func(b *testing.B) { benchC(b, mode) })
	}
}

const (
	benchDepth = 64
	benchSize  = 128 << 10
)

func benchCfg(mem bool) config {
	c := config{PoolSize: 64 << 20, QueueDepth: benchDepth, Align: 64}
	if mem {
		c.Target = targetMemory
	}
	return c
}

func benchLen(mem bool) int {
	if mem {
		return 64
	}
	return benchSize
}

var benchDone atomic.Uint64

func benchCallback(r engine.Result) {
	if r.Err == nil {
		benchDone.Add(1)
	}
}

func benchEngine(b *testing.B, batch, mem bool) {
	var be backend.Backend = memory.New()
	if !mem {
		dev, err := mock.New(mock.Config{Logger: logger})
		if err != nil {
			b.Fatal(err)
		}
		if be, err = hdmadev.New(dev, hdmadev.Config{CloseDevice: true}); err != nil {
			b.Fatal(err)
		}
	}
	e, err := engine.Open(engine.Config{Backend: be, PoolSize: 64 << 20, QueueDepth: benchDepth, Alignment: 64, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	host, err := e.Alloc(benchDepth * benchSize)
	if err != nil {
		b.Fatal(err)
	}
	host2, err := e.Alloc(benchDepth * benchSize)
	if err != nil {
		b.Fatal(err)
	}
	ts := make([]engine.Transfer, benchDepth)
	ids := make([]engine.ID, benchDepth)
	for i := range ts {
		ts[i] = engine.Transfer{Src: engine.HostAt(host, i*benchSize), Dst: engine.DeviceAt(uint64(i * benchSize)), Len: benchLen(mem), Callback: benchCallback}
		if mem {
			ts[i].Dst = engine.HostAt(host2, i*benchSize)
		}
	}
	benchDone.Store(0)
	var timed time.Duration
	ctx := context.Background()
	b.ResetTimer()
	for r := range b.N {
		t0 := time.Now()
		// A full queue (the previous round's slots not yet released
		// by the reaper) is retried, in all three variants alike.
		if batch {
			for n := 0; n < len(ts); {
				k, err := e.SubmitBatch(ts[n:], ids[n:])
				n += k
				if err != nil && err != engine.ErrQueueFull {
					b.Fatal(err)
				}
			}
		} else {
			for i := range ts {
				for ids[i], err = e.Submit(ts[i]); err == engine.ErrQueueFull; ids[i], err = e.Submit(ts[i]) {
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		timed += time.Since(t0)
		for _, id := range ids {
			if err := e.Wait(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		for benchDone.Load() < uint64(r+1)*benchDepth {
		}
	}
	b.ReportMetric(float64(timed.Nanoseconds())/float64(b.N*benchDepth), "ns/submit")
}

func benchCapiGo(b *testing.B, batch, mem bool) {
	var done atomic.Uint64
	s, code, err := open(benchCfg(mem), func(cb, ud uintptr, id uint64, status int32) {
		if status == codeOK {
			done.Add(1)
		}
	})
	if err != nil {
		b.Fatalf("open: %d %v", code, err)
	}
	defer finalize(s.handle, -1)
	host, c1 := s.allocHost(benchDepth * benchSize)
	var dev uintptr
	var c2 int32
	if mem {
		dev, c2 = s.allocHost(benchDepth * benchSize)
	} else {
		dev, c2 = s.allocDev(benchDepth * benchSize)
	}
	if c1 != codeOK || c2 != codeOK {
		b.Fatalf("alloc: %d %d", c1, c2)
	}
	ts := make([]cTransfer, benchDepth)
	var timed time.Duration
	b.ResetTimer()
	for r := range b.N {
		for i := range ts {
			ts[i] = cTransfer{Src: host + uintptr(i*benchSize), Dst: dev + uintptr(i*benchSize), Size: uintptr(benchLen(mem)), Callback: 1}
		}
		t0 := time.Now()
		if batch {
			for n := 0; n < len(ts); {
				code := s.submitBatch(ts[n:])
				for n < len(ts) && ts[n].ID != 0 {
					n++
				}
				if code != codeOK && code != codeEAGAIN {
					b.Fatalf("batch: %d", code)
				}
			}
		} else {
			for i := range ts {
				code := codeEAGAIN
				for code == codeEAGAIN {
					ts[i].ID, code = s.submit(ts[i].Src, ts[i].Dst, ts[i].Size, 1, 0)
				}
				if code != codeOK {
					b.Fatalf("submit: %d", code)
				}
			}
		}
		timed += time.Since(t0)
		for i := range ts {
			if code := s.wait(ts[i].ID, -1); code != codeOK {
				b.Fatalf("wait: %d", code)
			}
		}
		for done.Load() < uint64(r+1)*benchDepth {
		}
	}
	b.ReportMetric(float64(timed.Nanoseconds())/float64(b.N*benchDepth), "ns/submit")
}

func benchCapiGoRefused(b *testing.B) {
	s, code, err := open(benchCfg(false), nil)
	if err != nil {
		b.Fatalf("open: %d %v", code, err)
	}
	defer finalize(s.handle, -1)
	var x [64]byte
	bad := uintptr(unsafe.Pointer(&x))
	dev, _ := s.allocDev(benchSize)
	var timed time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		for range benchDepth {
			if _, code := s.submit(bad, dev, benchSize, 1, 0); code != codeEFAULT {
				b.Fatalf("refused submit: %d", code)
			}
		}
		timed += time.Since(t0)
	}
	b.ReportMetric(float64(timed.Nanoseconds())/float64(b.N*benchDepth), "ns/submit")
}

// benchC runs the C program for b.N rounds and reports what it measured.
func benchC(b *testing.B, mode string) {
	bin := os.Getenv("HCOMM_CAPI_BENCH")
	if bin == "" {
		bin = filepath.Join("..", "bin", "capi", "tests", "bench_submit")
	}
	if _, err := os.Stat(bin); err != nil {
		b.Skipf("C benchmark %s not built (make capi-tests): %v", bin, err)
	}
	out, err := exec.Command(bin, mode, strconv.Itoa(b.N)).CombinedOutput()
	if err != nil {
		b.Fatalf("%s: %v\n%s", bin, err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] != "ns_per_submit" {
		b.Fatalf("%s: unexpected output %q", bin, out)
	}
	ns, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(ns, "ns/submit")
}
