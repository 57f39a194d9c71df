package uring

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/hugepage"
)

// BenchmarkRandRead4K reads random 4 KiB blocks of a 64 MiB file with
// O_DIRECT: the traditional path (one pread(2) per block, psync) side by
// side with io_uring READ_FIXED from registered hugepage memory at queue
// depth 1 and 64. Reports kIOPS and enters per read.
func BenchmarkRandRead4K(b *testing.B) {
	const fileSize, blk = 64 << 20, 4096
	dir, why := directIODir(b)
	if dir == "" {
		b.Skip(why)
	}
	path := filepath.Join(dir, "randread")
	data := make([]byte, fileSize)
	for i := range data {
		data[i] = byte(i * 2654435761 >> 13)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Fdatasync(fd); err != nil {
		b.Fatal(err)
	}
	arena, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 2 << 20, Populate: true})
	if err != nil {
		b.Fatal(err)
	}
	defer arena.Close()
	mem := arena.Bytes()
	offsets := make([]uint64, 1<<16)
	x := uint64(88172645463325252)
	for i := range offsets {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		offsets[i] = (x % (fileSize / blk)) * blk
	}

	b.Run("psync", func(b *testing.B) {
		buf := mem[:blk]
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if n, err := unix.Pread(fd, buf, int64(offsets[i&(len(offsets)-1)])); n != blk || err != nil {
				b.Fatalf("pread: %d, %v", n, err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e3, "kIOPS")
	})
	for _, qd := range []int{1, 64} {
		b.Run("uring-fixed/qd="+strconv.Itoa(qd), func(b *testing.B) {
			u, err := New(Config{Entries: 128})
			if err != nil {
				b.Fatal(err)
			}
			defer u.Close()
			if err := u.RegisterBuffers([][]byte{mem}); err != nil {
				b.Fatal(err)
			}
			cqes := make([]CQE, qd)
			queue := func(i int) {
				slot := i % qd
				e := u.GetSQE()
				e.PrepReadFixed(fd, mem[slot*blk:(slot+1)*blk], offsets[i&(len(offsets)-1)], 0)
				e.SetUserData(uint64(slot))
			}
			before := u.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			issued, done := 0, 0
			for ; issued < min(qd, b.N); issued++ {
				queue(issued)
			}
			for done < b.N {
				if _, err := u.SubmitAndWait(1); err != nil {
					b.Fatal(err)
				}
				n, err := u.PeekCQEs(cqes)
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range cqes[:n] {
					if c.Res() != blk {
						b.Fatalf("READ_FIXED: res %d (%v)", c.Res(), c.Err())
					}
					// Reuse the completed slot's buffer for the next read.
					if issued < b.N {
						slot := int(c.UserData())
						e := u.GetSQE()
						e.PrepReadFixed(fd, mem[slot*blk:(slot+1)*blk], offsets[issued&(len(offsets)-1)], 0)
						e.SetUserData(uint64(slot))
						issued++
					}
				}
				done += n
			}
			b.StopTimer()
			st := u.Stats()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e3, "kIOPS")
			b.ReportMetric(float64(st.Enters-before.Enters)/float64(b.N), "enters/op")
		})
	}
}
