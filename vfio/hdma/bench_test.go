package hdma_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// BenchmarkSubmitReap measures the descriptor path on vfio-mock: per op, one
// batch of 64-byte host→device descriptors is enqueued, published and reaped
// (busy-polling the completion ring). ns/desc is the cost per descriptor.
//
//   - device=worker: the mock's worker goroutine does the device side on the
//     other core (it copies at memory speed and spins on the doorbell), as a
//     real device would work beside the host; the number includes the
//     cross-core hand-off and moves with the machine's load.
//   - device=inline: the mock does the device side inside the doorbell write
//     (mock.Config.Inline), so ns/desc is the CPU cost of the whole software
//     path — driver plus device model — on one thread, steady under load.
//
// Side by side in the same run, doorbell=each publishes the same batch with
// one doorbell per descriptor (the unbatched baseline).
func BenchmarkSubmitReap(b *testing.B) {
	for _, batch := range []int{1, 8, 64} {
		for _, device := range []string{"inline", "worker"} {
			for _, mode := range []string{"batched", "each"} {
				if batch == 1 && mode == "each" {
					continue // identical to batched at batch 1
				}
				b.Run(fmt.Sprintf("batch=%d/device=%s/doorbell=%s", batch, device, mode), func(b *testing.B) {
					benchSubmitReap(b, batch, device == "inline", mode == "each")
				})
			}
		}
	}
}

func benchSubmitReap(b *testing.B, batch int, inline, each bool) {
	r := newRig(b, mock.Config{Spin: benchSpin, Inline: inline}, hdma.Config{}, 1, 256)
	q := r.qs[0]
	descs := make([]hdma.Desc, batch)
	for i := range descs {
		descs[i] = hdma.Desc{Op: hdma.OpH2D, Len: 64, Src: iova(dataOff + i*64), Dst: uint64(i * 64), User: uint64(i)}
	}
	out := make([]hdma.Completion, batch)
	before := r.dev.Counters()
	cpu0 := processCPU(b)
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
	cpu := processCPU(b) - cpu0
	after := r.dev.Counters()
	descsDone := float64(after.Descriptors - before.Descriptors)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/descsDone, "ns/desc")
	// CPU time of the whole process per descriptor: with device=inline
	// this is the software path's cost whatever else the machine runs
	// (wall-clock ns/desc stretches when other processes take the CPUs);
	// with device=worker it includes the worker's spinning.
	b.ReportMetric(float64(cpu.Nanoseconds())/descsDone, "cpu-ns/desc")
	b.ReportMetric(float64(after.SQDoorbells-before.SQDoorbells)/descsDone, "doorbells/desc")
	b.ReportMetric(float64(after.WorkerSleeps-before.WorkerSleeps)/float64(b.N), "worker-sleeps/op")
}

// benchSpin is how long the mock's worker polls for the next doorbell
// before it sleeps: long enough to cover the host's reaping and the next
// submission (20µs is not, on a loaded machine, and every batch
// then pays a goroutine wake-up), short enough that a worker whose host
// thread was descheduled gives its CPU back (5 ms measured 2-3× slower than
// 200µs at load average 10 on 2 cores).
const benchSpin = 200 * time.Microsecond

// processCPU is the process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
