package main

// The grow scenario: the engine's pool growing by 1 GiB (256 MiB with
// -quick) — a new arena mapped, prefaulted, and mapped into every backend
// of the engine before its first block is handed out — against the bare
// system calls a program makes to get the same memory ready for the same
// backends, side by side in one run, repetition by repetition (the order
// of the two sides flips every repetition).
//
// Engine side: an engine over the backend set with a 2 MiB first arena,
// PoolMax = 2 MiB + 1 GiB, Populate; the time of the one Alloc of 1 GiB
// that makes the pool grow (engine.Alloc → hugepage's new arena → every
// backend's MapArena). Setup and teardown are not timed.
//
// Bare side, the same steps with nothing in between:
//   - memory: mmap (hugetlb: MAP_HUGETLB|MAP_POPULATE; THP: mmap,
//     madvise(MADV_HUGEPAGE), madvise(MADV_POPULATE_WRITE));
//   - hdmadev (vfio-mock): the device's MapDMA of the range at a fixed
//     IOVA, the call a VFIO_IOMMU_MAP_DMA ioctl is on a kernel device;
//   - uringfile: one io_uring_register(IORING_REGISTER_BUFFERS_UPDATE) of
//     the range into a slot of a sparse buffer table (the kernel pins the
//     pages);
//   - ucx: one ucp_mem_map and one ucp_rkey_pack on a UCX context of the
//     same configuration (backend/ucx's RegisterUncached: the two calls in
//     C, outside its registration cache).
//
// Page backings: hugetlb 2 MiB (reserved for the run as root, as the pages
// scenario does; otherwise only when that many pages are free) and THP.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

const (
	growFirst = 2 << 20 // the engine's first arena
	growIOVA  = 1 << 40 // the bare side's IOVA (any aligned address in the mock's range)
	growSlot  = 1       // the bare side's fixed-buffer slot (slot 0 is the engine's first arena)
)

// growSets are the backend sets, by the names the rows carry.
var growSets = []struct{ name, desc string }{
	{"memory", "backend/memory only (nothing to map: the arena alone)"},
	{"hdmadev", "hdmadev over vfio-mock (IOMMU map)"},
	{"uringfile", "uringfile (io_uring fixed-buffer update: the pages pinned)"},
	{"ucx", "backend/ucx, the transports UCX_TLS allows (ucp_mem_map + remote key)"},
	{"hdmadev_uringfile", "hdmadev + uringfile, one engine: the arena mapped into both"},
	{"all", "hdmadev + uringfile + ucx"},
}

// growBackings are the page backings measured, by the names the rows carry.
var growBackings = []struct {
	name string
	b    hugepage.Backing
}{{"hugetlb_2m", hugepage.BackingHugetlb2M}, {"thp", hugepage.BackingTHP}}

// growBareUCX registers mem with UCX bare — ucp_mem_map + ucp_rkey_pack
// on be's context, outside backend/ucx's registration cache (cmd/ has no
// cgo of its own: backend/ucx makes the two calls).
func growBareUCX(be *ucx.Backend, mem []byte) (release func() error, err error) {
	return be.RegisterUncached(mem)
}

func growSize(o *options) int {
	if o.quick {
		return 256 << 20
	}
	return 1 << 30
}

// growHas says whether backend set set holds backend be.
func growHas(set, be string) bool {
	switch set {
	case "all":
		return be != "memory"
	case "hdmadev_uringfile":
		return be == "hdmadev" || be == "uringfile"
	}
	return set == be
}

// growResult is one row: a backing and a backend set, both sides.
type growResult struct {
	backing, set string
	eng, bare    []float64            // ms per growth, wall time
	engCPU       []float64            // ms, the growing thread's CPU time
	bareCPU      []float64            // ms, the thread's CPU time over the bare calls
	steps        map[string][]float64 // the bare side's steps, ms
	err          error
	skip         string // why the row is not measured
}

