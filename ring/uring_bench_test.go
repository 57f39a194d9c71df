package ring

import (
	"strconv"
	"testing"
)

// BenchmarkUringNop submits NOPs in batches of 1, 8 and 64 through one
// io_uring_enter per batch and reaps them, reporting per NOP: ns, enters
// (the layer's own count of io_uring_enter calls) and Mops/s. The C
// liburing program in testdata/uring_nop.c does the same calls; `make
// bench` runs both and prints the ratio.
func BenchmarkUringNop(b *testing.B) {
	for _, batch := range []int{1, 8, 64} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			u, err := NewUring(UringConfig{Entries: 128})
			if err != nil {
				b.Fatal(err)
			}
			defer u.Close()
			cqes := make([]CQE, batch)
			before := u.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				k := min(batch, b.N-done)
				if err := nopBatch(u, cqes[:k]); err != nil {
					b.Fatal(err)
				}
				done += k
			}
			b.StopTimer()
			st := u.Stats()
			if st.Completions-before.Completions != uint64(b.N) {
				b.Fatalf("%d completions for %d NOPs", st.Completions-before.Completions, b.N)
			}
			b.ReportMetric(float64(st.Enters-before.Enters)/float64(b.N), "enters/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops/s")
		})
	}
}

// nopBatch queues len(cqes) NOPs, submits them with one enter and reaps
// them (a waiting enter only if some have not completed, which NOPs do
// inline).
func nopBatch(u *Uring, cqes []CQE) error {
	for i := range cqes {
		e := u.GetSQE()
		e.PrepNop()
		e.SetUserData(uint64(i))
	}
	if _, err := u.Submit(); err != nil {
		return err
	}
	for got := 0; got < len(cqes); {
		n, err := u.PeekCQEs(cqes[got:])
		if err != nil {
			return err
		}
		got += n
		if got < len(cqes) {
			if _, err := u.SubmitAndWait(len(cqes) - got); err != nil {
				return err
			}
		}
	}
	return nil
}
