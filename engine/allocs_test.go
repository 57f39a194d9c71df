package engine_test

import (
	"runtime"
	"testing"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
)

// TestSubmitAllocs: Submit (and the Poll that completes it) allocates
// nothing, on every path: device DMA, CPU path, memory, and batches. Poll
// mode, so that no other goroutine's allocations are counted.
func TestSubmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var done int
	cb := func(engine.Result) { done++ } // runs in Poll, on this goroutine
	for _, tc := range []struct {
		name string
		cfg  engine.Config
	}{
		{"dma", engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: -1})}},
		{"cpu", engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: 4096})}},
		{"memory", engine.Config{Backend: memory.New()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Mode = engine.ModePoll
			e := open(t, tc.cfg)
			b := alloc(t, e, 4096)
			tr := engine.Transfer{Src: engine.HostAt(b, 0), Dst: engine.DeviceAt(0), Len: 64, Callback: cb}
			if tc.name == "memory" {
				tr.Dst = engine.HostAt(b, 64)
			}
			ts := []engine.Transfer{tr, tr, tr, tr}
			ids := make([]engine.ID, len(ts))
			allocs := testing.AllocsPerRun(500, func() {
				if _, err := e.Submit(tr); err != nil {
					t.Fatal(err)
				}
				if n, err := e.SubmitBatch(ts, ids); n != len(ts) || err != nil {
					t.Fatal(n, err)
				}
				for done < 5 {
					if e.Poll() == 0 {
						runtime.Gosched() // AllocsPerRun runs at GOMAXPROCS 1: let the mock's worker run
					}
				}
				done = 0
			})
			if allocs != 0 {
				t.Fatalf("%.1f allocations per Submit + SubmitBatch(4) + Poll", allocs)
			}
		})
	}
}