// runGrow measures every backing × backend set; it says what it skipped
// and whether anything failed.
func runGrow(o *options, out io.Writer, tables bool) ([]entry, []string, bool) {
	size := growSize(o)
	var skipped []string
	var rows []*growResult
	dir, _, err := benchDir(o)
	if err != nil {
		return nil, []string{"grow: " + err.Error()}, false
	}
	f, err := os.CreateTemp(dir, "hcomm-bench-grow-*")
	if err != nil {
		return nil, []string{"grow FAILED: " + err.Error()}, true
	}
	undo := atExit(func() { f.Close(); os.Remove(f.Name()) })
	defer undo()
	memlockWhy := growMemlock(size)
	for _, bk := range growBackings {
		why := ""
		switch bk.b {
		case hugepage.BackingHugetlb2M:
			var release func()
			release, why = growReserve(size)
			if release != nil {
				defer release()
			}
		case hugepage.BackingTHP:
			if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
				why = "THP is off (/sys/kernel/mm/transparent_hugepage/enabled)"
			}
		}
		for _, s := range growSets {
			r := &growResult{backing: bk.name, set: s.name, steps: map[string][]float64{}}
			switch {
			case why != "":
				r.skip = why
			case growHas(s.name, "uringfile") && memlockWhy != "":
				r.skip = memlockWhy
			}
			rows = append(rows, r)
		}
	}
	// A growth is a fraction of a second: three times the repetitions,
	// for medians that a page-zeroing run slowed by the machine's other
	// work does not move.
	reps := 3 * o.reps
	for rep := 0; rep < reps; rep++ {
		for _, r := range rows {
			if r.skip != "" || r.err != nil {
				continue
			}
			bk := growBacking(r.backing)
			o.logf("grow: %s/%s, repetition %d", r.backing, r.set, rep+1)
			engFirst := rep%2 == 0
			for side := range 2 {
				if (side == 0) == engFirst {
					ms, cpu, err := growEngineOnce(r.set, bk, size, f)
					if err == nil {
						err = growSettle(bk, size)
					}
					if err != nil {
						r.err = fmt.Errorf("engine: %w", err)
						break
					}
					r.eng, r.engCPU = append(r.eng, ms), append(r.engCPU, cpu)
				} else {
					steps, cpu, err := growBareOnce(r.set, bk, size)
					if err == nil {
						err = growSettle(bk, size)
					}
					if err != nil {
						r.err = fmt.Errorf("bare: %w", err)
						break
					}
					r.bareCPU = append(r.bareCPU, cpu)
					total := 0.0
					for k, v := range steps {
						r.steps[k] = append(r.steps[k], v)
						total += v
					}
					r.bare = append(r.bare, total)
				}
			}
		}
	}
	var es []entry
	failed := false
	for _, r := range rows {
		v, b := r.backing+"/"+r.set+"/engine", r.backing+"/"+r.set+"/bare"
		x := entry{Name: "grow", Variant: v, BaselineVariant: b, Metric: "time", Unit: "ms", Better: "lower"}
		xc := entry{Name: "grow", Variant: v, BaselineVariant: b, Metric: "thread_cpu", Unit: "ms", Better: "lower"}
		switch {
		case r.skip != "":
			skipped = append(skipped, fmt.Sprintf("grow/%s/%s: %s", r.backing, r.set, r.skip))
			x.Note = "not measured: " + r.skip
			xc.Note = x.Note
		case r.err != nil:
			failed = true
			skipped = append(skipped, fmt.Sprintf("grow/%s/%s FAILED: %v", r.backing, r.set, r.err))
			x.Note = "FAILED: " + r.err.Error()
			xc.Note = x.Note
		default:
			x = statEntry(x, newStat(r.eng), newStat(r.bare))
			x.Note = fmt.Sprintf("%d MiB; bare steps (median ms of wall time): %s", size>>20, growStepNote(r.steps))
			xc = statEntry(xc, newStat(r.engCPU), newStat(r.bareCPU))
			xc.Note = fmt.Sprintf("%d MiB; CPU time of the thread that grows the pool (engine) or makes the calls (bare): the page zeroing, the pinning and the mappings, without what other processes take from the CPU", size>>20)
		}
		es = append(es, x, xc)
	}
	if tables {
		printGrow(out, size, rows)
	}
	return es, skipped, failed
}

