package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// unit says what a group's primary value is and which way is better.
type unit int

const (
	unitTime unit = iota // ns per transfer, lower is better
	unitIOPS             // I/Os per second, higher is better
	unitGBps             // GB/s, higher is better
)

// group is a set of variants measured together (interleaved) and printed
// as one table, ratios against ref.
type group struct {
	scenario string
	title    string
	variants []string
	ref      string
	unit     unit
}

func groups(o *options) []group {
	var gs []group
	if o.scenarios["device-small"] {
		for _, inline := range []bool{false, true} {
			mode := "device model on its own thread (worker)"
			if inline {
				mode = "device model inline in the doorbell (CPU cost of the whole path)"
			}
			for _, s := range deviceSizes {
				p := fmt.Sprintf("%d%s/", s, deviceMode(inline))
				gs = append(gs, group{"device-small", fmt.Sprintf("%s host→device per transfer, vfio-mock HDMA, %s", sizeLabel(s), mode),
					[]string{p + "traditional", p + "engine-b1", p + "engine-b8", p + "engine-b64", p + "engine-b64x2", p + "engine-cpu-b64", p + "floor-driver-b1", p + "floor-driver-b64"}, p + "traditional", unitTime})
			}
		}
	}
	if o.scenarios["file-4k"] && o.fileTargets["disk"] {
		for _, op := range fileOps {
			p, at := op+"/", atName(op)
			gs = append(gs, group{"file-4k", "4 KiB " + op + ", O_DIRECT, one file", []string{p + "engine", p + "engine-reaper", p + "engine-wait", p + "engine-reaper-wait", p + "engine-spin", p + "fio-io_uring", p + at + "-direct-g64",
				p + at + "-direct-qd1", p + "fio-psync", p + at + "-buffered-qd1"}, p + "fio-io_uring", unitIOPS})
		}
	}
	return append(gs, groupsRest(o)...)
}

// stableGroups are file-4k's tables on the stable device: the goal rows'
// engine variants beside fio io_uring, on the same device in the same run.
func stableGroups() []group {
	var gs []group
	for _, op := range fileOps {
		p := stablePrefix + op + "/"
		gs = append(gs, group{"file-4k", "4 KiB " + op + ", O_DIRECT, the stable device (a loop device with direct I/O over tmpfs)",
			[]string{p + "engine", p + "engine-reaper", p + "fio-io_uring", p + "floor-uring"}, p + "fio-io_uring", unitIOPS})
	}
	return gs
}

// groupsRest are the tables after file-4k's.
func groupsRest(o *options) []group {
	var gs []group
	if o.scenarios["bulk"] {
		for _, s := range bulkSizes {
			l := sizeLabel(s)
			gs = append(gs, group{"bulk", l + " host→host", []string{"memory-" + l + "/engine", "memory-" + l + "/copy"}, "memory-" + l + "/copy", unitGBps})
			for _, inline := range []bool{false, true} {
				p := "device-" + l + deviceMode(inline) + "/"
				mode := "device model on its own thread"
				if inline {
					mode = "device model inline"
				}
				gs = append(gs, group{"bulk", fmt.Sprintf("%s host→device (engine batches of %d), %s", l, bulkBatch(s), mode), []string{p + "engine", p + "traditional", p + "copy"}, p + "copy", unitGBps})
			}
		}
	}
	if o.scenarios["alloc"] {
		for _, s := range []int{64, 4096} {
			l := sizeLabel(s)
			gs = append(gs, group{"alloc", l + " allocate + free", []string{l + "/engine", l + "/make", l + "/sync.Pool"}, l + "/make", unitTime})
		}
	}
	return gs
}

type bench struct {
	release  []func()
	o        *options
	out      io.Writer
	m        machine
	entries  []entry
	skipped  []string
	progress progress
	// described holds the variant descriptions already printed.
	described map[string]bool
	curStep   string // what a scenario child measures now (its checkpoints say)
	// unfinished names the units that failed or ran out of time, and why.
	unfinished map[string]string
}

