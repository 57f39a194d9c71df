package uring

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkNop submits NOPs in batches of 1, 8 and 64 through one
// io_uring_enter per batch and reaps them, reporting per NOP: ns, enters
// (the layer's own count of io_uring_enter calls) and Mops/s. The C
// liburing program in testdata/uring_nop.c does the same calls; `make
// bench` runs both and prints the ratio.
func BenchmarkNop(b *testing.B) {
	for _, batch := range []int{1, 8, 64} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			u, err := New(Config{Entries: 128})
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
func nopBatch(u *Ring, cqes []CQE) error {
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

// BenchmarkNopSQPoll is BenchmarkNop with a kernel SQ polling
// thread: submission costs no system call while the thread is awake, and
// the submitter spins on the CQ (a waiting enter only after 10^5 empty
// polls). enters/op shows how close to zero system calls it gets; on 2
// vCPUs the SQ thread competes with the submitter, so the numbers swing.
func BenchmarkNopSQPoll(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs 2 CPUs: one for the SQ thread, one for the submitter")
	}
	for _, batch := range []int{8, 64} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			u, err := New(Config{Entries: 128, SQPoll: true, SQThreadIdle: 200 * time.Millisecond,
				PinSQThread: true, SQThreadCPU: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer u.Close()
			// Keep the submitter (the owner thread, locked by New) off
			// the SQ thread's CPU; restored before Close unlocks the thread.
			var old, cpu0 unix.CPUSet
			if err := unix.SchedGetaffinity(0, &old); err != nil {
				b.Fatal(err)
			}
			cpu0.Set(0)
			if err := unix.SchedSetaffinity(0, &cpu0); err != nil {
				b.Fatal(err)
			}
			defer unix.SchedSetaffinity(0, &old)
			cqes := make([]CQE, batch)
			before := u.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				k := min(batch, b.N-done)
				for i := 0; i < k; i++ {
					e := u.GetSQE()
					e.PrepNop()
					e.SetUserData(uint64(i))
				}
				if _, err := u.Submit(); err != nil {
					b.Fatal(err)
				}
				for got, idle := 0, 0; got < k; {
					n, err := u.PeekCQEs(cqes[got:k])
					if err != nil {
						b.Fatal(err)
					}
					got += n
					if n == 0 {
						if idle++; idle > 100000 {
							if _, err := u.SubmitAndWait(k - got); err != nil {
								b.Fatal(err)
							}
							idle = 0
						}
					}
				}
				done += k
			}
			b.StopTimer()
			st := u.Stats()
			b.ReportMetric(float64(st.Enters-before.Enters)/float64(b.N), "enters/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops/s")
		})
	}
}
