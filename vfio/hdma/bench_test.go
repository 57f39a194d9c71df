package hdma_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// BenchmarkSubmitReap measures the host side of the descriptor path on
// vfio-mock: per op, one batch of 64-byte host→device descriptors is
// enqueued, published and reaped (busy-polling the completion ring). ns/desc
// is the cost per descriptor, device worker included (it copies at memory
// speed and spins on the doorbell, so it adds little).
//
// Side by side in the same run, doorbell=each publishes the same batch with
// one doorbell per descriptor (the unbatched baseline).
func BenchmarkSubmitReap(b *testing.B) {
	for _, batch := range []int{1, 8, 64} {
		for _, mode := range []string{"batched", "each"} {
			if batch == 1 && mode == "each" {
				continue // identical to batched at batch 1
			}
			b.Run(fmt.Sprintf("batch=%d/doorbell=%s", batch, mode), func(b *testing.B) {
				benchSubmitReap(b, batch, mode == "each")
			})
		}
	}
}

func benchSubmitReap(b *testing.B, batch int, each bool) {
	r := newRig(b, mock.Config{Spin: benchSpin}, hdma.Config{}, 1, 256)
	q := r.qs[0]
	descs := make([]hdma.Desc, batch)
	for i := range descs {
		descs[i] = hdma.Desc{Op: hdma.OpH2D, Len: 64, Src: iova(dataOff + i*64), Dst: uint64(i * 64), User: uint64(i)}
	}
	out := make([]hdma.Completion, batch)
	before := r.dev.Counters()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if each {
			for i := range descs {
				if err := q.Enqueue(descs[i]); err != nil {
					b.Fatal(err)
				}
				if err := q.Submit(); err != nil {
					b.Fatal(err)
				}
			}
		} else if n, err := q.SubmitBatch(descs); n != batch || err != nil {
			b.Fatal(n, err)
		}
		for got, idle := 0, 0; got < batch; {
			k := q.Reap(out[got:])
			for _, c := range out[got : got+k] {
				if c.Err != nil {
					b.Fatal(c.Err)
				}
			}
			got += k
			// Busy-poll, but yield now and then: if the device
			// worker went to sleep (its spin expired while this
			// thread was descheduled), its wake-up sits in this P's
			// run queue and would otherwise wait for preemption.
			if idle++; k != 0 {
				idle = 0
			} else if idle%256 == 0 {
				runtime.Gosched()
			}
		}
	}
	b.StopTimer()
	after := r.dev.Counters()
	descsDone := float64(after.Descriptors - before.Descriptors)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/descsDone, "ns/desc")
	b.ReportMetric(float64(after.SQDoorbells-before.SQDoorbells)/descsDone, "doorbells/desc")
	b.ReportMetric(float64(after.WorkerSleeps-before.WorkerSleeps)/float64(b.N), "worker-sleeps/op")
}

// benchSpin keeps the mock's worker polling the doorbell between batches (it
// would otherwise sleep after 20µs without work and pay a goroutine wake-up
// per batch, which on a loaded machine is what the benchmark would measure).
const benchSpin = 5 * time.Millisecond