func growBacking(name string) hugepage.Backing {
	for _, b := range growBackings {
		if b.name == name {
			return b.b
		}
	}
	panic("grow: no backing " + name)
}

func growStepNote(steps map[string][]float64) string {
	var parts []string
	for _, k := range []string{"mmap", "hdmadev", "uringfile", "ucx"} {
		if v, ok := steps[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.3g", k, newStat(v).Median))
		}
	}
	return strings.Join(parts, ", ")
}

// growReserve makes sure both sides' hugetlb pages exist: as root it
// reserves them for the run (and gives them back); otherwise it checks
// that enough are free. why says why not.
func growReserve(size int) (release func(), why string) {
	const ps = 2 << 20
	n := (size+growFirst)/ps + 1 // one side at a time, plus the engine's first arena and a margin
	if os.Geteuid() == 0 {
		r, err := hugepage.Reserve(ps, n+max(1, n/16))
		if err != nil {
			return nil, fmt.Sprintf("reserve %d 2 MiB pages: %v", n, err)
		}
		return func() { _ = r.Release() }, ""
	}
	if c, err := hugepage.ReadHugeCounts(ps); err != nil || c.Available() < n {
		return nil, fmt.Sprintf("needs %d free 2 MiB hugetlb pages and cannot reserve them unprivileged (run as root, or reserve them: echo %d > /proc/sys/vm/nr_hugepages)", n, n)
	}
	return nil, ""
}

// growSettle waits until the hugetlb pages one side used are free again
// (an io_uring's pinned buffer is let go by the kernel's ring teardown,
// which runs after close returns), so that the next side finds them.
func growSettle(b hugepage.Backing, size int) error {
	if b != hugepage.BackingHugetlb2M {
		return nil
	}
	need := (size + growFirst) / (2 << 20)
	var c hugepage.HugeCounts
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c, err = hugepage.ReadHugeCounts(2 << 20); err == nil && c.Available() >= need {
			return nil
		}
	}
	return fmt.Errorf("after 10 s the kernel still holds the hugetlb pages of the last growth: %d of the %d needed free (%v)", c.Available(), need, err)
}

// growMemlock says why the kernel would refuse to pin size bytes for an
// io_uring fixed buffer ("" when it would not): without CAP_IPC_LOCK the
// pages count against RLIMIT_MEMLOCK (8 MiB by default). The engine's
// uringfile then falls back to unregistered I/O, so the rows would compare
// nothing.
func growMemlock(size int) string {
	if os.Geteuid() == 0 {
		return ""
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return "RLIMIT_MEMLOCK: " + err.Error()
	}
	if rl.Cur != unix.RLIM_INFINITY && rl.Cur < uint64(size+growFirst) {
		return fmt.Sprintf("RLIMIT_MEMLOCK is %d KiB, below %d MiB, and the run is not root: the kernel would not pin the buffer (ulimit -l, or run as root)", rl.Cur>>10, (size+growFirst)>>20)
	}
	return ""
}

