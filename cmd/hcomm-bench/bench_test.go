package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/trace"
)

// The test binary doubles as the traced worker (countInChild re-executes
// it with -worker) and as the remote peer (-remote-peer=passive).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "-worker" || os.Args[1] == "-scenario-child" || strings.HasPrefix(os.Args[1], "-remote-peer=")) {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestNewStat(t *testing.T) {
	for _, c := range []struct {
		in            []float64
		med, min, max float64
	}{
		{[]float64{5, 1, 3, 2, 4}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
		{[]float64{7}, 7, 7, 7},
	} {
		s := newStat(c.in)
		if s.Median != c.med || s.Min != c.min || s.Max != c.max || len(s.Runs) != len(c.in) {
			t.Errorf("newStat(%v) = %+v, want median %v [%v, %v]", c.in, s, c.med, c.min, c.max)
		}
	}
	if s := newStat(nil); s.Median != 0 || s.Runs != nil {
		t.Errorf("newStat(nil) = %+v", s)
	}
	// The input keeps its order (the runs are reported as measured).
	in := []float64{3, 1, 2}
	newStat(in)
	if in[0] != 3 {
		t.Errorf("newStat sorted its input")
	}
}

func TestPrimary(t *testing.T) {
	if v := primary(unitIOPS, 1000, 4096); v != 1e6 {
		t.Errorf("1000 ns/op = %v IOPS, want 1e6", v)
	}
	if v := primary(unitGBps, 1000, 4096); v != 4.096 {
		t.Errorf("4096 B in 1000 ns = %v GB/s, want 4.096", v)
	}
	// min and max swap when the unit inverts time.
	s := primaryStat(unitIOPS, newStat([]float64{1000, 2000, 500}), 0)
	if s.Min != 5e5 || s.Max != 2e6 || s.Median != 1e6 {
		t.Errorf("IOPS stat %+v", s)
	}
}

func TestParseStrace(t *testing.T) {
	out := `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.006000           1      4000           pwrite64
 35.00    0.003500           0      4001         1 read
  5.00    0.000500          50        10           futex
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           1      8011         1 total
`
	m, err := parseStrace(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"pwrite64": 4000, "read": 4001, "futex": 10}
	if len(m) != len(want) {
		t.Fatalf("got %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s: %v, want %v", k, m[k], v)
		}
	}
	if _, err := parseStrace(strings.NewReader("no table here\n")); err == nil {
		t.Error("no table: no error")
	}
}

func TestParseFio(t *testing.T) {
	out := []byte(`fio: some warning
{"jobs": [{"read": {"iops": 1234.5, "total_ios": 999}, "write": {"iops": 77.0, "total_ios": 11}}]}`)
	if iops, ios, err := parseFio(out, "randread"); err != nil || iops != 1234.5 || ios != 999 {
		t.Errorf("randread: %v %v %v", iops, ios, err)
	}
	if iops, ios, err := parseFio(out, "randwrite"); err != nil || iops != 77 || ios != 11 {
		t.Errorf("randwrite: %v %v %v", iops, ios, err)
	}
	if _, _, err := parseFio([]byte(`{"jobs": []}`), "randread"); err == nil {
		t.Error("no jobs: no error")
	}
	if _, _, err := parseFio([]byte(`{"jobs": [{"read": {"iops": 0}}]}`), "randread"); err == nil {
		t.Error("zero IOPS: no error")
	}
}

// Every variant a table names is registered, and every registered variant
// appears in some table (nothing measured that is never shown).
func TestGroupsMatchRegistry(t *testing.T) {
	o := &options{scenarios: map[string]bool{}, fileTargets: map[string]bool{"disk": true, "stable": true}}
	for _, s := range allScenarios {
		o.scenarios[s] = true
	}
	seen := map[string]bool{}
	for _, g := range append(groups(o), stableGroups()...) {
		if !contains(g.variants, g.ref) {
			t.Errorf("group %q: reference %q is not one of its variants", g.title, g.ref)
		}
		for _, v := range g.variants {
			if _, err := lookup(g.scenario, v); err != nil {
				t.Error(err)
			}
			seen[g.scenario+"/"+v] = true
		}
	}
	for k := range registry {
		if sc, _, _ := strings.Cut(k, "/"); !seen[k] && !countedOnly[sc] {
			t.Errorf("workload %s is registered but in no table", k)
		}
	}
	for k := range quickCounted {
		if registry[k] == nil {
			t.Errorf("quickCounted names %s, which does not exist", k)
		}
	}
}

