package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
)

// TestSubmitAllocs: submitting (Submit, SubmitBatch and their Context
// forms) and completing (Poll, Drain) allocate nothing, on every path:
// device DMA, CPU path, memory, file, and one batch that mixes an HDMA
// device, memory and a file on a several-backend engine; in both modes.
// In reaper mode the reaper goroutine's own allocations count too.
func TestSubmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	f := tempFile(t, 0)
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  func() engine.Config
		// ends gives the batch's transfers from a host block and the
		// engine's targets.
		ends func(b engine.Block, ts []engine.Target) []engine.Transfer
	}{
		{"dma", func() engine.Config { return engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: -1})} },
			func(b engine.Block, _ []engine.Target) []engine.Transfer {
				return repeat(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.DeviceAt(0), Len: 64}, 4)
			}},
		{"cpu", func() engine.Config {
			return engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: 4096})}
		},
			func(b engine.Block, _ []engine.Target) []engine.Transfer {
				return repeat(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.DeviceAt(0), Len: 64}, 4)
			}},
		{"memory", func() engine.Config { return engine.Config{Backend: memory.New()} },
			func(b engine.Block, _ []engine.Target) []engine.Transfer {
				return repeat(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 4096), Len: 64}, 4)
			}},
		{"file", func() engine.Config { return engine.Config{Backend: fileBE(t, f)} },
			func(b engine.Block, _ []engine.Target) []engine.Transfer {
				return repeat(engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.FileAt(0), Len: 4096}, 4)
			}},
		{"mixed", func() engine.Config {
			return engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: -1}), Backends: []backend.Backend{memory.New(), fileBE(t, f)}}
		}, func(b engine.Block, ts []engine.Target) []engine.Transfer {
			return []engine.Transfer{
				{Src: engine.HostAt(b, 0), Dst: ts[0].DeviceAt(0), Len: 64},
				{Src: engine.HostAt(b, 0), Dst: engine.HostAt(b, 4096), Len: 64},
				{Src: engine.HostAt(b, 0), Dst: ts[2].FileAt(0), Len: 4096},
			}
		}},
	} {
		for _, mode := range []engine.Mode{engine.ModePoll, engine.ModeReaper} {
			for _, withCtx := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/context=%v", tc.name, mode, withCtx), func(t *testing.T) {
					cfg := tc.cfg()
					cfg.Mode = mode
					e := open(t, cfg)
					b := alloc(t, e, 8192)
					var done int
					cb := func(engine.Result) { done++ } // ModePoll: runs in Poll, on this goroutine
					ts := tc.ends(b, e.Targets())
					for i := range ts {
						ts[i].Callback = cb
					}
					ids := make([]engine.ID, len(ts))
					ctx := context.Background()
					allocs := testing.AllocsPerRun(300, func() {
						var err error
						n := len(ts)
						if withCtx {
							if _, err = e.SubmitContext(ctx, ts[0]); err == nil {
								n, err = e.SubmitBatchContext(ctx, ts, ids)
							}
						} else if _, err = e.Submit(ts[0]); err == nil {
							n, err = e.SubmitBatch(ts, ids)
						}
						if n != len(ts) || err != nil {
							t.Fatal(n, err)
						}
						if mode == engine.ModeReaper {
							if err := e.Drain(ctx); err != nil {
								t.Fatal(err)
							}
							return
						}
						for done < 1+len(ts) {
							if e.Poll() == 0 {
								runtime.Gosched() // AllocsPerRun runs at GOMAXPROCS 1: let the mock's worker run
							}
						}
						done = 0
					})
					if allocs != 0 {
						t.Fatalf("%.2f allocations per Submit + SubmitBatch(%d) + completion", allocs, len(ts))
					}
				})
			}
		}
	}
}

func repeat(t engine.Transfer, n int) []engine.Transfer {
	ts := make([]engine.Transfer, n)
	for i := range ts {
		ts[i] = t
	}
	return ts
}
