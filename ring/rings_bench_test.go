package ring

import (
	"strconv"
	"testing"
)

// BenchmarkRings measures one producer and the consumer on the same
// goroutine (the cost of the ring's own bookkeeping, no contention), per
// entry, at several batch sizes.
func BenchmarkRings(b *testing.B) {
	for _, batch := range []int{1, 8, 64} {
		for _, kind := range []string{"SPSC", "MPSC"} {
			b.Run(kind+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				var r producerRing
				mem := make([]byte, 256*64)
				if kind == "SPSC" {
					r, _ = NewSPSC(mem, 64)
				} else {
					r, _ = NewMPSC(mem, 64)
				}
				b.ReportAllocs()
				b.ResetTimer() // the ring's memory is setup, not a per-entry cost
				for i := 0; i < b.N; i += batch {
					res, err := r.Reserve(batch)
					if err != nil {
						b.Fatal(err)
					}
					for j := 0; j < batch; j++ {
						res.Entry(j)[0] = byte(j)
					}
					if err := r.Commit(res); err != nil {
						b.Fatal(err)
					}
					got := r.Peek(batch)
					if err := r.Release(got.Len()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkStressMPSC runs the 4-producer stress (ordering checks included)
// with b.N items, reporting items per second.
func BenchmarkStressMPSC(b *testing.B) {
	r, _ := NewMPSC(make([]byte, 64*16), 16)
	b.ReportAllocs()
	b.ResetTimer()
	stress(b, r, 4, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mitems/s")
}