// The goals are judged on the right value (a count on the engine's own
// number, a ratio on the ratio), each ratio's range is per repetition,
// combined goals are met only when every part is, and a goal without its
// measurement says so.
func TestGoalsVerdicts(t *testing.T) {
	es := []entry{
		{Name: "device-small", Variant: "4096-inline/engine-b64", BaselineVariant: "4096-inline/floor-driver-b64", Metric: "time", Engine: ptr(275), Baseline: ptr(250), Ratio: ptr(1.1),
			EngineRuns: []float64{275, 330, 280}, BaselineRuns: []float64{250, 220, 280}},
		{Name: "device-small", Variant: "4096/engine-b64", BaselineVariant: "4096/traditional", Metric: "syscalls", Engine: ptr(0.2), Baseline: ptr(2), Ratio: ptr(0.1)},
		{Name: "file-4k", Variant: "randread/engine", BaselineVariant: "randread/fio-io_uring", Metric: "cpu", Engine: ptr(4000), Baseline: ptr(9000), Ratio: ptr(4.0 / 9)},
		{Name: "file-4k", Variant: "randread/engine", BaselineVariant: "randread/fio-io_uring", Metric: "iops", Engine: ptr(80000), Baseline: ptr(90000), Ratio: ptr(8.0 / 9)},
		{Name: "remote", Variant: "tcp/put/65536/b1/engine", BaselineVariant: "tcp/put/65536/ucx_perftest", Metric: "bandwidth", Engine: ptr(95), Baseline: ptr(100), Ratio: ptr(0.95)},
		{Name: "remote", Variant: "tcp/put/1048576/b64/engine", BaselineVariant: "tcp/put/1048576/ucx_perftest", Metric: "bandwidth", Engine: ptr(80), Baseline: ptr(100), Ratio: ptr(0.8)},
		{Name: "remote", Variant: "tcp/put/8/b1/engine", BaselineVariant: "tcp/put/8/ucx_perftest", Metric: "bandwidth", Engine: ptr(1), Baseline: ptr(100), Ratio: ptr(0.01)},
	}
	gs := goals(es, map[string]bool{"device-small": true, "file-4k": true, "remote": true}, map[string]string{"remote/shm": "ran out of its time"})
	get := func(what string) goal {
		for _, g := range gs {
			if strings.Contains(g.What, what) {
				return g
			}
		}
		t.Fatalf("no goal %q in %v", what, gs)
		return goal{}
	}
	if g := get("batch 64, inline: engine ÷ bare HDMA driver"); g.Verdict != "met" || *g.Min != 1.0 || math.Abs(*g.Max-1.5) > 1e-9 {
		t.Errorf("driver goal: %+v, want met with the per-repetition range [1, 1.5]", g)
	}
	if g := get("batch 64: syscalls per transfer"); g.Verdict != "missed" || *g.Value != 0.2 {
		t.Errorf("syscall goal judged on %v (%s), want the engine's 0.2, missed", *g.Value, g.Verdict)
	}
	if g := get("randread, poll mode: CPU per I/O"); g.Verdict != "missed" || !strings.Contains(g.Detail, "fewer IOPS") {
		t.Errorf("CPU goal met at fewer IOPS than fio: %+v", g)
	}
	if g := get("tcp: put bandwidth at ≥ 64 KiB ÷ ucx_perftest"); g.Verdict != "missed" || *g.Value != 0.8 || strings.Contains(g.Detail, "8 B") {
		t.Errorf("remote goal: %+v, want missed on the worst part (0.8) and 8 B left out", g)
	}
	if g := get("batch 1, inline"); g.Verdict != "not measured" || g.Value != nil {
		t.Errorf("missing measurement: %+v", g)
	}
	if g := get("randwrite, default (reaper) mode: IOPS"); g.Verdict != "not measured" {
		t.Errorf("missing file measurement: %+v", g)
	}
	if g := get("shm: 8 B put latency ÷ ucx"); g.Verdict != "not measured" || !strings.Contains(g.Detail, "remote/shm did not finish: ran out of its time") {
		t.Errorf("goal of an unfinished unit: %+v", g)
	}
	for _, g := range gs {
		if g.Scenario == "latency" || g.Scenario == "footprint" {
			t.Errorf("goal of a scenario that did not run: %+v", g)
		}
	}
	var out bytes.Buffer
	printGoals(&out, gs, 5)
	for _, want := range []string{"device.b64_inline.cpu_vs_driver", "the device path's overhead", "want ≤ 1.1×", "MISSED", "not measured", "1.1× [1–1.5]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// The counts the tables print come from eBPF and must be exact where the
// path is deterministic: the traditional path makes one pwrite(2) and one
// blocking read(2) per transfer and its device one MSI write; the engine
// (poll mode, which asks for no interrupts: nobody sleeps on them) makes
// none per transfer, and its device none either.
func TestCountsExact(t *testing.T) {
	testutil.RequirePrivileged(t, "eBPF counting of a traced worker")
	if err := trace.CheckPrivileges(); err != nil {
		testutil.RequireFeature(t, "eBPF tracing", err)
	}
	o := &options{}
	const n = 640
	w, err := lookup("device-small", "4096-inline/traditional")
	if err != nil {
		t.Fatal(err)
	}
	c, err := countInChild(o, w, n)
	if err != nil {
		t.Fatal(err)
	}
	if c.ByName["pwrite64"] != 1 || c.Device != 1 || c.ByName["read"] != 1 {
		t.Errorf("traditional: pwrite64 %v, read %v, device %v per transfer; want exactly 1, 1, 1 (%v)", c.ByName["pwrite64"], c.ByName["read"], c.Device, c.ByName)
	}
	if c.Host < 2 || c.Host > 2.5 {
		t.Errorf("traditional: %v host syscalls per transfer, want 2 plus a little runtime noise", c.Host)
	}
	if math.Abs(c.Copies-1) > 0.01 {
		t.Errorf("traditional: %v CPU copies per transfer, want 1 (the pwrite; plus 16 eventfd bytes)", c.Copies)
	}
	w, err = lookup("device-small", "4096-inline/engine-b64")
	if err != nil {
		t.Fatal(err)
	}
	if c, err = countInChild(o, w, 100*n); err != nil {
		t.Fatal(err)
	}
	if c.ByName["pwrite64"] != 0 || c.ByName["read"] != 0 || c.Device != 0 {
		t.Errorf("engine b64: pwrite64 %v, read %v, device %v per transfer; want 0, 0, 0 (%v)", c.ByName["pwrite64"], c.ByName["read"], c.Device, c.ByName)
	}
	if c.Host > 0.1 || c.Copies > 0.01 {
		t.Errorf("engine b64: %v host syscalls and %v CPU copies per transfer, want ~0 (%v)", c.Host, c.Copies, c.ByName)
	}
}

// TestWritePlots draws every chart from a synthetic report: each file
// appears and is an SVG, and data a log axis cannot show (bars from 0)
// does not panic.
func TestWritePlots(t *testing.T) {
	es := []entry{
		{Name: "device-small", Variant: "4096/engine-b64", BaselineVariant: "4096/traditional", Metric: "time", Engine: ptr(400), Baseline: ptr(10000)},
		{Name: "device-small", Variant: "4096-inline/engine-b64", BaselineVariant: "4096-inline/traditional", Metric: "time", Engine: ptr(300), Baseline: ptr(1600)},
		{Name: "file-4k", Variant: "randread/engine", BaselineVariant: "randread/fio-io_uring", Metric: "iops", Engine: ptr(90000), Baseline: ptr(80000)},
		{Name: "file-4k", Variant: "randread/engine", BaselineVariant: "randread/fio-io_uring", Metric: "cpu_per_gib", Engine: ptr(1.2), Baseline: ptr(2.5)},
		{Name: "file-4k", Variant: "randwrite/engine", BaselineVariant: "randwrite/fio-io_uring", Metric: "iops", Engine: ptr(50000), Baseline: ptr(60000)},
		{Name: "file-4k", Variant: "randwrite/engine", BaselineVariant: "randwrite/fio-io_uring", Metric: "cpu_per_gib", Engine: ptr(1.5), Baseline: ptr(2.0)},
		{Name: "footprint", Variant: "inflight=1/engine", BaselineVariant: "inflight=1/traditional", Metric: "rss", Engine: ptr(9 << 20), Baseline: ptr(9 << 20)},
		{Name: "footprint", Variant: "inflight=1024/engine", BaselineVariant: "inflight=1024/traditional", Metric: "rss", Engine: ptr(12 << 20), Baseline: ptr(35 << 20)},
		{Name: "footprint", Variant: "inflight=1024/engine", BaselineVariant: "inflight=1024/traditional", Metric: "pinned", Engine: ptr(4 << 20), Baseline: ptr(0)},
		{Name: "remote", Variant: "tcp/put/65536/b1/engine", BaselineVariant: "tcp/put/65536/ucx_perftest", Metric: "bandwidth", Engine: ptr(400), Baseline: ptr(300)},
		{Name: "remote", Variant: "tcp/put/65536/b1/engine", BaselineVariant: "tcp/put/65536/b1/tcp-socket", Metric: "bandwidth", Engine: ptr(400), Baseline: ptr(350)},
		{Name: "remote", Variant: "tcp/put/1048576/b64/engine", BaselineVariant: "tcp/put/1048576/ucx_perftest", Metric: "bandwidth", Engine: ptr(450), Baseline: ptr(30)},
	}
	for i, q := range []string{"p50", "p90", "p99", "p99.9", "max"} {
		v := float64(250 * (i + 1))
		es = append(es, entry{Name: "latency", Variant: "traditional→engine", BaselineVariant: "traditional", Metric: q, Engine: ptr(v), Baseline: ptr(40 * v)})
	}
	dir := t.TempDir()
	files, err := writePlots(dir, report{Scenarios: es})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"device-small-4096.svg", "device-small-4096-inline.svg", "file-4k-randread-iops.svg", "file-4k-randwrite-cpu-per-gib.svg", "latency-traditional.svg", "footprint.svg", "remote-tcp-put.svg"}
	for _, w := range want {
		b, err := os.ReadFile(filepath.Join(dir, w))
		if err != nil {
			t.Errorf("%s: %v (wrote %v)", w, err, files)
			continue
		}
		if !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s is not an SVG", w)
		}
		png := strings.TrimSuffix(w, ".svg") + ".png"
		if b, err := os.ReadFile(filepath.Join(dir, png)); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: not written or not a PNG (%v)", png, err)
		}
	}
}

