package hdma_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// TestConcurrentQueues: four queues, each driven by its own goroutine with
// random batch sizes, opcodes and interrupt flags, against one device that
// injects errors at a rate. Every descriptor completes exactly once, the
// failures are exactly the injected ones, and -race sees no shared state
// between the queues' goroutines.
func TestConcurrentQueues(t *testing.T) {
	const nq, per = 4, 1500
	r := newRig(t, mock.Config{Queues: nq, DevMemSize: 4 << 20, Seed: 3}, hdma.Config{}, nq, 64)
	must(t, r.dev.InjectFault(mock.Fault{Kind: mock.FaultError, Rate: 0.05}))
	failed := make([]map[uint64]bool, nq)
	var wg sync.WaitGroup
	for qi, q := range r.qs {
		failed[qi] = map[uint64]bool{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(qi), 1))
			seen := make([]bool, per+1)
			out := make([]hdma.Completion, 64)
			region := qi * (1 << 20) // this queue's slice of host and device memory
			next, done := 1, 0
			for done < per {
				var batch []hdma.Desc
				for n := rng.IntN(32) + 1; n > 0 && next <= per; n-- {
					off := uint64(rng.IntN(255) * 4096)
					d := hdma.Desc{Len: 4096, User: uint64(next), Interrupt: rng.IntN(8) == 0}
					switch rng.IntN(3) {
					case 0:
						d.Op, d.Src, d.Dst = hdma.OpH2D, iova(dataOff+region)+off, uint64(region)+off
					case 1:
						d.Op, d.Src, d.Dst = hdma.OpD2H, uint64(region)+off, iova(dataOff+region)+off
					default:
						d.Op, d.Src, d.Dst = hdma.OpD2D, uint64(region)+off, uint64(region)+(off+4096)%(255*4096)
					}
					batch = append(batch, d)
					next++
				}
				n, err := q.SubmitBatch(batch)
				if err != nil && !errors.Is(err, hdma.ErrQueueFull) {
					t.Errorf("queue %d: %v", qi, err)
					return
				}
				next -= len(batch) - n
				k := q.Reap(out)
				for _, c := range out[:k] {
					if c.User == 0 || c.User > per || seen[c.User] {
						t.Errorf("queue %d: completion for %d (duplicate or unknown)", qi, c.User)
						return
					}
					seen[c.User] = true
					done++
					if c.Err != nil {
						if !errors.Is(c.Err, hdma.ErrDeviceError) {
							t.Errorf("queue %d: descriptor %d: %v", qi, c.User, c.Err)
						}
						failed[qi][c.User] = true
					}
				}
			}
		}()
	}
	wg.Wait()
	injected := make([]int, nq)
	for _, in := range r.dev.Injections() {
		injected[in.Queue]++
	}
	for qi := range nq {
		if len(failed[qi]) != injected[qi] {
			t.Errorf("queue %d: %d failures, device injected %d", qi, len(failed[qi]), injected[qi])
		}
	}
	if c := r.dev.Counters(); c.Descriptors != nq*per {
		t.Errorf("device fetched %d descriptors, want %d", c.Descriptors, nq*per)
	}
}
