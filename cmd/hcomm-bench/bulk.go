package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"github.com/hcomm-go/hcomm/engine"
)

var bulkSizes = []int{1 << 20, 16 << 20}

func bulkBatch(size int) int { return max(1, (32<<20)/size/2) } // 1 MiB: 16, 16 MiB: 1

func init() {
	for _, size := range bulkSizes {
		l := sizeLabel(size)
		register(&workload{scenario: "bulk", variant: "memory-" + l + "/engine", setup: func(o *options) (*runner, error) { return setupEngineMemory(size) }})
		register(&workload{scenario: "bulk", variant: "memory-" + l + "/copy", setup: func(o *options) (*runner, error) { return setupCopy(size, 1) }})
		for _, inline := range []bool{false, true} {
			p := "device-" + l + deviceMode(inline) + "/"
			register(&workload{scenario: "bulk", variant: p + "engine", count: true,
				setup: func(o *options) (*runner, error) { return setupEngineDevice(size, bulkBatch(size), -1, false, inline) }})
			register(&workload{scenario: "bulk", variant: p + "traditional", count: true,
				setup: func(o *options) (*runner, error) { return setupTraditional(size, bulkBatch(size), false, inline) }})
			register(&workload{scenario: "bulk", variant: p + "copy", setup: func(o *options) (*runner, error) { return setupCopy(size, bulkBatch(size)) }})
		}
	}
	for _, size := range []int{64, 4096} {
		l := sizeLabel(size)
		register(&workload{scenario: "alloc", variant: l + "/engine", setup: func(o *options) (*runner, error) { return setupEngineAlloc(size) }})
		register(&workload{scenario: "alloc", variant: l + "/make", setup: func(o *options) (*runner, error) { return setupMake(size) }})
		register(&workload{scenario: "alloc", variant: l + "/sync.Pool", setup: func(o *options) (*runner, error) { return setupSyncPool(size) }})
	}
}

// setupCopy: Go's copy() between heap buffers of the same size, the
// ceiling any host-side transfer is measured against; pairs distinct
// source/destination pairs in turn, the working set of the engine run it
// is compared with (16 blocks of 1 MiB do not stay in cache as one does).
func setupCopy(size, pairs int) (*runner, error) {
	src, dst := make([][]byte, pairs), make([][]byte, pairs)
	for p := range src {
		src[p], dst[p] = make([]byte, size), make([]byte, size)
		for i := range src[p] {
			src[p][i] = byte(i + p)
		}
		copy(dst[p], src[p])
	}
	desc := "copy(dst, src) between two Go heap buffers"
	if pairs > 1 {
		desc = fmt.Sprintf("copy(dst, src) between Go heap buffers, %d distinct pairs in turn (the engine run's working set)", pairs)
	}
	return &runner{per: 1, bytes: size, close: func() error { return nil }, desc: desc,
		run: func(n int) error {
			for i := range n {
				copy(dst[i%pairs], src[i%pairs])
			}
			return nil
		}}, nil
}

// setupEngineMemory: host→host through the engine's memory target (the
// submitter copies, the completion goes through the engine as for every
// target), one transfer per Submit, Drain after each.
func setupEngineMemory(size int) (*runner, error) {
	e, err := engine.Open(engine.Config{Backend: memory.New(), PoolSize: int64(4*size + 8<<20), Mode: engine.ModePoll,
		Populate: true, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	closeE := func() error {
		ctx, cancel := closeCtx()
		defer cancel()
		return e.Shutdown(ctx)
	}
	src, err := e.Alloc(size)
	if err != nil {
		closeE()
		return nil, err
	}
	dst, err := e.Alloc(size)
	if err != nil {
		closeE()
		return nil, err
	}
	for i, p := 0, src.Bytes(); i < size; i++ {
		p[i] = byte(i)
	}
	ts := []engine.Transfer{{Src: engine.Host(src), Dst: engine.Host(dst), Len: size}}
	ctx := context.Background()
	return &runner{per: 1, bytes: size, close: closeE,
		desc: "engine memory target: Submit of one host→host transfer (pool blocks), Drain",
		run: func(n int) error {
			for range n {
				if _, err := e.SubmitBatch(ts, nil); err != nil {
					return err
				}
				if err := e.Drain(ctx); err != nil {
					return err
				}
			}
			return nil
		}}, nil
}

// setupEngineAlloc: engine.Alloc + Free of one block (the pool's small-size
// classes), the engine's allocation path.
func setupEngineAlloc(size int) (*runner, error) {
	e, err := engine.Open(engine.Config{Backend: memory.New(), PoolSize: 8 << 20, Mode: engine.ModePoll, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	return &runner{per: 1, desc: "engine.Alloc + engine.Free (hugepage pool block, off the Go heap)",
		close: func() error {
			ctx, cancel := closeCtx()
			defer cancel()
			return e.Shutdown(ctx)
		},
		run: func(n int) error {
			for range n {
				b, err := e.Alloc(size)
				if err != nil {
					return err
				}
				b.Bytes()[0] = 1
				if err := e.Free(b); err != nil {
					return err
				}
			}
			return nil
		}}, nil
}

// sink keeps make's result escaping to the heap, as a buffer handed to
// another goroutine or an io.Writer does (one uncontended atomic store).
var sink atomic.Pointer[byte]

func setupMake(size int) (*runner, error) {
	return &runner{per: 1, desc: "make([]byte, n) (heap, zeroed, garbage-collected)", close: func() error { sink.Store(nil); return nil },
		run: func(n int) error {
			for range n {
				b := make([]byte, size)
				b[0] = 1
				sink.Store(&b[0])
			}
			return nil
		}}, nil
}

func setupSyncPool(size int) (*runner, error) {
	p := &sync.Pool{New: func() any { b := make([]byte, size); return &b }}
	return &runner{per: 1, desc: "sync.Pool Get + Put of a *[]byte", close: func() error { return nil },
		run: func(n int) error {
			for range n {
				b := p.Get().(*[]byte)
				(*b)[0] = 1
				p.Put(b)
			}
			return nil
		}}, nil
}

// sizeLabel is a size in variant names and goal IDs: "1MiB", "16MiB".
func sizeLabel(n int) string { return strings.ReplaceAll(figures.Size(n), " ", "") }
