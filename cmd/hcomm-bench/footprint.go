package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hcomm-go/hcomm/cmd/internal/baseline"
	"github.com/hcomm-go/hcomm/engine"
)

// The footprint scenario: the memory a process holds while N 4 KiB O_DIRECT
// reads are in flight at once, N = 1, 64, 1024. Each measurement is a
// fresh child process (this binary with -worker), so that nothing else of
// the benchmark is in it: it sets up, keeps N reads in flight for a warm-up,
// then samples /proc/self/smaps_rollup and /proc/self/status while they
// keep going.
//
//   - engine: one engine (QueueDepth N, its pool sized for N blocks, as an
//     application would size it) refilled from one goroutine.
//   - traditional: N goroutines, each reading with os.File.ReadAt into a
//     buffer it allocates per request (the "buffer per request" of the
//     seed), as Go code without a pool does.

var footprintNs = []int{1, 64, 1024}

// footprint is what a child reports.
type footprint struct {
	RSS     int64  `json:"rss"`     // resident bytes, hugetlb included
	PSS     int64  `json:"pss"`     // proportional set, hugetlb included
	Pinned  int64  `json:"pinned"`  // VmPin + VmLck (io_uring registered buffers, mlock)
	Heap    int64  `json:"heap"`    // Go heap in use (runtime.MemStats.HeapInuse)
	Threads int64  `json:"threads"` // OS threads
	Err     string `json:"err,omitempty"`
}

// footprintWorker runs in the child: variant "engine" or "traditional",
// n in flight. It prints one JSON footprint on stdout.
func footprintWorker(o *options, variant string, n int) int {
	fp, err := footprintRun(o, variant, n)
	if err != nil {
		fp.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(fp)
	if err != nil {
		return 1
	}
	return 0
}

func footprintRun(o *options, variant string, n int) (footprint, error) {
	f, err := openDirect(o)
	if err != nil {
		return footprint{}, err
	}
	defer f.Close()
	ld := &footprintLoad{f: f, offs: offsets(o, offsRing), n: n}
	switch variant {
	case "traditional":
		ld.startTraditional()
	case "engine":
		closeEngine, err := ld.startEngine()
		if err != nil {
			return footprint{}, err
		}
		defer closeEngine()
	default:
		return footprint{}, fmt.Errorf("footprint variant %q (want engine or traditional)", variant)
	}
	time.Sleep(300 * time.Millisecond) // warm-up: stacks grown, pool touched, GC cycled
	var best footprint
	for range 5 {
		time.Sleep(40 * time.Millisecond)
		fp, err := readFootprint()
		if err != nil {
			ld.fail(err)
			break
		}
		if fp.RSS > best.RSS {
			best = fp
		}
	}
	ld.stop.Store(true)
	ld.wg.Wait()
	return best, ld.err
}

// footprintLoad keeps n reads of f in flight until stop; the first
// failure stops it and is err.
type footprintLoad struct {
	f       *os.File
	offs    []int64
	n       int
	stop    atomic.Bool
	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
}

func (ld *footprintLoad) fail(err error) {
	ld.errOnce.Do(func() { ld.err = err; ld.stop.Store(true) })
}

// startTraditional: n goroutines, each allocating a buffer per request.
func (ld *footprintLoad) startTraditional() {
	for g := range ld.n {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for i := g; !ld.stop.Load(); i += ld.n {
				buf, err := baseline.AlignedBuffer(fileBlock, 4096) // a buffer per request
				if err != nil {
					ld.fail(err)
					return
				}
				if _, err := ld.f.ReadAt(buf, ld.offs[i&(offsRing-1)]); err != nil {
					ld.fail(err)
					return
				}
			}
		}()
	}
}

// startEngine: one engine (QueueDepth n rounded up to a power of two, its
// pool sized for n blocks) and one goroutine that keeps n reads in flight;
// the function returned shuts the engine down.
func (ld *footprintLoad) startEngine() (func(), error) {
	qd := 1
	for qd < ld.n {
		qd *= 2
	}
	pool := int64(max(64<<10, qd*fileBlock))
	e, err := openFileEngine(ld.f, engine.Config{PoolSize: pool, QueueDepth: qd, Alignment: 4096, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	closeEngine := func() {
		ctx, cancel := closeCtx()
		defer cancel()
		e.Shutdown(ctx)
	}
	blocks := make([]engine.Block, ld.n)
	for i := range blocks {
		if blocks[i], err = e.Alloc(fileBlock); err != nil {
			closeEngine()
			return nil, err
		}
	}
	ts := make([]engine.Transfer, ld.n)
	ids := make([]engine.ID, ld.n)
	ld.wg.Add(1)
	go func() {
		defer ld.wg.Done()
		ctx := context.Background()
		for k := 0; !ld.stop.Load(); k++ {
			for i := range ts {
				ts[i] = engine.Transfer{Src: engine.FileAt(ld.offs[(k*ld.n+i)&(offsRing-1)]), Dst: engine.Host(blocks[i]), Len: fileBlock}
			}
			if _, err := e.SubmitBatchContext(ctx, ts, ids); err != nil {
				ld.fail(err)
				return
			}
			for _, id := range ids {
				if err := e.Wait(ctx, id); err != nil {
					ld.fail(err)
					return
				}
			}
		}
	}()
	return closeEngine, nil
}

// readFootprint reads this process's memory from /proc.
func readFootprint() (footprint, error) {
	var fp footprint
	kb := func(path string, fields map[string]*int64) error {
		fh, err := os.Open(path)
		if err != nil {
			return err
		}
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if p := fields[k]; ok && p != nil {
				num, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				*p += num << 10
			}
		}
		return sc.Err()
	}
	var hugeShared, hugePrivate int64
	if err := kb("/proc/self/smaps_rollup", map[string]*int64{"Rss": &fp.RSS, "Pss": &fp.PSS,
		"Shared_Hugetlb": &hugeShared, "Private_Hugetlb": &hugePrivate}); err != nil {
		return fp, err
	}
	fp.RSS += hugeShared + hugePrivate
	fp.PSS += hugeShared + hugePrivate
	if err := kb("/proc/self/status", map[string]*int64{"VmPin": &fp.Pinned, "VmLck": &fp.Pinned}); err != nil {
		return fp, err
	}
	fp.Threads = int64(threadCount())
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fp.Heap = int64(ms.HeapInuse)
	return fp, nil
}

func threadCount() int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	return len(ents)
}