// The fio syscall count runs fio for a number of I/Os, not for a time:
// two timed runs could do as many I/Os and fail the difference.
func TestFioCountArgs(t *testing.T) {
	o := &options{quick: true}
	for _, tc := range []struct {
		op, eng string
		ios     int
	}{{"randread", "io_uring", 1000}, {"randwrite", "io_uring", 20000}, {"randread", "psync", 5}} {
		a := fioCountArgs("/x/f.dat", fileSize(o), tc.op, tc.eng, tc.ios)
		s := strings.Join(a, " ")
		if strings.Contains(s, "--time_based") || strings.Contains(s, "--runtime=") {
			t.Errorf("%s/%s: still timed: %s", tc.op, tc.eng, s)
		}
		if a[len(a)-1] != "--number_ios="+strconv.Itoa(tc.ios) || !strings.Contains(s, "--rw="+tc.op) || !strings.Contains(s, "--ioengine="+tc.eng) {
			t.Errorf("%s/%s %d: %s", tc.op, tc.eng, tc.ios, s)
		}
	}
}

// A unit runs as a child process: with time enough it hands over its
// entries; past its deadline it is stopped, and the error says so and
// what it kept, instead of the run hanging.
func TestRunUnitDeadline(t *testing.T) {
	o := &options{quick: true, reps: 5, noTrace: true, scenarios: map[string]bool{"alloc": true}, timeout: time.Minute}
	var out bytes.Buffer
	b := &bench{o: o, out: &out}
	u := b.units()
	if len(u) != 1 || u[0].scenario != "alloc" {
		t.Fatalf("units %+v, want alloc", u)
	}
	rep, err := b.runUnit(u[0], 2*time.Minute)
	if err != nil {
		t.Fatalf("alloc: %v", err)
	}
	if len(rep.Scenarios) == 0 || !strings.Contains(out.String(), "== alloc") {
		t.Errorf("alloc: %d entries, output:\n%s", len(rep.Scenarios), out.String())
	}
	out.Reset()
	_, err = b.runUnit(u[0], 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "ran out of its time") {
		t.Fatalf("alloc in 100 ms: %v, want stopped at its deadline", err)
	}
	if !strings.Contains(out.String(), "NOT FINISHED") {
		t.Errorf("the tables do not say the unit did not finish:\n%s", out.String())
	}
}