// growEngineOnce opens an engine over set with backing b, times the one
// Alloc that grows its pool by size bytes, checks that it grew into every
// backend, and tears down.
func growEngineOnce(set string, b hugepage.Backing, size int, f *os.File) (ms, cpuMs float64, err error) {
	var bes []backend.Backend
	var fb *uringfile.Backend
	closeAll := func() {
		for _, be := range bes {
			_ = be.Close()
		}
	}
	var devs []*mock.Device
	defer func() {
		for _, m := range devs {
			m.Close()
		}
	}()
	if set == "memory" {
		bes = append(bes, memory.New())
	}
	if growHas(set, "hdmadev") {
		m, err := mock.New(mock.Config{Logger: quietLogger()})
		if err != nil {
			return 0, 0, err
		}
		devs = append(devs, m)
		db, err := hdmadev.New(m, hdmadev.Config{})
		if err != nil {
			return 0, 0, err
		}
		bes = append(bes, db)
	}
	if growHas(set, "uringfile") {
		fb, err = uringfile.New(f, uringfile.Config{Logger: quietLogger()})
		if err != nil {
			closeAll()
			return 0, 0, err
		}
		bes = append(bes, fb)
	}
	if growHas(set, "ucx") {
		ub, err := ucx.New(ucx.Config{Logger: quietLogger()})
		if err != nil {
			closeAll()
			return 0, 0, err
		}
		bes = append(bes, ub)
	}
	e, err := engine.Open(engine.Config{Backends: bes, PoolSize: growFirst, PoolMax: growFirst + int64(size), PoolIdle: -1,
		Backings: []hugepage.Backing{b}, Populate: true, Alignment: 4096, Logger: quietLogger()})
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		ctx, cancel := closeCtx()
		defer cancel()
		if serr := e.Shutdown(ctx); err == nil {
			err = serr
		}
	}()
	if fb != nil && len(fb.Describe().Fallbacks) > 0 {
		return 0, 0, fmt.Errorf("uringfile: %v", errors.Join(fb.Describe().Fallbacks...))
	}
	runtime.LockOSThread()
	c0, t0 := threadCPUNow(true), time.Now()
	blk, err := e.Alloc(size)
	el, c1 := time.Since(t0), threadCPUNow(true)
	runtime.UnlockOSThread()
	if err != nil {
		return 0, 0, err
	}
	defer e.Free(blk)
	st := e.Stats().Pool
	if st.Grows != 1 || st.Arenas != 2 || st.Mapped < int64(growFirst+size) {
		return 0, 0, fmt.Errorf("the pool did not grow by one arena of %d bytes: %d grows, %d arenas, %d bytes mapped", size, st.Grows, st.Arenas, st.Mapped)
	}
	if fb != nil && len(fb.Describe().Fallbacks) > 0 {
		return 0, 0, fmt.Errorf("uringfile did not register the new arena: %v", errors.Join(fb.Describe().Fallbacks...))
	}
	return float64(el.Nanoseconds()) / 1e6, float64(c1-c0) / 1e6, nil
}