func newBench(o *options) *bench {
	return &bench{o: o, out: os.Stdout, entries: []entry{}, skipped: []string{}}
}

// run is the parent: it describes the machine, reserves the engines'
// hugepages and lays the data files out once, then runs each unit of the
// run (a scenario, or one transport of remote) as a child process with a
// share of -timeout (runUnit), merges what the children report, and
// prints the goals, the JSON, the CSV and the charts.
func (b *bench) run() int {
	start := time.Now()
	b.m = describeMachine(b.o)
	if b.o.scenarios["file-4k"] || b.o.scenarios["footprint"] || b.o.scenarios["latency"] {
		dir, fs, err := benchDir(b.o)
		if err == nil {
			b.o.dir = dir
			b.m.FileDir, b.m.FileFS = dir, fs
			_, err = prepareFile(b.o)
			// file-4k's buffered variant lays its own file out in the
			// child; the parent removes it at exit.
			_, _ = dataPath(b.o, bufferedName)
		}
		if err != nil {
			for _, s := range []string{"file-4k", "footprint"} {
				if b.o.scenarios[s] {
					b.skipped = append(b.skipped, s+": "+err.Error())
					delete(b.o.scenarios, s)
				}
			}
			b.o.noFile = err
		}
	}
	b.m.PoolBacking = b.reservePools()
	if b.tables() {
		b.printMachine()
	}
	failed := b.runUnits()
	for _, undo := range b.release {
		undo()
	}
	b.m.LoadEnd = loadAvg()
	b.m.Seconds = time.Since(start).Seconds()
	rep := report{SchemaVersion: schemaVersion, Machine: b.m, Goals: goals(b.entries, b.o.scenarios, b.unfinished), Scenarios: b.entries, Skipped: b.skipped}
	if b.o.json {
		if err := writeJSON(b.out, rep); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	} else if !b.o.csv {
		b.printSummary(rep.Goals)
	}
	if b.o.csv {
		if err := writeCSV(b.out, rep); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if f := b.o.jsonFile; f != nil {
		err := writeJSON(f, rep)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "hcomm-bench: -json-out: %v\n", err)
			return 1
		}
	}
	if b.o.plot != "" {
		files, err := writePlots(b.o.plot, rep)
		for _, f := range files {
			fmt.Fprintf(os.Stderr, "hcomm-bench: wrote %s\n", f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "hcomm-bench: -plot: %v\n", err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}

// runChild is a scenario child: it measures the scenarios it was given
// (-scenarios, from the parent), printing their tables unless -json, and
// checkpoints what it has to -child-out after every step, so that a child
// stopped at its deadline still hands over the tables it finished.
func (b *bench) runChild() int {
	if b.o.scenarios["file-4k"] || b.o.scenarios["footprint"] || b.o.scenarios["latency"] {
		if _, _, err := benchDir(b.o); err != nil {
			b.o.noFile = err
		} else if _, err := prepareFile(b.o); err != nil {
			b.o.noFile = err
		}
		if b.o.noFile != nil {
			for _, s := range []string{"file-4k", "footprint"} {
				if b.o.scenarios[s] {
					b.skipped = append(b.skipped, s+": "+b.o.noFile.Error())
					delete(b.o.scenarios, s)
				}
			}
		}
	}
	failed := b.measure()
	if err := b.checkpoint(); err != nil {
		fmt.Fprintf(os.Stderr, "hcomm-bench: %v\n", err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// measure runs the selected scenarios in this process: the tables'
// groups, then latency, footprint, pages and remote.
func (b *bench) measure() (failed bool) {
	canCount, why := privileged(b.o)
	if !canCount {
		b.skipped = append(b.skipped, "syscall and copy counts: "+why+" — eBPF tracing needs root (CAP_BPF+CAP_PERFMON)")
	}
	gs := groups(b.o)
	var lgs []latGroup
	if b.o.scenarios["latency"] {
		lgs = latGroups(b.o)
	}
	// file-4k's tables on the stable device come after its disk tables
	// (measureStable sets the device up and removes it).
	var rest []group
	if b.o.scenarios["file-4k"] {
		rest = groupsRest(b.o)
		gs = gs[:len(gs)-len(rest)]
	}
	b.progress = progress{start: time.Now(), total: len(gs) + len(rest) + len(lgs)}
	if b.o.scenarios["file-4k"] && b.o.fileTargets["stable"] {
		b.progress.total += len(stableGroups())
	}
	for _, s := range []string{"pages", "footprint", "remote", "pipeline", "grow"} {
		if b.o.scenarios[s] {
			b.progress.total++
		}
	}
	for _, g := range gs {
		if b.measureTable(g, canCount, why) {
			failed = true
		}
	}
	if b.o.scenarios["file-4k"] && b.o.fileTargets["stable"] && b.measureStable(canCount, why) {
		failed = true
	}
	for _, g := range rest {
		if b.measureTable(g, canCount, why) {
			failed = true
		}
	}
	if b.o.scenarios["latency"] {
		b.measureLatency(lgs)
	}
	if b.o.scenarios["footprint"] {
		b.step("footprint: memory with 1, 64, 1024 reads in flight")
		res := runFootprint(b.o)
		for _, r := range res {
			if r.err != nil {
				failed = true
				b.skipped = append(b.skipped, fmt.Sprintf("footprint/inflight=%d/%s FAILED: %v", r.n, r.variant, r.err))
			}
		}
		b.addFootprint(res)
	}
	if b.o.scenarios["pages"] {
		b.step("pages: 1 GiB per page size")
		pr, sk := runPages(b.o)
		b.skipped = append(b.skipped, sk...)
		b.addPages(pr)
	}
	if b.o.scenarios["remote"] {
		b.step("remote: " + remoteNames())
		rows, sk, bad := runRemote(b.o, b.out)
		b.skipped = append(b.skipped, sk...)
		b.entries = append(b.entries, remoteEntries(rows)...)
		failed = failed || bad
	}
	if b.o.scenarios["grow"] {
		b.step("grow: the pool growing by 1 GiB, per backend, against the bare system calls")
		es, sk, bad := runGrow(b.o, b.out, b.tables())
		b.skipped = append(b.skipped, sk...)
		b.entries = append(b.entries, es...)
		failed = failed || bad
	}
	if b.o.scenarios["pipeline"] {
		b.step("pipeline: O_DIRECT file → device memory")
		es, sk, bad := runPipeline(b.o, b.out, b.tables())
		b.skipped = append(b.skipped, sk...)
		b.entries = append(b.entries, es...)
		failed = failed || bad
	}
	return failed
}

// measureTable measures one table's variants, counts their system calls
// and copies where it can (canCount; why not otherwise), and adds the
// table; true when a variant failed.
func (b *bench) measureTable(g group, canCount bool, why string) (failed bool) {
	b.step(g.scenario + ": " + g.title)
	var ws []*workload
	for _, v := range g.variants {
		w, err := lookup(g.scenario, v)
		if err != nil {
			panic(err) // the tables and the registry disagree: a bug
		}
		ws = append(ws, w)
	}
	b.o.logf("measuring %s: %s", g.scenario, g.title)
	res := measureGroup(b.o, ws)
	for i, r := range res {
		if r.err != nil {
			continue
		}
		if !canCount {
			r.countErr = why
			continue
		}
		b.count(r, ws[i])
	}
	for _, r := range res {
		if strings.HasPrefix(r.countErr, "count failed") {
			b.skipped = append(b.skipped, fmt.Sprintf("%s/%s syscall count: %s", r.scenario, r.variant, strings.TrimPrefix(r.countErr, "count failed: ")))
		}
		if r.err != nil {
			if strings.Contains(r.err.Error(), "fio not installed") {
				b.skipped = append(b.skipped, fmt.Sprintf("%s/%s: %v", r.scenario, r.variant, r.err))
			} else {
				failed = true
				b.skipped = append(b.skipped, fmt.Sprintf("%s/%s FAILED: %v", r.scenario, r.variant, r.err))
			}
		}
	}
	b.addGroup(g, res)
	return failed
}

// measureStable sets the stable device up (stabledev.go), measures
// file-4k's tables on it and removes it. Where it cannot be set up (not
// root, no losetup, the kernel refuses), its goal rows say why and the
// run goes on: a skip, not a failure. True when a variant failed or the
// device could not be removed.
func (b *bench) measureStable(canCount bool, why string) (failed bool) {
	gs := stableGroups()
	sd, err := setupStableDev(b.o)
	if err != nil {
		reason := "the stable device: " + err.Error() + "; " + nullBlkStatus()
		b.skipped = append(b.skipped, "file-4k on "+reason)
		for _, g := range gs {
			b.step(g.scenario + ": " + g.title + " (not measured)")
		}
		b.entries = append(b.entries, unmeasuredStable("not measured: "+reason)...)
		if b.tables() {
			fmt.Fprintf(b.out, "\n== file-4k on the stable device: not measured: %s\n", reason)
		}
		return false
	}
	b.o.stableDev = sd.loop
	if b.tables() {
		fmt.Fprintf(b.out, "\n== file-4k on the stable device %s\n", sd.describe())
	}
	for _, g := range gs {
		if b.measureTable(g, canCount, why) {
			failed = true
		}
	}
	b.o.stableDev = ""
	if err := sd.close(); err != nil {
		b.skipped = append(b.skipped, "file-4k: removing the stable device FAILED: "+err.Error())
		failed = true
	}
	return failed
}

// unmeasuredStable are entries without values for the stable device's
// goals, carrying why they were not measured.
func unmeasuredStable(note string) []entry {
	var es []entry
	for _, s := range goalTable() {
		if s.Group == "file-stable" {
			es = append(es, entry{Name: s.Ref.name, Variant: s.Ref.variant, BaselineVariant: s.Ref.base, Metric: s.Ref.metric, Note: note})
		}
	}
	return es
}

// count counts one measured variant's system calls and copies: fio's
// through countFio, the engine's and the baselines' in a
// traced child; -quick counts only quickCounted.
func (b *bench) count(r *result, w *workload) {
	quickSkip := b.o.quick && !quickCounted[r.scenario+"/"+r.variant]
	switch {
	case strings.Contains(r.variant, "fio-") && quickSkip:
		r.countErr = "— (-quick)"
	case strings.Contains(r.variant, "fio-"):
		r.counts, r.countErr = countFio(b.o, r.variant, countN(b.o, r))
	case !w.count:
		r.countErr = "not counted"
	case quickSkip:
		r.countErr = "— (-quick)"
	default:
		n := countN(b.o, r)
		b.o.logf("counting %s/%s (%d transfers, traced child)", r.scenario, r.variant, n)
		c, err := countInChild(b.o, w, n)
		if err != nil {
			r.countErr = "count failed: " + err.Error()
			return
		}
		r.counts = c
	}
}

// measureLatency measures the idle engine's CPU and the latency groups.
func (b *bench) measureLatency(lgs []latGroup) {
	if pct, err := idleCPU(time.Second); err != nil {
		b.skipped = append(b.skipped, "latency/idle CPU: "+err.Error())
	} else {
		b.entries = append(b.entries, entry{Name: "idle", Variant: "engine-reaper", Metric: "cpu_percent", Unit: "% of one CPU",
			Engine: ptr(pct), Runs: 1, Better: "lower", Note: "process CPU over 1 s with an idle engine in the default mode (reaper asleep)"})
		if b.tables() {
			fmt.Fprintf(b.out, "\n== idle: an engine in the default mode with nothing to do: %.3f%% of one CPU (process CPU over 1 s)\n", pct)
		}
	}
	for _, g := range lgs {
		b.step("latency: " + g.title)
		res := runLatency(b.o, g)
		for _, r := range res {
			if r.err != nil {
				b.skipped = append(b.skipped, fmt.Sprintf("latency/%s: %v", r.name, r.err))
			}
		}
		b.addLatency(g, res)
	}
}

// step checkpoints what the child has so far and reports the next step.
func (b *bench) step(what string) {
	b.curStep = what
	if err := b.checkpoint(); err != nil {
		fmt.Fprintf(os.Stderr, "hcomm-bench: %v\n", err)
	}
	b.progress.step(what)
}

// progress tells stderr what runs now and about how long the rest takes
// (the mean time of the steps so far times the steps left).
type progress struct {
	start       time.Time
	done, total int
}

func (p *progress) step(what string) {
	el := time.Since(p.start)
	left := ""
	if p.done > 0 {
		rest := el / time.Duration(p.done) * time.Duration(p.total-p.done)
		left = fmt.Sprintf(", about %s left in it", rest.Round(time.Second))
	}
	p.done++
	fmt.Fprintf(os.Stderr, "hcomm-bench:    step %d/%d: %s (%s into the scenario%s)\n", p.done, p.total, what, el.Round(time.Second), left)
}

// machine describes where the numbers came from.
type machine struct {
	CPU         string     `json:"cpu"`
	CPUs        int        `json:"cpus"`
	GOMAXPROCS  int        `json:"gomaxprocs"`
	MemGiB      float64    `json:"mem_gib"`
	Kernel      string     `json:"kernel"`
	Go          string     `json:"go"`
	Date        string     `json:"date"`
	LoadStart   [3]float64 `json:"loadavg_start"`
	LoadEnd     [3]float64 `json:"loadavg_end"`
	Privileged  bool       `json:"privileged"`
	Counting    string     `json:"counting"`
	Fio         string     `json:"fio,omitempty"`
	FileDir     string     `json:"file_dir,omitempty"`
	FileFS      string     `json:"file_fs,omitempty"`
	PoolBacking string     `json:"engine_pool_backing"`
	Quick       bool       `json:"quick"`
	Reps        int        `json:"reps"`
	Seconds     float64    `json:"seconds"`
	Timeout     float64    `json:"timeout_seconds"`
	Units       []unitRun  `json:"units"`
}

// unitRun is how one unit of the run went: its time, its deadline, and
// whether it finished.
type unitRun struct {
	Name     string  `json:"name"`
	Seconds  float64 `json:"seconds"`
	Deadline float64 `json:"deadline_seconds"`
	Finished bool    `json:"finished"`
}

func describeMachine(o *options) machine {
	m := machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(),
		Date: time.Now().UTC().Format(time.RFC3339), LoadStart: loadAvg(), Quick: o.quick, Reps: o.reps}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		fmt.Sscanf(string(b), "MemTotal: %f kB", &kb)
		m.MemGiB = kb / (1 << 20)
	}
	ok, why := privileged(o)
	m.Privileged = ok
	m.Counting = "eBPF (package trace) on a traced child of this binary"
	if !ok {
		m.Counting = why
	}
	if out, err := exec.Command("fio", "--version").Output(); err == nil {
		m.Fio = strings.TrimSpace(string(out))
	}
	return m
}

func loadAvg() [3]float64 {
	var l [3]float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscanf(string(b), "%f %f %f", &l[0], &l[1], &l[2])
	}
	return l
}

func (b *bench) printMachine() {
	m := b.m
	fmt.Fprintf(b.out, "hcomm-bench  %s\n", m.Date)
	fmt.Fprintf(b.out, "machine: %s, %d CPUs (GOMAXPROCS %d), %.1f GiB, Linux %s, %s\n", m.CPU, m.CPUs, m.GOMAXPROCS, m.MemGiB, m.Kernel, m.Go)
	fmt.Fprintf(b.out, "load average at start: %.2f %.2f %.2f (a shared machine: ratios are from interleaved runs)\n", m.LoadStart[0], m.LoadStart[1], m.LoadStart[2])
	fmt.Fprintf(b.out, "syscalls/copies: %s\n", m.Counting)
	fmt.Fprintf(b.out, "engine pools: %s\n", m.PoolBacking)
	fmt.Fprintf(b.out, "each value: median [min–max] of %d repetitions\n", m.Reps)
}

// quickCounted are the variants -quick still counts with eBPF (each count
// is a traced child process, about a second): the ones the targets name.
var quickCounted = map[string]bool{
	"device-small/4096/traditional": true, "device-small/4096/engine-b64": true,
	"file-4k/randread/engine": true, "file-4k/randread/fio-io_uring": true, "file-4k/randread/engine-reaper": true,
	"file-4k/randwrite/engine": true, "file-4k/randwrite/engine-reaper": true, "file-4k/randwrite/fio-io_uring": true,
	"file-4k/stable/randread/engine": true, "file-4k/stable/randread/engine-reaper": true, "file-4k/stable/randread/fio-io_uring": true,
	"file-4k/stable/randwrite/engine": true, "file-4k/stable/randwrite/engine-reaper": true, "file-4k/stable/randwrite/fio-io_uring": true,
	"bulk/device-1MiB/engine": true,
}

// countN is how many transfers the traced child counts: at least 2000 (or
// 512 MiB worth) so that the runtime's background calls average out, at
// most what takes about 2 s (0.3 s with -quick) at the measured speed.
func countN(o *options, r *result) int {
	n := max(r.n, 2000)
	if r.bytes > 0 {
		n = max(r.n, min(2000, (512<<20)/r.bytes))
	}
	budget := 2e9
	if o.quick {
		budget = 0.3e9
	}
	if r.ns.Median > 0 {
		n = min(n, max(int(budget/r.ns.Median), 1))
	}
	return max(min(n, 200000), 1)
}

// poolPages is how many 2 MiB pages the engines of one table need at once
// (seven engines of at most 32 MiB), with a margin for the shared pool.
const poolPages = 7*16 + 16

// reservePools reserves, as root, the hugetlb pages the engines' pools
// prefer (given back at exit), and says what backing a pool gets.
func (b *bench) reservePools() string {
	note := ""
	if os.Geteuid() == 0 {
		r, err := hugepage.Reserve(2<<20, poolPages)
		if err != nil {
			note = fmt.Sprintf(" (reserving %d pages: %v)", poolPages, err)
		} else {
			undo := atExit(func() {
				if err := r.Release(); err != nil {
					fmt.Fprintf(os.Stderr, "hcomm-bench: giving back %d hugetlb pages: %v\n", poolPages, err)
				}
			})
			b.release = append(b.release, undo)
			note = fmt.Sprintf(" (%d pages reserved for the run, given back at the end)", poolPages)
		}
	}
	e, err := engine.Open(engine.Config{Backend: memory.New(), PoolSize: 32 << 20, Mode: engine.ModePoll, Logger: quietLogger()})
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer func() {
		ctx, cancel := closeCtx()
		defer cancel()
		e.Shutdown(ctx)
	}()
	switch fb := e.Fallbacks(); len(fb) {
	case 0:
		return "hugetlb 2 MiB" + note
	case 1:
		return "THP (hugetlb 2 MiB refused: " + firstLine(fb[0].Error()) + ")" + note
	default:
		return "4 KiB pages (hugetlb and THP refused)" + note
	}
}