// The parent lays the data file out and removes it at exit; a scenario
// child (or a traced worker) reuses it and must not remove it when it
// exits, or every later unit lays 512 MiB out again (and -keep is lost).
func TestChildKeepsDataFiles(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := benchDir(&options{dir: dir}); err != nil {
		t.Skipf("%s: %v", dir, err)
	}
	for _, tc := range []struct {
		name  string
		o     options
		noted bool
	}{
		{"child", options{child: true}, false},
		{"worker", options{worker: true}, false},
		{"parent", options{}, true},
	} {
		tc.o.quick, tc.o.dir = true, dir
		dataFiles = nil
		path, err := prepareFile(&tc.o)
		if err != nil {
			t.Fatal(err)
		}
		if noted := slices.Contains(dataFiles, path); noted != tc.noted {
			t.Errorf("%s: data file noted for removal: %v, want %v", tc.name, noted, tc.noted)
		}
	}
	// The buffered variant's file is laid out in a child: the parent
	// notes its path without laying it out.
	dataFiles = nil
	bp, err := dataPath(&options{quick: true, dir: dir}, bufferedName)
	if err != nil || !slices.Contains(dataFiles, bp) {
		t.Errorf("buffered file %s not noted for removal (%v)", bp, err)
	}
	if _, err := os.Stat(bp); err == nil {
		t.Errorf("dataPath laid %s out", bp)
	}
	dataFiles = nil
}