// growBareOnce makes the same memory ready for the same backends with the
// bare calls, timing each step (ms); what they need beforehand (the mock
// device, the ring and its sparse table, UCX's context) is set up before
// and torn down after, untimed.
func growBareOnce(set string, b hugepage.Backing, size int) (steps map[string]float64, cpuMs float64, err error) {
	steps = map[string]float64{}
	var m *mock.Device
	ring := -1
	var ub *ucx.Backend
	defer func() {
		if m != nil {
			m.Close()
		}
		if ring >= 0 {
			unix.Close(ring)
		}
		if ub != nil {
			_ = ub.Close()
		}
	}()
	if growHas(set, "hdmadev") {
		if m, err = mock.New(mock.Config{Logger: quietLogger()}); err != nil {
			return nil, 0, err
		}
	}
	if growHas(set, "uringfile") {
		if ring, err = bareRingSparse(backend.MaxArenas); err != nil {
			return nil, 0, err
		}
	}
	if growHas(set, "ucx") {
		if ub, err = ucx.New(ucx.Config{Logger: quietLogger()}); err != nil {
			return nil, 0, err
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := threadCPUNow(true)
	t0 := time.Now()
	mem, err := bareMmap(b, size)
	t1 := time.Now()
	if err != nil {
		return nil, 0, err
	}
	defer unix.Munmap(mem)
	steps["mmap"] = float64(t1.Sub(t0).Nanoseconds()) / 1e6
	if m != nil {
		t0 = time.Now()
		err = m.MapDMA(growIOVA, mem, vfio.DMAReadWrite)
		t1 = time.Now()
		if err != nil {
			return nil, 0, err
		}
		defer m.UnmapDMA(growIOVA, uint64(size))
		steps["hdmadev"] = float64(t1.Sub(t0).Nanoseconds()) / 1e6
	}
	if ring >= 0 {
		t0 = time.Now()
		err = bareRingUpdate(ring, growSlot, mem)
		t1 = time.Now()
		if err != nil {
			return nil, 0, err
		}
		steps["uringfile"] = float64(t1.Sub(t0).Nanoseconds()) / 1e6
	}
	if ub != nil {
		t0 = time.Now()
		release, err := growBareUCX(ub, mem)
		t1 = time.Now()
		if err != nil {
			return nil, 0, err
		}
		defer release()
		steps["ucx"] = float64(t1.Sub(t0).Nanoseconds()) / 1e6
	}
	return steps, float64(threadCPUNow(true)-c0) / 1e6, nil
}

// bareMmap maps and prefaults size bytes of backing b with the system
// calls a program would make.
func bareMmap(b hugepage.Backing, size int) ([]byte, error) {
	switch b {
	case hugepage.BackingHugetlb2M:
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|21<<unix.MAP_HUGE_SHIFT|unix.MAP_POPULATE)
		if err != nil {
			return nil, fmt.Errorf("mmap %d bytes MAP_HUGETLB: %w", size, err)
		}
		return mem, nil
	case hugepage.Backing4K:
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
		if err != nil {
			return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
		}
		if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil {
			unix.Munmap(mem)
			return nil, fmt.Errorf("madvise(MADV_NOHUGEPAGE): %w", err)
		}
		return mem, nil
	case hugepage.BackingTHP:
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
		}
		if err := unix.Madvise(mem, unix.MADV_HUGEPAGE); err != nil {
			unix.Munmap(mem)
			return nil, fmt.Errorf("madvise(MADV_HUGEPAGE): %w", err)
		}
		if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err != nil {
			unix.Munmap(mem)
			return nil, fmt.Errorf("madvise(MADV_POPULATE_WRITE): %w", err)
		}
		return mem, nil
	}
	return nil, fmt.Errorf("bare mmap: backing %v not measured", b)
}

// The kernel's io_uring registration structures (include/uapi/linux/io_uring.h).
type (
	ioRsrcRegister struct {
		Nr, Flags  uint32
		Resv2      uint64
		Data, Tags uint64
	}
	ioRsrcUpdate2 struct {
		Offset, Resv uint32
		Data, Tags   uint64
		Nr, Resv2    uint32
	}
)

const (
	ioringRegisterBuffers2      = 15
	ioringRegisterBuffersUpdate = 16
	ioringRsrcRegisterSparse    = 1
)

// bareRingSparse sets up an io_uring (no submission, no mapping of its
// queues: only registration is done on it) with a sparse table of n fixed
// buffers, as the engine's file backend has.
func bareRingSparse(n int) (int, error) {
	var params [120]byte // struct io_uring_params, zeroed
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		return -1, fmt.Errorf("io_uring_setup: %w", errno)
	}
	rr := ioRsrcRegister{Nr: uint32(n), Flags: ioringRsrcRegisterSparse}
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, fd, ioringRegisterBuffers2, uintptr(unsafe.Pointer(&rr)), unsafe.Sizeof(rr), 0, 0); errno != 0 {
		unix.Close(int(fd))
		return -1, fmt.Errorf("io_uring_register(IORING_REGISTER_BUFFERS2, sparse %d): %w", n, errno)
	}
	return int(fd), nil
}

// bareRingUpdate registers mem into fixed-buffer slot of the ring: one
// io_uring_register(IORING_REGISTER_BUFFERS_UPDATE).
func bareRingUpdate(fd, slot int, mem []byte) error {
	iov := unix.Iovec{Base: &mem[0]}
	iov.SetLen(len(mem))
	upd := ioRsrcUpdate2{Offset: uint32(slot), Data: uint64(uintptr(unsafe.Pointer(&iov))), Nr: 1}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), ioringRegisterBuffersUpdate, uintptr(unsafe.Pointer(&upd)), unsafe.Sizeof(upd), 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("io_uring_register(IORING_REGISTER_BUFFERS_UPDATE, %d bytes): %w", len(mem), errno)
		}
		if n != 1 {
			return fmt.Errorf("io_uring_register(IORING_REGISTER_BUFFERS_UPDATE): %d slots updated, want 1", n)
		}
		return nil
	}
}

