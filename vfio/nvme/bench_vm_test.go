package nvme_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/uring"
	"github.com/hcomm-go/hcomm/internal/vfiotest"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/nvme"
)

// TestVMBench is `make bench-vm`: 4 KiB random reads and writes at queue
// depth 32 on QEMU's NVMe controller, through the userspace driver (polled
// and MSI-X) and then through the guest kernel's nvme driver (io_uring with
// O_DIRECT and registered buffers; pread/pwrite with O_DIRECT from 32
// threads). It prints IOPS, CPU time (user+sys of this process, getrusage)
// per I/O and system calls per I/O as the benchmark counts them (the calls
// it makes: io_uring_enter from the ring's own counter, one pread/pwrite per
// I/O, the eventfd polls and reads of the MSI-X mode; the polled driver
// makes none). Under TCG absolute numbers mean little; the ratios between
// rows of one run are the result. Skipped unless HCOMM_BENCH_VM=1.
func TestVMBench(t *testing.T) {
	if os.Getenv("HCOMM_BENCH_VM") != "1" {
		t.Skip("benchmark: set HCOMM_BENCH_VM=1 (make bench-vm)")
	}
	const (
		qd     = 32
		bs     = 4096
		region = 256 << 20
	)
	dur := 3 * time.Second
	if s := os.Getenv("HCOMM_BENCH_VM_SECONDS"); s != "" {
		if d, err := time.ParseDuration(s + "s"); err == nil {
			dur = d
		}
	}
	type row struct {
		path, op string
		ios      int
		wall     time.Duration
		cpu      time.Duration
		syscalls uint64
	}
	var rows []row
	addr := vfiotest.FindDevice(t, qemuVendor, qemuNVMe)

	// 1. The userspace driver.
	for _, irq := range []bool{false, true} {
		e := &env{addr: addr}
		e.open(t, nvme.Config{Interrupts: irq, QueueDepth: qd + 1})
		q := e.c.Queue(0)
		for _, op := range []uint8{nvme.OpRead, nvme.OpWrite} {
			rng := rand.New(rand.NewPCG(1, uint64(op)))
			out := make([]nvme.Completion, qd)
			var ios int
			var syscalls uint64
			cpu0 := cpuTime()
			t0 := time.Now()
			deadline := t0.Add(dur)
			for time.Now().Before(deadline) || q.Outstanding() > 0 {
				for q.Free() > 0 && time.Now().Before(deadline) {
					slot := uint64(q.Free() % qd)
					tr := nvme.Transfer{Opcode: op, Offset: rng.Uint64N(region/bs) * bs, IOVA: e.iova + slot*bs, Len: bs}
					if _, err := q.SubmitTransfer(tr, 0); err != nil {
						t.Fatal(err)
					}
				}
				if err := q.Ring(); err != nil {
					t.Fatal(err)
				}
				n, err := q.Reap(out)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 && irq {
					// Sleep on the MSI-X eventfd: a poll and a read.
					if _, err := q.EventFD().Wait(t.Context()); err != nil {
						t.Fatal(err)
					}
					syscalls += 2
					continue
				}
				for _, c := range out[:n] {
					if err := c.Err(); err != nil {
						t.Fatal(err)
					}
				}
				ios += n
			}
			wall := time.Since(t0)
			name := "userspace driver, polled"
			if irq {
				name = "userspace driver, MSI-X eventfd"
			}
			rows = append(rows, row{name, opName(op), ios, wall, cpuTime() - cpu0, syscalls})
		}
		e.close(t)
	}

	// 2. The kernel's nvme driver.
	var sys vfio.Sysfs
	if _, err := sys.Bind(addr, "nvme"); err != nil {
		t.Fatalf("hand %s to the kernel's nvme driver: %v", addr, err)
	}
	defer func() {
		if _, err := sys.Bind(addr, "vfio-pci"); err != nil {
			t.Errorf("give %s back to vfio-pci: %v", addr, err)
		}
	}()
	f := openBlock(t, waitBlock(t, addr))
	defer f.Close()
	fd := int(f.Fd())
	bufs, err := unix.Mmap(-1, 0, qd*bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(bufs)
	fill(bufs, 3)

	u, err := uring.New(uring.Config{Entries: 2 * qd})
	if err != nil {
		t.Fatalf("io_uring: %v", err)
	}
	defer u.Close()
	if err := u.RegisterBuffers([][]byte{bufs}); err != nil {
		t.Fatalf("register buffers: %v", err)
	}
	for _, op := range []uint8{nvme.OpRead, nvme.OpWrite} {
		rng := rand.New(rand.NewPCG(2, uint64(op)))
		cqes := make([]uring.CQE, qd)
		st0 := u.Stats()
		cpu0 := cpuTime()
		t0 := time.Now()
		deadline := t0.Add(dur)
		ios, inflight := 0, 0
		prep := func(slot int) {
			sqe := u.GetSQE()
			if sqe == nil {
				t.Fatal("io_uring submission queue full")
			}
			buf := bufs[slot*bs : (slot+1)*bs]
			off := rng.Uint64N(region/bs) * bs
			if op == nvme.OpRead {
				sqe.PrepReadFixed(fd, buf, off, 0)
			} else {
				sqe.PrepWriteFixed(fd, buf, off, 0)
			}
			sqe.SetUserData(uint64(slot))
			inflight++
		}
		for i := range qd {
			prep(i)
		}
		for inflight > 0 {
			if _, err := u.SubmitAndWait(1); err != nil {
				t.Fatal(err)
			}
			n, err := u.PeekCQEs(cqes)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cqes[:n] {
				if c.Res() != bs {
					t.Fatalf("io_uring %s: res %d (%v)", opName(op), c.Res(), c.Err())
				}
				inflight--
				ios++
				if time.Now().Before(deadline) {
					prep(int(c.UserData()))
				}
			}
		}
		wall := time.Since(t0)
		rows = append(rows, row{"kernel nvme, io_uring O_DIRECT fixed buffers", opName(op), ios, wall, cpuTime() - cpu0, u.Stats().Enters - st0.Enters})
	}
	for _, op := range []uint8{nvme.OpRead, nvme.OpWrite} {
		var ios atomic.Int64
		cpu0 := cpuTime()
		t0 := time.Now()
		deadline := t0.Add(dur)
		var wg sync.WaitGroup
		errs := make(chan error, qd)
		for w := range qd {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(3, uint64(w)))
				buf := bufs[w*bs : (w+1)*bs]
				for time.Now().Before(deadline) {
					off := int64(rng.Uint64N(region/bs) * bs)
					var err error
					if op == nvme.OpRead {
						_, err = unix.Pread(fd, buf, off)
					} else {
						_, err = unix.Pwrite(fd, buf, off)
					}
					if err != nil {
						errs <- err
						return
					}
					ios.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("p%s: %v", opName(op), err)
		}
		wall := time.Since(t0)
		n := int(ios.Load())
		rows = append(rows, row{"kernel nvme, pread/pwrite O_DIRECT, 32 threads", opName(op), n, wall, cpuTime() - cpu0, uint64(n)})
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n4 KiB random I/O, queue depth %d, over the first %d MiB of QEMU's NVMe namespace, %v per row (TCG guest, 2 vCPUs)\n\n", qd, region>>20, dur)
	fmt.Fprintf(&b, "| path | op | IOPS | CPU µs/I/O | syscalls/I/O | IOPS per CPU-second |\n|---|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		iops := float64(r.ios) / r.wall.Seconds()
		cpuPer := float64(r.cpu.Microseconds()) / float64(max(r.ios, 1))
		perCPU := float64(r.ios) / max(r.cpu.Seconds(), 1e-9)
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.2f | %.0f |\n", r.path, r.op, iops, cpuPer, float64(r.syscalls)/float64(max(r.ios, 1)), perCPU)
	}
	t.Log(b.String())
}

func opName(op uint8) string {
	if op == nvme.OpRead {
		return "read"
	}
	return "write"
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