// A unit may take up to twice its share of what is left, never the half
// of their shares the later units keep, and the last unit all that is
// left: the run ends within -timeout.
func TestUnitBudget(t *testing.T) {
	for _, tc := range []struct {
		left     time.Duration
		w, wLeft float64
		want     time.Duration
	}{
		{10 * time.Minute, 1, 10, 2 * time.Minute},                // twice its share
		{10 * time.Minute, 5, 10, 7*time.Minute + 30*time.Second}, // the later half-shares kept
		{10 * time.Minute, 2, 2, 10 * time.Minute},                // the last unit: all that is left
	} {
		if got := unitBudget(tc.left, tc.w, tc.wLeft); got != tc.want {
			t.Errorf("unitBudget(%v, %v, %v) = %v, want %v", tc.left, tc.w, tc.wLeft, got, tc.want)
		}
	}
}

// The engine-vs-driver goal is judged on the thread's CPU time when the run
// measured it, with the wall-time ratio beside it, and on wall time only
// when it did not.
func TestGoalsDriverThreadCPU(t *testing.T) {
	wall := entry{Name: "device-small", Variant: "4096-inline/engine-b64", BaselineVariant: "4096-inline/floor-driver-b64", Metric: "time",
		Engine: ptr(262.5), Baseline: ptr(250), Ratio: ptr(1.05)}
	thread := entry{Name: "device-small", Variant: "4096-inline/engine-b64", BaselineVariant: "4096-inline/floor-driver-b64", Metric: "thread_cpu",
		Engine: ptr(260), Baseline: ptr(200), Ratio: ptr(1.3), EngineRuns: []float64{260, 250}, BaselineRuns: []float64{200, 200}}
	for _, tc := range []struct {
		name    string
		es      []entry
		label   string
		verdict string
		detail  string
	}{
		{"thread CPU measured", []entry{wall, thread}, "CPU time of the thread", "missed", "wall time ÷ driver 1.05×"},
		{"wall time only", []entry{wall}, "wall time", "met", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g *goal
			for _, x := range goals(tc.es, map[string]bool{"device-small": true}, nil) {
				if strings.Contains(x.What, "batch 64, inline: engine ÷ bare HDMA driver") {
					g = &x
				}
			}
			if g == nil {
				t.Fatal("no engine ÷ driver goal")
			}
			if !strings.Contains(g.What, tc.label) || g.Verdict != tc.verdict || !strings.Contains(g.Detail, tc.detail) {
				t.Errorf("goal %+v: want label %q, verdict %q, detail with %q", *g, tc.label, tc.verdict, tc.detail)
			}
		})
	}
}

