package nvme_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend/nvme"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/uring"
	"github.com/hcomm-go/hcomm/internal/vfiotest"
	"github.com/hcomm-go/hcomm/trace"
	"github.com/hcomm-go/hcomm/vfio"
	drv "github.com/hcomm-go/hcomm/vfio/nvme"
	"github.com/hcomm-go/hcomm/vfio/nvme/spec"
)

// TestVMBench is `make bench-vm`: 4 KiB random reads and writes at queue
// depth 32 on QEMU's NVMe controller, through the engine on this backend,
// through the userspace driver directly (polled and MSI-X), and then
// through the guest kernel's nvme driver (io_uring with
// O_DIRECT and registered buffers; pread/pwrite with O_DIRECT from 32
// threads). It prints IOPS, CPU time (user+sys of this process, getrusage)
// per I/O, and system calls per I/O twice: counted by eBPF (package trace
// attached to this process: every call, the Go runtime's included, but not
// the bpf(2) calls of the tracer's own snapshots) and as the code counts the calls it makes
// itself (the ring's io_uring_enter counter, one per pread/pwrite, the
// eventfd polls and reads of the MSI-X mode, the engine's Stats.Syscalls).
// Under TCG absolute numbers mean little; the ratios between rows of one
// run are the result. Skipped unless HCOMM_BENCH_VM=1.
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
		ebpf     int64 // -1: not counted
		top      string
	}
	var rows []row
	// eBPF: package trace attached to this very process counts every
	// system call it makes (its own snapshot reads included: a few per
	// row, against thousands of I/Os).
	sess, err := trace.Attach(os.Getpid(), trace.Options{})
	if err != nil {
		t.Logf("eBPF syscall counting unavailable (%v): that column stays empty", err)
	} else {
		defer sess.Close()
	}
	// mark returns the eBPF count so far (-1 without tracing); since
	// returns the count after it and the three most frequent calls.
	var last *trace.Snapshot
	snapshot := func() *trace.Snapshot {
		snap, err := sess.Snapshot()
		if err != nil {
			t.Fatalf("trace snapshot: %v", err)
		}
		return snap
	}
	mark := func() int64 {
		if sess == nil {
			return -1
		}
		last = snapshot()
		return 0
	}
	var top string
	since := func(before int64) int64 {
		top = ""
		if before < 0 {
			return -1
		}
		d := snapshot().Sub(last)
		var n uint64
		type kv struct {
			name string
			n    uint64
		}
		var all []kv
		for name, c := range d.SyscallCounts() {
			if name == "bpf" {
				continue // the tracer's own map reads (Snapshot)
			}
			n += c
			all = append(all, kv{name, c})
		}
		sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
		for i := range min(3, len(all)) {
			top += fmt.Sprintf("%s %d ", all[i].name, all[i].n)
		}
		return int64(n)
	}
	addr := vfiotest.FindDevice(t, 0x1b36, 0x0010)

	// 1. The engine on this backend: a callback hands each finished
	// transfer's slot back, the loop submits the next one.
	for _, op := range []uint8{spec.OpRead, spec.OpWrite} {
		dev, err := vfio.OpenPCI(addr)
		if err != nil {
			t.Fatal(err)
		}
		b, err := nvme.New(dev, nvme.Config{CloseDevice: true})
		if err != nil {
			t.Fatal(err)
		}
		eng, err := engine.Open(engine.Config{Backend: b, PoolSize: 4 << 20, QueueDepth: qd, Alignment: bs})
		if err != nil {
			t.Fatal(err)
		}
		blocks := make([]engine.Block, qd)
		for i := range blocks {
			if blocks[i], err = eng.Alloc(bs); err != nil {
				t.Fatal(err)
			}
		}
		free := make(chan uint64, qd)
		var failed atomic.Pointer[error]
		cb := func(r engine.Result) {
			if r.Err != nil {
				failed.CompareAndSwap(nil, &r.Err)
			}
			free <- r.User
		}
		for i := range qd {
			free <- uint64(i)
		}
		rng := rand.New(rand.NewPCG(4, uint64(op)))
		st0 := eng.Stats()
		bpf0 := mark()
		cpu0 := cpuTime()
		t0 := time.Now()
		ios := 0
		for deadline := t0.Add(dur); time.Now().Before(deadline); {
			slot := <-free
			dev := engine.DeviceAt(rng.Uint64N(region/bs) * bs)
			tr := engine.Transfer{Src: engine.Host(blocks[slot]), Dst: dev, Len: bs, User: slot, Callback: cb}
			if op == spec.OpRead {
				tr.Src, tr.Dst = dev, engine.Host(blocks[slot])
			}
			// The callback runs before the engine releases the transfer's
			// queue slot: SubmitContext waits for it.
			if _, err := eng.SubmitContext(t.Context(), tr); err != nil {
				t.Fatal(err)
			}
			ios++
		}
		for range qd {
			<-free
		}
		wall := time.Since(t0)
		cpu := cpuTime() - cpu0
		bpf := since(bpf0)
		if p := failed.Load(); p != nil {
			t.Fatalf("engine %s: %v", opName(op), *p)
		}
		rows = append(rows, row{"engine on backend/nvme (MSI-X eventfd)", opName(op), ios, wall, cpu, eng.Stats().Syscalls - st0.Syscalls, bpf, top})
		if err := eng.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// 2. The userspace driver directly.
	for _, irq := range []bool{false, true} {
		e := &benchEnv{addr: addr}
		e.open(t, drv.Config{Interrupts: irq, QueueDepth: qd + 1})
		q := e.c.Queue(0)
		for _, op := range []uint8{spec.OpRead, spec.OpWrite} {
			rng := rand.New(rand.NewPCG(1, uint64(op)))
			out := make([]drv.Completion, qd)
			var ios int
			var syscalls uint64
			bpf0 := mark()
			cpu0 := cpuTime()
			t0 := time.Now()
			deadline := t0.Add(dur)
			for time.Now().Before(deadline) || q.Outstanding() > 0 {
				for q.Free() > 0 && time.Now().Before(deadline) {
					slot := uint64(q.Free() % qd)
					tr := drv.Transfer{Opcode: op, Offset: rng.Uint64N(region/bs) * bs, IOVA: e.iova + slot*bs, Len: bs}
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
			cpu := cpuTime() - cpu0
			bpf := since(bpf0)
			rows = append(rows, row{name, opName(op), ios, wall, cpu, syscalls, bpf, top})
		}
		e.close(t)
	}

	// 3. The kernel's nvme driver.
	var sys vfio.Sysfs
	if _, err := sys.Bind(addr, "nvme"); err != nil {
		t.Fatalf("hand %s to the kernel's nvme driver: %v", addr, err)
	}
	defer func() {
		if _, err := sys.Bind(addr, "vfio-pci"); err != nil {
			t.Errorf("give %s back to vfio-pci: %v", addr, err)
		}
	}()
	f := openKernelBlock(t, addr)
	defer f.Close()
	fd := int(f.Fd())
	bufs, err := unix.Mmap(-1, 0, qd*bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(bufs)
	for i := range bufs {
		bufs[i] = byte(i * 7)
	}

	u, err := uring.New(uring.Config{Entries: 2 * qd})
	if err != nil {
		t.Fatalf("io_uring: %v", err)
	}
	defer u.Close()
	if err := u.RegisterBuffers([][]byte{bufs}); err != nil {
		t.Fatalf("register buffers: %v", err)
	}
	for _, op := range []uint8{spec.OpRead, spec.OpWrite} {
		rng := rand.New(rand.NewPCG(2, uint64(op)))
		cqes := make([]uring.CQE, qd)
		st0 := u.Stats()
		bpf0 := mark()
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
			if op == spec.OpRead {
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
		cpu := cpuTime() - cpu0
		bpf := since(bpf0)
		rows = append(rows, row{"kernel nvme, io_uring O_DIRECT fixed buffers", opName(op), ios, wall, cpu, u.Stats().Enters - st0.Enters, bpf, top})
	}
	for _, op := range []uint8{spec.OpRead, spec.OpWrite} {
		var ios atomic.Int64
		bpf0 := mark()
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
					if op == spec.OpRead {
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
		cpu := cpuTime() - cpu0
		n := int(ios.Load())
		bpf := since(bpf0)
		rows = append(rows, row{"kernel nvme, pread/pwrite O_DIRECT, 32 threads", opName(op), n, wall, cpu, uint64(n), bpf, top})
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n4 KiB random I/O, queue depth %d, over the first %d MiB of QEMU's NVMe namespace, %v per row (TCG guest, 2 vCPUs)\n\n", qd, region>>20, dur)
	fmt.Fprintf(&b, "| path | op | IOPS | CPU µs/I/O | syscalls/I/O (eBPF) | syscalls/I/O (counted by the code) | IOPS per CPU-second | most frequent calls (eBPF) |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		iops := float64(r.ios) / r.wall.Seconds()
		cpuPer := float64(r.cpu.Microseconds()) / float64(max(r.ios, 1))
		perCPU := float64(r.ios) / max(r.cpu.Seconds(), 1e-9)
		ebpf := "–"
		if r.ebpf >= 0 {
			ebpf = fmt.Sprintf("%.2f", float64(r.ebpf)/float64(max(r.ios, 1)))
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %s | %.2f | %.0f | %s|\n", r.path, r.op, iops, cpuPer, ebpf, float64(r.syscalls)/float64(max(r.ios, 1)), perCPU, r.top)
	}
	t.Log(b.String())
}

func opName(op uint8) string {
	if op == spec.OpRead {
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

// benchEnv is one opened controller with a data arena mapped for DMA.
type benchEnv struct {
	addr  string
	dev   *vfio.KernelDevice
	space *vfio.DMASpace
	data  *hugepage.Arena
	iova  uint64
	c     *drv.Controller
}

func (e *benchEnv) open(t *testing.T, cfg drv.Config) {
	t.Helper()
	var err error
	if e.dev, err = vfio.OpenPCI(e.addr); err != nil {
		t.Fatal(err)
	}
	if e.space, err = vfio.NewDMASpace(e.dev, vfio.DMAConfig{}); err != nil {
		t.Fatal(err)
	}
	if e.data, err = hugepage.NewArena(hugepage.ArenaConfig{Size: 2 << 20, Populate: true}); err != nil {
		t.Fatal(err)
	}
	if e.iova, err = e.space.MapArena(e.data, vfio.DMAReadWrite); err != nil {
		t.Fatal(err)
	}
	cfg.DMA = e.space
	if e.c, err = drv.Open(e.dev, cfg); err != nil {
		t.Fatal(err)
	}
}

func (e *benchEnv) close(t *testing.T) {
	t.Helper()
	if err := errors.Join(e.c.Close(), e.space.Close(), e.dev.Close(), e.data.Close()); err != nil {
		t.Error(err)
	}
}

// waitBlock waits for the kernel's namespace block device of the
// controller at addr and opens it with O_DIRECT (retrying while the kernel
// is still adding the disk).
func openKernelBlock(t *testing.T, addr string) *os.File {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctrls, _ := os.ReadDir("/sys/bus/pci/devices/" + addr + "/nvme")
		for _, c := range ctrls {
			nss, _ := os.ReadDir("/sys/bus/pci/devices/" + addr + "/nvme/" + c.Name())
			for _, ns := range nss {
				if !strings.HasPrefix(ns.Name(), c.Name()+"n") {
					continue
				}
				f, err := os.OpenFile("/dev/"+ns.Name(), os.O_RDWR|unix.O_DIRECT, 0)
				if err == nil {
					return f
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no namespace block device of %s opened within 60 s", addr)
	return nil
}
