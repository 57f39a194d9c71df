package engine

import (
	"runtime"
	"testing"
)

// TestSubmitAllocs: Submit (and the Poll that completes it) allocates
// nothing, on every path: device DMA, CPU path, memory, and batches. Poll
// mode, so that no other goroutine's allocations are counted.
func TestSubmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var done int
	cb := func(Result) { done++ } // runs in Poll, on this goroutine
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"dma", Config{CPUThreshold: -1}},
		{"cpu", Config{CPUThreshold: 4096}},
		{"memory", Config{Target: TargetMemory}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Mode = ModePoll
			e := open(t, tc.cfg)
			b := alloc(t, e, 4096)
			tr := Transfer{Src: HostAt(b, 0), Dst: DeviceAt(0), Len: 64, Callback: cb}
			if tc.cfg.Target == TargetMemory {
				tr.Dst = HostAt(b, 64)
			}
			ts := []Transfer{tr, tr, tr, tr}
			ids := make([]ID, len(ts))
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