// Every goal has a stable, unique ID of the documented shape, a known group
// and a measurement to judge it on.
func TestGoalTable(t *testing.T) {
	id := regexp.MustCompile(`^[a-z0-9]+(\.[a-zA-Z0-9_]+){1,3}$`)
	seen := map[string]bool{}
	for _, s := range goalTable() {
		if !id.MatchString(s.ID) {
			t.Errorf("goal ID %q: want dot-separated lower-case words", s.ID)
		}
		if seen[s.ID] {
			t.Errorf("goal ID %q twice", s.ID)
		}
		seen[s.ID] = true
		if groupTitle(s.Group) == s.Group {
			t.Errorf("goal %s: group %q has no title in goalGroups", s.ID, s.Group)
		}
		if (s.Parts == nil) == (s.Ref == ref{}) {
			t.Errorf("goal %s: want exactly one of Ref and Parts", s.ID)
		}
		if s.Unit == "" || s.Limit.op == "" || s.What == "" || s.Scenario == "" {
			t.Errorf("goal %s: incomplete: %+v", s.ID, s)
		}
	}
	for _, want := range []string{"file.randread.iops_vs_fio.poll", "remote.tcp.put_latency_8b_vs_ucx_perftest", "idle.cpu_percent"} {
		if !seen[want] {
			t.Errorf("no goal %s", want)
		}
	}
}

// Where the stable device cannot be set up, its goals say why, and none
// is judged met on nothing.
func TestStableGoalsNotMeasured(t *testing.T) {
	gs := goals(unmeasuredStable("not measured: the stable device: needs root"), map[string]bool{"file-4k": true}, nil)
	n := 0
	for _, g := range gs {
		if g.Group != "file-stable" {
			continue
		}
		n++
		if g.Verdict != "not measured" || !strings.Contains(g.Detail, "needs root") {
			t.Errorf("%s: %s (%s), want not measured with the reason", g.ID, g.Verdict, g.Detail)
		}
	}
	if n != 3*len(fileOps)*len(fileModes) {
		t.Errorf("%d stable-device goals, want IOPS, CPU and syscalls for each op and mode", n)
	}
}

// TestCompareRuns: two sets of runs' goals side by side, medians per set,
// a goal that holds on the old median and misses on the new one named.
func TestCompareRuns(t *testing.T) {
	g := func(id, target string, v float64, verdict string) goal {
		return goal{ID: id, Target: target, Unit: "×", Value: ptr(v), Verdict: verdict}
	}
	run := func(a, b float64) report {
		va, vb := "met", "met"
		if a > 0.5 {
			va = "missed"
		}
		if b < 1 {
			vb = "missed"
		}
		return report{Goals: []goal{g("x.cpu", "≤ 0.5×", a, va), g("x.iops", "≥ 1×", b, vb), {ID: "x.none", Target: "< 1 %", Verdict: "not measured"}}}
	}
	old := []report{run(0.4, 1.2), run(0.45, 1.1), run(0.6, 1.3)}
	new := []report{run(0.55, 1.2), run(0.6, 0.9), run(0.4, 1.25)}
	c := compareRuns(old, new)
	if len(c.rows) != 3 {
		t.Fatalf("%d rows, want 3", len(c.rows))
	}
	cpu, iops, none := c.rows[0], c.rows[1], c.rows[2]
	if cpu.holds(cpu.old) != "met" || cpu.holds(cpu.new) != "missed" || cpu.old.met != 2 || cpu.new.met != 1 {
		t.Errorf("x.cpu: old %s (%d met), new %s (%d met)", cpu.holds(cpu.old), cpu.old.met, cpu.holds(cpu.new), cpu.new.met)
	}
	if iops.holds(iops.old) != "met" || iops.holds(iops.new) != "met" {
		t.Errorf("x.iops: old %s, new %s", iops.holds(iops.old), iops.holds(iops.new))
	}
	if none.holds(none.old) != "—" || none.new.runs != 0 {
		t.Errorf("x.none: %+v", none)
	}
	if len(c.regressed) != 1 || c.regressed[0] != "x.cpu" {
		t.Errorf("regressed %v, want [x.cpu]", c.regressed)
	}
	var out strings.Builder
	printComparison(&out, c)
	if !strings.Contains(out.String(), "held on the old median, missed on the new: x.cpu") {
		t.Errorf("output does not name the regression:\n%s", out.String())
	}
	if l, ok := parseTarget("< 0.0001 /byte"); !ok || l.op != "<" || l.v != 1e-4 {
		t.Errorf("parseTarget: %v %v", l, ok)
	}
}
