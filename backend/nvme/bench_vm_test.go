package nvme_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
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
// depth 32 on QEMU's NVMe controller, through the engine on this backend
// (five ways, engineVariants: three with the default deferred doorbell,
// two with a doorbell at every Flush), through the userspace driver directly
// (polled and MSI-X), and then through the guest kernel's nvme driver
// (io_uring with O_DIRECT and registered buffers; pread/pwrite with
// O_DIRECT from 32 threads). It prints IOPS; CPU per I/O as the whole
// guest's (wall time × vCPUs less /proc/stat's idle, so that interrupt work
// outside the process counts; /proc/stat's tick-sampled busy time and its
// irq+softirq part beside it) and as this process's (getrusage); system
// calls per I/O twice: counted by eBPF (package trace attached to this
// process: every call, the Go runtime's included, but not the bpf(2) calls
// of the tracer's own snapshots) and as the code counts the calls it makes
// itself (the ring's io_uring_enter counter, one per pread/pwrite, the
// eventfd polls and reads of the MSI-X mode, the engine's Stats.Syscalls);
// and doorbell stores per I/O. HCOMM_BENCH_VM_STRACE=1 then runs the
// default engine loop and the MSI-X driver again under strace -f -k and
// prints where their system calls come from. Under TCG absolute numbers
// mean little; the ratios between rows of one run are the result. Skipped
// unless HCOMM_BENCH_VM=1.
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
		cpu      cpuUse
		syscalls uint64
		ebpf     int64 // -1: not counted
		top      string
		// doorbells: MMIO stores to the controller's doorbells (SQ
		// tail and CQ head), each a trap into QEMU under TCG (-1: none).
		doorbells int64
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

	// 1. The engine on this backend, three ways: the submitting loop fed
	// by callbacks over a channel (a hand-off between goroutines per
	// transfer), the same with the reaper's spin off, and callbacks that
	// submit the next transfer themselves (no hand-off: one goroutine, the
	// reaper, does everything, like the driver's loop below).
	engineRows := func(v engineVariant, strace bool) {
		for _, op := range benchOps(strace) {
			dev, err := vfio.OpenPCI(addr)
			if err != nil {
				t.Fatal(err)
			}
			cfg := nvme.Config{CloseDevice: true}
			if v.ringEvery {
				cfg.DeferDoorbell = -1
			}
			b, err := nvme.New(dev, cfg)
			if err != nil {
				t.Fatal(err)
			}
			depth := qd
			if v.resubmit {
				// The callback runs before its transfer's queue slot is
				// released: room for the next one beside it.
				depth = 4 * qd
			}
			eng, err := engine.Open(engine.Config{Backend: b, PoolSize: 4 << 20, QueueDepth: depth, Alignment: bs, Spin: v.spin})
			if err != nil {
				t.Fatal(err)
			}
			blocks := make([]engine.Block, qd)
			for i := range blocks {
				if blocks[i], err = eng.Alloc(bs); err != nil {
					t.Fatal(err)
				}
			}
			// One generator per slot: a slot's transfers follow each
			// other (the next is submitted after the last completed).
			rngs := make([]*rand.Rand, qd)
			for i := range rngs {
				rngs[i] = rand.New(rand.NewPCG(4, uint64(op)<<8|uint64(i)))
			}
			var failed atomic.Pointer[error]
			var cb func(engine.Result)
			transfer := func(slot uint64) engine.Transfer {
				dev := engine.DeviceAt(rngs[slot].Uint64N(region/bs) * bs)
				tr := engine.Transfer{Src: engine.Host(blocks[slot]), Dst: dev, Len: bs, User: slot, Callback: cb}
				if op == spec.OpRead {
					tr.Src, tr.Dst = dev, engine.Host(blocks[slot])
				}
				return tr
			}
			var ios, handedOff atomic.Int64
			var st0 engine.Stats
			var bpf0 int64
			var c0 cpuSample
			var t0 time.Time
			run := func() {
				st0, bpf0, c0, t0 = eng.Stats(), mark(), sampleCPU(t), time.Now()
				if v.resubmit {
					// The engine releases queue slots in submission order,
					// so one slow command can leave a callback facing a
					// full queue: that slot goes to this goroutine, which
					// waits for room (SubmitContext). Counted (handedOff).
					var stop atomic.Bool
					var chains sync.WaitGroup
					chains.Add(qd)
					retry := make(chan uint64, qd)
					cb = func(r engine.Result) {
						if r.Err != nil {
							failed.CompareAndSwap(nil, &r.Err)
						}
						ios.Add(1)
						if stop.Load() || r.Err != nil {
							chains.Done()
							return
						}
						_, err := eng.Submit(transfer(r.User))
						switch {
						case errors.Is(err, engine.ErrQueueFull):
							retry <- r.User
						case err != nil:
							failed.CompareAndSwap(nil, &err)
							chains.Done()
						}
					}
					for i := range qd {
						if _, err := eng.Submit(transfer(uint64(i))); err != nil {
							t.Fatal(err)
						}
					}
					allDone := make(chan struct{})
					timer := time.AfterFunc(dur, func() { stop.Store(true) })
					defer timer.Stop()
					go func() { chains.Wait(); close(allDone) }()
					for {
						select {
						case slot := <-retry:
							handedOff.Add(1)
							if stop.Load() {
								chains.Done()
								continue
							}
							if _, err := eng.SubmitContext(t.Context(), transfer(slot)); err != nil {
								t.Fatal(err)
							}
						case <-allDone:
							return
						}
					}
				}
				free := make(chan uint64, qd)
				cb = func(r engine.Result) {
					if r.Err != nil {
						failed.CompareAndSwap(nil, &r.Err)
					}
					free <- r.User
				}
				for i := range qd {
					free <- uint64(i)
				}
				for deadline := t0.Add(dur); time.Now().Before(deadline); {
					slot := <-free
					// The callback runs before the engine releases the
					// transfer's queue slot: SubmitContext waits for it.
					if _, err := eng.SubmitContext(t.Context(), transfer(slot)); err != nil {
						t.Fatal(err)
					}
					ios.Add(1)
				}
				for range qd {
					<-free
				}
			}
			var stacks *straceReport
			if strace {
				stacks = straceStacks(t, run)
			} else {
				run()
			}
			wall := time.Since(t0)
			c := sampleCPU(t).sub(c0)
			bpf := since(bpf0)
			if p := failed.Load(); p != nil {
				t.Fatalf("engine %s (%s): %v", opName(op), v.name, *p)
			}
			n := int(ios.Load())
			if v.resubmit {
				t.Logf("engine %s (%s): %d of %d transfers submitted from the test's goroutine (the queue was full in the callback)", opName(op), v.name, handedOff.Load(), n)
			}
			if strace {
				if stacks != nil {
					stacks.log(t, "engine on backend/nvme, "+v.name+", "+opName(op), n)
				}
			} else {
				st := eng.Stats()
				bells := int64(st.Doorbells-st0.Doorbells) + int64(st.ReapBatches-st0.ReapBatches)
				rows = append(rows, row{"engine on backend/nvme (MSI-X eventfd), " + v.name, opName(op), n, wall, c, st.Syscalls - st0.Syscalls, bpf, top, bells})
			}
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, v := range engineVariants {
		engineRows(v, false)
	}

	// 2. The userspace driver directly.
	driverRows := func(irq, strace bool) {
		e := &benchEnv{addr: addr}
		e.open(t, drv.Config{Interrupts: irq, QueueDepth: qd + 1})
		q := e.c.Queue(0)
		for _, op := range benchOps(strace) {
			rng := rand.New(rand.NewPCG(1, uint64(op)))
			out := make([]drv.Completion, qd)
			var ios int
			var syscalls uint64
			var bells int64 // SQ tail stores (Ring with commands) and CQ head stores (Reap with completions)
			var bpf0 int64
			var c0 cpuSample
			var t0 time.Time
			run := func() {
				bpf0, c0, t0 = mark(), sampleCPU(t), time.Now()
				deadline := t0.Add(dur)
				for time.Now().Before(deadline) || q.Outstanding() > 0 {
					submitted := false
					for q.Free() > 0 && time.Now().Before(deadline) {
						slot := uint64(q.Free() % qd)
						tr := drv.Transfer{Opcode: op, Offset: rng.Uint64N(region/bs) * bs, IOVA: e.iova + slot*bs, Len: bs}
						if _, err := q.SubmitTransfer(tr, 0); err != nil {
							t.Fatal(err)
						}
						submitted = true
					}
					if submitted {
						bells++
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
					if n > 0 {
						bells++
					}
					for _, c := range out[:n] {
						if err := c.Err(); err != nil {
							t.Fatal(err)
						}
					}
					ios += n
				}
			}
			var stacks *straceReport
			if strace {
				stacks = straceStacks(t, run)
			} else {
				run()
			}
			wall := time.Since(t0)
			name := "userspace driver, polled"
			if irq {
				name = "userspace driver, MSI-X eventfd"
			}
			c := sampleCPU(t).sub(c0)
			bpf := since(bpf0)
			if strace {
				if stacks != nil {
					stacks.log(t, name+", "+opName(op), ios)
				}
			} else {
				rows = append(rows, row{name, opName(op), ios, wall, c, syscalls, bpf, top, bells})
			}
		}
		e.close(t)
	}
	driverRows(false, false)
	driverRows(true, false)

	// 3. The kernel's nvme driver (in a function: its deferred calls give
	// the controller back to vfio-pci before the strace rows below).
	func() {
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
			c0 := sampleCPU(t)
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
			c := sampleCPU(t).sub(c0)
			bpf := since(bpf0)
			rows = append(rows, row{"kernel nvme, io_uring O_DIRECT fixed buffers", opName(op), ios, wall, c, u.Stats().Enters - st0.Enters, bpf, top, -1})
		}
		for _, op := range []uint8{spec.OpRead, spec.OpWrite} {
			var ios atomic.Int64
			bpf0 := mark()
			c0 := sampleCPU(t)
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
			c := sampleCPU(t).sub(c0)
			n := int(ios.Load())
			bpf := since(bpf0)
			rows = append(rows, row{"kernel nvme, pread/pwrite O_DIRECT, 32 threads", opName(op), n, wall, c, uint64(n), bpf, top, -1})
		}
	}()

	var b strings.Builder
	fmt.Fprintf(&b, "\n4 KiB random I/O, queue depth %d, over the first %d MiB of QEMU's NVMe namespace, %v per row (TCG guest, 2 vCPUs)\n", qd, region>>20, dur)
	fmt.Fprintf(&b, "guest CPU: wall time × vCPUs − /proc/stat's idle and iowait over the row; by ticks: /proc/stat's user+nice+system+irq+softirq+steal; process CPU: this process's user+system (getrusage)\n\n")
	fmt.Fprintf(&b, "| path | op | IOPS | guest CPU µs/I/O | guest CPU by ticks µs/I/O | of which irq+softirq | IOPS per guest CPU-second | process CPU µs/I/O | IOPS per process CPU-second | syscalls/I/O (eBPF) | syscalls/I/O (counted by the code) | doorbell stores/I/O | most frequent calls (eBPF) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		n := float64(max(r.ios, 1))
		iops := float64(r.ios) / r.wall.Seconds()
		ebpf := "–"
		if r.ebpf >= 0 {
			ebpf = fmt.Sprintf("%.2f", float64(r.ebpf)/n)
		}
		bells := "–"
		if r.doorbells >= 0 {
			bells = fmt.Sprintf("%.2f", float64(r.doorbells)/n)
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.1f | %.1f | %.0f | %.1f | %.0f | %s | %.2f | %s | %s|\n", r.path, r.op, iops,
			float64(r.cpu.guest.Microseconds())/n, float64(r.cpu.guestTicks.Microseconds())/n, float64(r.cpu.guestIRQ.Microseconds())/n, float64(r.ios)/max(r.cpu.guest.Seconds(), 1e-9),
			float64(r.cpu.process.Microseconds())/n, float64(r.ios)/max(r.cpu.process.Seconds(), 1e-9),
			ebpf, float64(r.syscalls)/n, bells, r.top)
	}
	t.Log(b.String())

	// Where the engine's and the driver's system calls come from: the
	// same rows again (default engine, MSI-X driver) with strace -f -k
	// attached, each call counted by its stack. ptrace stops every thread
	// at every call, which changes the timing and so how often the Go
	// runtime parks and wakes threads: these runs say where calls come
	// from, the eBPF rows above how many there are.
	if os.Getenv("HCOMM_BENCH_VM_STRACE") == "1" {
		engineRows(engineVariants[0], true)
		driverRows(true, true)
	}
}

// engineVariant is one way of driving the engine in TestVMBench.
type engineVariant struct {
	name      string
	spin      time.Duration // Config.Spin
	resubmit  bool          // callbacks submit the next transfer
	ringEvery bool          // nvme.Config.DeferDoorbell -1: the SQ doorbell at every Flush
}

// engineVariants: the backend's default (the SQ doorbell deferred to the
// next Reap while nvme.DefaultDeferDoorbell commands are at the
// controller) three ways, and two of them again with a doorbell at every
// Flush, beside them in the same run.
var engineVariants = []engineVariant{
	{name: "callbacks → channel → SubmitContext"},
	{name: "callbacks → channel → SubmitContext, Spin off", spin: -1},
	{name: "callbacks submit", resubmit: true},
	{name: "callbacks → channel → SubmitContext, doorbell at every Flush", ringEvery: true},
	{name: "callbacks submit, doorbell at every Flush", resubmit: true, ringEvery: true},
}

// benchOps are the operations of a row set: reads and writes, or reads
// alone under strace (each traced row is slow to take and to read back).
func benchOps(strace bool) []uint8 {
	if strace {
		return []uint8{spec.OpRead}
	}
	return []uint8{spec.OpRead, spec.OpWrite}
}

func opName(op uint8) string {
	if op == spec.OpRead {
		return "read"
	}
	return "write"
}

// cpuSample is the CPU used so far: this process's, and the whole
// guest's.
type cpuSample struct {
	at              time.Time
	process         time.Duration
	idle, busy, irq uint64 // /proc/stat ticks (USER_HZ), summed over CPUs
	cpus            int
}

// cpuUse is the CPU used between two samples. guest is every vCPU's
// non-idle time: the wall time times the vCPUs, less the idle and iowait
// time /proc/stat reports (which the kernel measures from its idle entries
// and exits, not by sampling ticks). guestTicks is the busy time /proc/stat
// counts by ticks (user, nice, system, irq, softirq, steal), guestIRQ its
// irq+softirq part: sampled every 10 ms, these miss bursts that start and
// end between two ticks, so they come out low when a CPU keeps going idle.
type cpuUse struct {
	process, guest, guestTicks, guestIRQ time.Duration
}

func (s cpuSample) sub(before cpuSample) cpuUse {
	tick := func(n uint64) time.Duration { return time.Duration(n) * time.Second / userHZ }
	wall := s.at.Sub(before.at) * time.Duration(s.cpus)
	return cpuUse{
		process:    s.process - before.process,
		guest:      max(wall-tick(s.idle-before.idle), 0),
		guestTicks: tick(s.busy - before.busy),
		guestIRQ:   tick(s.irq - before.irq),
	}
}

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on Linux's
// x86-64 and arm64).
const userHZ = 100

// sampleCPU reads getrusage(RUSAGE_SELF) and /proc/stat.
func sampleCPU(t *testing.T) cpuSample {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	stat, err := os.ReadFile("/proc/stat")
	at := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	s := cpuSample{at: at, process: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	if s.idle, s.busy, s.irq, s.cpus, err = parseProcStat(stat); err != nil {
		t.Fatal(err)
	}
	return s
}

// parseProcStat returns, from /proc/stat, the idle (idle + iowait), busy
// (user + nice + system + irq + softirq + steal; guest time is inside
// user) and irq+softirq ticks of its first line, "cpu  user nice system
// idle iowait irq softirq steal ...", and how many "cpuN" lines follow.
func parseProcStat(stat []byte) (idle, busy, irq uint64, cpus int, err error) {
	lines := strings.Split(string(stat), "\n")
	f := strings.Fields(lines[0])
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0, 0, fmt.Errorf("/proc/stat: first line %q: want \"cpu\" and 8 or more counters", lines[0])
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[1+i], 10, 64); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("/proc/stat: %q: %w", lines[0], err)
		}
	}
	for _, l := range lines[1:] {
		if name, _, _ := strings.Cut(l, " "); len(name) > 3 && strings.HasPrefix(name, "cpu") && strings.Trim(name[3:], "0123456789") == "" {
			cpus++
		}
	}
	if cpus == 0 {
		return 0, 0, 0, 0, fmt.Errorf("/proc/stat: no cpuN lines")
	}
	user, nice, system, idleT, iowait, irqT, soft, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
	return idleT + iowait, user + nice + system + irqT + soft + steal, irqT + soft, cpus, nil
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