// fpResult is one variant at one N over the repetitions.
type fpResult struct {
	variant string
	n       int
	rss     stat
	pss     stat
	pinned  stat
	heap    stat
	threads stat
	err     error
}

// runFootprint measures every N, engine and traditional interleaved, each
// sample a fresh child.
func runFootprint(o *options) []*fpResult {
	var res []*fpResult
	for _, n := range footprintNs {
		for _, v := range []string{"engine", "traditional"} {
			res = append(res, &fpResult{variant: v, n: n})
		}
	}
	vals := make([][5][]float64, len(res))
	self, err := os.Executable()
	for rep := 0; rep < o.reps; rep++ {
		for i, r := range res {
			if r.err != nil {
				continue
			}
			if err != nil {
				r.err = err
				continue
			}
			args := append([]string{"-worker", "-w-scenario", "footprint", "-w-variant", r.variant, "-w-n", strconv.Itoa(r.n)}, childFlags(o)...)
			out, cerr := exec.Command(self, args...).Output()
			var fp footprint
			if jerr := json.Unmarshal(out, &fp); jerr != nil {
				r.err = errors.Join(fmt.Errorf("footprint child: %v", cerr), jerr)
				continue
			}
			if fp.Err != "" {
				r.err = errors.New(fp.Err)
				continue
			}
			for k, v := range []int64{fp.RSS, fp.PSS, fp.Pinned, fp.Heap, fp.Threads} {
				vals[i][k] = append(vals[i][k], float64(v))
			}
		}
	}
	for i, r := range res {
		r.rss, r.pss, r.pinned, r.heap, r.threads = newStat(vals[i][0]), newStat(vals[i][1]), newStat(vals[i][2]), newStat(vals[i][3]), newStat(vals[i][4])
	}
	return res
}

func (b *bench) addFootprint(res []*fpResult) {
	find := func(v string, n int) *fpResult {
		for _, r := range res {
			if r.variant == v && r.n == n && r.err == nil && len(r.rss.Runs) > 0 {
				return r
			}
		}
		return nil
	}
	for _, n := range footprintNs {
		e, t := find("engine", n), find("traditional", n)
		if e == nil || t == nil {
			continue
		}
		for _, m := range []struct {
			name string
			e, t stat
		}{{"rss", e.rss, t.rss}, {"pss", e.pss, t.pss}, {"pinned", e.pinned, t.pinned}, {"heap", e.heap, t.heap}} {
			b.entries = append(b.entries, statEntry(entry{Name: "footprint", Variant: fmt.Sprintf("inflight=%d/engine", n), BaselineVariant: fmt.Sprintf("inflight=%d/traditional", n),
				Metric: m.name, Unit: "bytes", Better: "lower"}, m.e, m.t))
		}
	}
	if !b.tables() {
		return
	}
	fmt.Fprintf(b.out, "\n== footprint: memory while N 4 KiB O_DIRECT reads are in flight (a fresh process per sample)\n")
	fmt.Fprintf(b.out, "   MiB, median of %d; RSS and PSS include hugetlb pages; pinned = VmPin+VmLck; ratio = engine ÷ traditional (lower is better)\n", b.o.reps)
	tw := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "in flight\tvariant\tRSS\tPSS\tpinned\tGo heap\tthreads\tRSS ratio\t\n")
	mib := func(v float64) string { return num(v / (1 << 20)) }
	for _, r := range res {
		if r.err != nil {
			fmt.Fprintf(tw, "%d\t%s\terror: %s\t\t\t\t\t\t\n", r.n, r.variant, firstLine(r.err.Error()))
			continue
		}
		ratio := ""
		if t := find("traditional", r.n); r.variant == "engine" && t != nil && t.rss.Median > 0 {
			ratio = fmt.Sprintf("%.3g×", r.rss.Median/t.rss.Median)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t\n", r.n, r.variant, mib(r.rss.Median), mib(r.pss.Median), mib(r.pinned.Median),
			mib(r.heap.Median), r.threads.Median, ratio)
	}
	tw.Flush()
	b.describe("engine", "one engine, QueueDepth N (next power of two), its pool sized for N blocks (≥ 64 KiB), io_uring with the pool registered; one goroutine keeps N reads in flight")
	b.describe("traditional", "N goroutines, each allocating a 4 KiB aligned buffer per request and reading with os.File.ReadAt (pread(2), O_DIRECT)")
}
