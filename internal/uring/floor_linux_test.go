package uring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/hugepage"
)

func rusageSelf() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loopCPU(t testing.TB, dev string, size uint64, cfg Config, secs time.Duration, batchWait int) (iops float64, cpuPerIO time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	u, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	arena, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 2 << 20, Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Close()
	mem := arena.Bytes()
	if err := u.RegisterBuffers([][]byte{mem}); err != nil {
		t.Fatal(err)
	}
	if err := u.RegisterFiles([]int32{int32(fd)}); err != nil {
		t.Fatal(err)
	}
	const qd = 32
	x := uint64(88172645463325252)
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return (x % (size / 4096)) * 4096
	}
	cqes := make([]CQE, 64)
	issue := func(slot int) {
		sqe := u.GetSQE()
		sqe.PrepReadFixed(0, mem[slot*4096:(slot+1)*4096], next(), 0)
		sqe.SetFlags(SQEFixedFile)
		sqe.SetUserData(uint64(slot))
	}
	for i := 0; i < qd; i++ {
		issue(i)
	}
	start, c0 := time.Now(), rusageSelf()
	done := 0
	for time.Since(start) < secs {
		if _, err := u.SubmitAndWait(batchWait); err != nil {
			t.Fatal(err)
		}
		n, err := u.PeekCQEs(cqes)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cqes[:n] {
			if c.Res() != 4096 {
				t.Fatalf("res %d", c.Res())
			}
			issue(int(c.UserData()))
		}
		done += n
	}
	el, cpu := time.Since(start), rusageSelf()-c0
	return float64(done) / el.Seconds(), cpu / time.Duration(done)
}

func fioCPU(t testing.TB, dev string, secs int) (iops float64, cpuPerIO time.Duration) {
	out, err := exec.Command("fio", "--name=r", "--filename="+dev, "--ioengine=io_uring", "--direct=1", "--rw=randread", "--bs=4k",
		"--iodepth=32", fmt.Sprintf("--runtime=%d", secs), "--time_based", "--output-format=json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Jobs []struct {
			Read struct {
				IOs  float64 `json:"total_ios"`
				IOPS float64 `json:"iops"`
			} `json:"read"`
			Usr     float64 `json:"usr_cpu"`
			Sys     float64 `json:"sys_cpu"`
			Runtime float64 `json:"job_runtime"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	j := r.Jobs[0]
	cpu := (j.Usr + j.Sys) / 100 * j.Runtime / 1000 // seconds
	return j.Read.IOPS, time.Duration(cpu / j.Read.IOs * 1e9)
}

// BenchmarkFloorRandRead4K is the floor of CPU per I/O on a block device:
// the least a program can spend on 4 KiB random O_DIRECT reads at queue
// depth 32 through io_uring — one goroutine on its own OS thread, fixed
// buffer and file, no bookkeeping but re-arming each completion — beside
// fio (io_uring, the same device, block size and depth). The kernel's side
// (block layer, driver, completion task work) is most of it, so it bounds
// what any io_uring program can gain on fio there. Rows: bound (the ring
// tied to the thread: SINGLE_ISSUER|DEFER_TASKRUN|COOP_TASKRUN) and
// unbound (no modern flags, as the engine's file backend, which any
// goroutine may enter), each waiting for 1 and for 8 completions per
// io_uring_enter; CPU is the process's (getrusage), fio's its own report.
//
//	HCOMM_FLOOR_DEV=/dev/loop0 go test -run '^$' -bench FloorRandRead4K -benchtime 3x ./internal/uring
//
// (a loop device with direct I/O over a tmpfs file is a device whose
// speed is the CPU's: docs/engine.md).
func BenchmarkFloorRandRead4K(b *testing.B) {
	dev := os.Getenv("HCOMM_FLOOR_DEV")
	if dev == "" {
		b.Skip("HCOMM_FLOOR_DEV names no block device to read (a loop device with direct I/O over tmpfs)")
	}
	if _, err := exec.LookPath("fio"); err != nil {
		b.Skip("no fio")
	}
	fd, err := unix.Open(dev, unix.O_RDONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	size, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	unix.Close(fd)
	if err != nil {
		b.Fatal(err)
	}
	const run = 3 * time.Second
	rows := []struct {
		name string
		cfg  Config
		wait int
	}{
		{"bound/wait=1", Config{Entries: 64}, 1},
		{"bound/wait=8", Config{Entries: 64}, 8},
		{"unbound/wait=1", Config{Entries: 64, Unbound: true, NoModernFlags: true}, 1},
		{"unbound/wait=8", Config{Entries: 64, Unbound: true, NoModernFlags: true}, 8},
	}
	b.Run("fio", func(b *testing.B) {
		var iops, cpu float64
		for range b.N {
			i, c := fioCPU(b, dev, int(run/time.Second))
			iops, cpu = iops+i, cpu+float64(c)
		}
		b.ReportMetric(iops/float64(b.N), "IOPS")
		b.ReportMetric(cpu/float64(b.N), "cpu-ns/io")
	})
	for _, r := range rows {
		b.Run(r.name, func(b *testing.B) {
			var iops, cpu float64
			for range b.N {
				i, c := loopCPU(b, dev, size, r.cfg, run, r.wait)
				iops, cpu = iops+i, cpu+float64(c)
			}
			b.ReportMetric(iops/float64(b.N), "IOPS")
			b.ReportMetric(cpu/float64(b.N), "cpu-ns/io")
		})
	}
}
