package uringfile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// BenchmarkFileIO streams 4 KiB transfers through an engine on the file
// backend, batch per SubmitBatch with the queue kept full, and reports per
// transfer (one op): wall time, the process's CPU time (user + system from
// getrusage, io-wq workers included), the user share alone (estimated by
// the kernel from tick samples: noisy in short runs), the backend's system
// calls and allocations (0). Families:
//
//	read/cached   buffered reads of a file in the page cache (completed
//	              inline in io_uring_enter: the backend's own cost is the
//	              largest share here)
//	read/direct   O_DIRECT reads (the device's latency, overlapped)
//	write/buffered buffered writes (punted to io-wq workers)
//
// Its numbers are the cost of the backend's hot path, compared between
// builds (docs/io_uring.md, "Submissions survive the submitter").
func BenchmarkFileIO(b *testing.B) {
	const size, fileSize = 4096, 64 << 20
	for _, c := range []struct {
		name  string
		write bool
		flags int
	}{
		{"read/cached", false, 0},
		{"read/direct", false, syscall.O_DIRECT},
		{"write/buffered", true, 0},
	} {
		for _, batch := range []int{8, 64} {
			b.Run(fmt.Sprintf("%s/batch=%d", c.name, batch), func(b *testing.B) {
				f, err := os.OpenFile(filepath.Join(b.TempDir(), "bench"), os.O_RDWR|os.O_CREATE|c.flags, 0o600)
				if err != nil {
					b.Skipf("open: %v", err)
				}
				defer f.Close()
				if err := f.Truncate(fileSize); err != nil {
					b.Fatal(err)
				}
				if !c.write {
					// Fill the file (a sparse file reads as zeroes without I/O).
					chunk := make([]byte, 1<<20)
					for off := int64(0); off < fileSize; off += int64(len(chunk)) {
						if _, err := f.WriteAt(chunk, off); err != nil {
							b.Skipf("fill: %v", err)
						}
					}
				}
				be, err := uringfile.New(f, uringfile.Config{})
				if err != nil {
					b.Fatal(err)
				}
				e, err := engine.Open(engine.Config{Backend: be, QueueDepth: 256, Alignment: 4096, PoolSize: 4 << 20,
					Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K}})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Shutdown(context.Background())
				buf, err := e.Alloc(size * batch)
				if err != nil {
					b.Fatal(err)
				}
				cb := func(r engine.Result) {
					if r.Err != nil {
						b.Error(r.Err)
					}
				}
				ts := make([]engine.Transfer, batch)
				ctx := context.Background()
				before := e.Stats()
				var ru0, ru1 unix.Rusage
				_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
				b.ReportAllocs()
				b.ResetTimer()
				for done := 0; done < b.N; {
					k := min(batch, b.N-done)
					for i := range k {
						host := engine.HostAt(buf, i*size)
						file := engine.FileAt(int64((done+i)*size) % fileSize)
						if c.write {
							ts[i] = engine.Transfer{Src: host, Dst: file, Len: size, Callback: cb}
						} else {
							ts[i] = engine.Transfer{Src: file, Dst: host, Len: size, Callback: cb}
						}
					}
					n, err := e.SubmitBatchContext(ctx, ts[:k], nil)
					if err != nil {
						b.Fatal(err)
					}
					done += n
				}
				if err := e.Drain(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
				st := e.Stats()
				cpu := (ru1.Utime.Nano() - ru0.Utime.Nano()) + (ru1.Stime.Nano() - ru0.Stime.Nano())
				b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/transfer")
				b.ReportMetric(float64(ru1.Utime.Nano()-ru0.Utime.Nano())/float64(b.N), "user-ns/transfer")
				b.ReportMetric(float64(st.Syscalls-before.Syscalls)/float64(b.N), "syscalls/transfer")
				if st.Completed-before.Completed != uint64(b.N) {
					b.Fatalf("%d completions for %d transfers", st.Completed-before.Completed, b.N)
				}
			})
		}
	}
}