func printGrow(w io.Writer, size int, rows []*growResult) {
	fmt.Fprintf(w, "\n== grow: the pool growing by %d MiB, prefaulted, mapped into each backend, against the bare system calls (ms: the thread's CPU time and wall time; median [min–max] of the repetitions, interleaved)\n", size>>20)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "backing\tbackends\tengine CPU ms\tbare CPU ms\tCPU ÷ bare\tengine wall ms\tbare wall ms\twall ÷ bare\tbare steps (median wall ms)\t\n")
	for _, r := range rows {
		switch {
		case r.skip != "":
			fmt.Fprintf(tw, "%s\t%s\tnot measured: %s\t\t\t\t\n", r.backing, r.set, r.skip)
		case r.err != nil:
			fmt.Fprintf(tw, "%s\t%s\tFAILED: %v\t\t\t\t\n", r.backing, r.set, r.err)
		default:
			e, b := newStat(r.eng), newStat(r.bare)
			ec, bc := newStat(r.engCPU), newStat(r.bareCPU)
			fmt.Fprintf(tw, "%s\t%s\t%.1f [%.1f–%.1f]\t%.1f [%.1f–%.1f]\t%.3f×\t%.1f [%.1f–%.1f]\t%.1f [%.1f–%.1f]\t%.3f×\t%s\t\n", r.backing, r.set,
				ec.Median, ec.Min, ec.Max, bc.Median, bc.Min, bc.Max, ec.Median/bc.Median, e.Median, e.Min, e.Max, b.Median, b.Min, b.Max, e.Median/b.Median, growStepNote(r.steps))
		}
	}
	tw.Flush()
	for _, s := range growSets {
		fmt.Fprintf(w, "   %s: %s\n", s.name, s.desc)
	}
}

// growGoals: per page backing and backend set, the growing thread's CPU
// time ÷ the bare calls' (paired by repetition); wall time, which also
// carries what other processes take from the CPU, is in the detail (and
// the measure when a run has no thread CPU time).
func growGoals() []goalSpec {
	var t []goalSpec
	for _, bk := range growBackings {
		for _, s := range growSets {
			v := bk.name + "/" + s.name
			wall := ref{"grow", v + "/engine", v + "/bare", "time"}
			label := fmt.Sprintf("pool growth by 1 GiB (%s, prefaulted), %s: ", bk.name, s.name)
			t = append(t, goalSpec{ID: "grow." + bk.name + "." + s.name + ".time_vs_bare", Group: "grow", Scenario: "grow",
				What: label + "the thread's CPU time ÷ the bare system calls'", Unit: "×", Limit: limit{"≤", 1.2},
				Ref: ref{"grow", v + "/engine", v + "/bare", "thread_cpu"}, Alt: &wall, AltWhat: label + "wall time ÷ the bare system calls'",
				Amend: func(g *goal, s goalSpec, es entries) {
					e := es.find(s.Ref)
					switch {
					case e == nil:
					case e.Engine != nil && e.Baseline != nil:
						g.Detail = fmt.Sprintf("%.3g vs %.3g ms of CPU", *e.Engine, *e.Baseline)
						if w := es.find(wall); w != nil && w.Ratio != nil {
							g.Detail += fmt.Sprintf("; wall time %.3g vs %.3g ms (%.3g×)", *w.Engine, *w.Baseline, *w.Ratio)
						}
					case e.Engine != nil:
						g.Detail = fmt.Sprintf("engine %.3g ms of CPU; %s", *e.Engine, e.Note)
					case e.Note != "":
						g.Detail = e.Note
					}
				}})
		}
	}
	return t
}
