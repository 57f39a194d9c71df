package engine_test

import (
	"testing"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// BenchmarkSubmitPoll is the engine's own CPU cost per transfer, without
// goroutine hand-offs: batches of 64 inline transfers (memory copies, and
// the HDMA CPU path into device memory) submitted and completed by one
// goroutine in poll mode. Run it pinned (taskset -c 1) beside an older
// build to compare the core's per-transfer overhead.
func BenchmarkSubmitPoll(b *testing.B) {
	for _, name := range []string{"memory", "cpu"} {
		b.Run(name, func(b *testing.B) {
			var be backend.Backend = memory.New()
			if name == "cpu" {
				be = hdmaBE(b, nil, hdmadev.Config{CPUThreshold: 4096})
			}
			e, err := engine.Open(engine.Config{Backend: be, Mode: engine.ModePoll, PoolSize: 8 << 20, Backings: []hugepage.Backing{hugepage.Backing4K}, Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			src, _ := e.Alloc(64 * 64)
			dst, _ := e.Alloc(64 * 64)
			ts := make([]engine.Transfer, 64)
			done := 0
			cb := func(engine.Result) { done++ }
			for i := range ts {
				ts[i] = engine.Transfer{Src: engine.HostAt(src, i*64), Dst: engine.HostAt(dst, i*64), Len: 64, Callback: cb}
				if name == "cpu" {
					ts[i].Dst = engine.DeviceAt(uint64(i * 64))
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i += 64 {
				if _, err := e.SubmitBatch(ts, nil); err != nil {
					b.Fatal(err)
				}
				for done < 64 {
					e.Poll()
				}
				done = 0
			}
		})
	}
}
