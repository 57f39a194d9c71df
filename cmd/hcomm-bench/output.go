package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// report is the -json output (schema: docs/benchmarks.md).
type report struct {
	SchemaVersion int      `json:"schema_version"`
	Machine       machine  `json:"machine"`
	Goals         []goal   `json:"goals"`
	Scenarios     []entry  `json:"scenarios"`
	Skipped       []string `json:"skipped"`
	// Step is a scenario child's current step in its checkpoints (not
	// in the run's JSON).
	Step string `json:"step,omitempty"`
}

// entry is one metric of one engine variant against one baseline.
type entry struct {
	Name            string    `json:"name"`
	Variant         string    `json:"variant"`
	Metric          string    `json:"metric"`
	Engine          *float64  `json:"engine"`
	Baseline        *float64  `json:"baseline"`
	Ratio           *float64  `json:"ratio"`
	Unit            string    `json:"unit"`
	Runs            int       `json:"runs"`
	BaselineVariant string    `json:"baseline_variant"`
	Better          string    `json:"better"`
	EngineMin       *float64  `json:"engine_min,omitempty"`
	EngineMax       *float64  `json:"engine_max,omitempty"`
	BaselineMin     *float64  `json:"baseline_min,omitempty"`
	BaselineMax     *float64  `json:"baseline_max,omitempty"`
	EngineRuns      []float64 `json:"engine_runs,omitempty"`
	BaselineRuns    []float64 `json:"baseline_runs,omitempty"`
	Note            string    `json:"note,omitempty"`
	// Syscalls by name per op as eBPF saw them (the device model's and the
	// Go runtime's included), on the syscalls entries.
	EngineByName   map[string]float64 `json:"engine_syscalls_by_name,omitempty"`
	BaselineByName map[string]float64 `json:"baseline_syscalls_by_name,omitempty"`
}

// schemaVersion changes when a field of the JSON changes meaning or goes
// away (2: schema_version itself, latency/cpu/footprint entries, readat
// rows, file ratios against fio; 3: "goals", remote entries, per-repetition
// runs on latency and footprint entries, the CSV's kind/target/verdict
// columns; 4: goals named by "id" and "group", not "issue" and "goal"; a
// goal row of the CSV has its id as variant and what it measures as metric).
const schemaVersion = 4

func ptr(v float64) *float64 { return &v }

// statEntry fills x (name, variants, metric, unit, better) with the engine
// side e and the baseline side b: medians, ranges, runs and the ratio of
// the medians.
func statEntry(x entry, e, b stat) entry {
	x.Engine, x.Baseline, x.Runs = ptr(e.Median), ptr(b.Median), len(e.Runs)
	x.EngineMin, x.EngineMax, x.BaselineMin, x.BaselineMax = ptr(e.Min), ptr(e.Max), ptr(b.Min), ptr(b.Max)
	x.EngineRuns, x.BaselineRuns = e.Runs, b.Runs
	if b.Median != 0 {
		x.Ratio = ptr(e.Median / b.Median)
	}
	return x
}

// writeCSV writes one row per goal (kind "goal") and per entry (kind
// "measurement").
func writeCSV(w io.Writer, rep report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"kind", "scenario", "variant", "baseline_variant", "metric", "unit", "engine", "baseline", "ratio", "better", "runs", "engine_min", "engine_max", "note", "target", "verdict"})
	f := func(p *float64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatFloat(*p, 'g', 6, 64)
	}
	for _, g := range rep.Goals {
		var eng, ratio string
		if g.Unit == "×" {
			ratio = f(g.Value)
		} else {
			eng = f(g.Value)
		}
		_ = cw.Write([]string{"goal", g.Scenario, g.ID, "", g.What, g.Unit, eng, "", ratio, "", "", f(g.Min), f(g.Max), g.Detail, g.Target, g.Verdict})
	}
	for _, e := range rep.Scenarios {
		_ = cw.Write([]string{"measurement", e.Name, e.Variant, e.BaselineVariant, e.Metric, e.Unit, f(e.Engine), f(e.Baseline), f(e.Ratio), e.Better,
			strconv.Itoa(e.Runs), f(e.EngineMin), f(e.EngineMax), e.Note, "", ""})
	}
	cw.Flush()
	return cw.Error()
}

// primary converts a per-operation time into the group's unit.
func primary(u unit, ns float64, bytes int) float64 {
	switch u {
	case unitIOPS:
		return 1e9 / ns
	case unitGBps:
		return float64(bytes) / ns
	}
	return ns
}

func primaryStat(u unit, s stat, bytes int) stat {
	if len(s.Runs) == 0 {
		return s
	}
	runs := make([]float64, len(s.Runs))
	for i, v := range s.Runs {
		runs[i] = primary(u, v, bytes)
	}
	return newStat(runs)
}

func unitName(u unit) (metric, name, better string) {
	switch u {
	case unitIOPS:
		return "iops", "IOPS", "higher"
	case unitGBps:
		return "bandwidth", "GB/s", "higher"
	}
	return "time", "ns/op", "lower"
}

// isEngine says whether a variant ("randread/engine-reaper",
// "stable/randread/engine") is one of the engine's: its last element says.
func isEngine(variant string) bool {
	v := variant[strings.LastIndexByte(variant, '/')+1:]
	return strings.HasPrefix(v, "engine")
}

// tables says whether the human-readable tables print (not with -json or
// -csv, which print to stdout instead).
func (b *bench) tables() bool { return !b.o.json && !b.o.csv }

// describe prints what a variant does the first time that description
// comes up in the run (the same variant recurs in many tables).
func (b *bench) describe(name, desc string) {
	if b.described == nil {
		b.described = map[string]bool{}
	}
	if desc == "" || b.described[desc] {
		return
	}
	b.described[desc] = true
	fmt.Fprintf(b.out, "   %-22s %s\n", name+":", desc)
}

// addGroup turns a group's results into JSON entries (every engine variant
// against every other variant) and prints its table.
func (b *bench) addGroup(g group, res []*result) {
	metric, uname, better := unitName(g.unit)
	byName := map[string]*result{}
	for _, r := range res {
		byName[r.variant] = r
	}
	for _, e := range res {
		if !isEngine(e.variant) || e.err != nil {
			continue
		}
		for _, base := range res {
			if isEngine(base.variant) {
				continue
			}
			b.entries = append(b.entries, compare(g, e, base, metric, uname, better)...)
		}
	}
	if !b.tables() {
		return
	}
	ref := byName[g.ref]
	fmt.Fprintf(b.out, "\n== %s: %s\n", g.scenario, g.title)
	fmt.Fprintf(b.out, "   ratio = row ÷ %s, %s is better\n", g.ref, better)
	tw := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "variant\t%s median [min–max]\tsyscalls/op\tdev-model sc/op\tCPU copies/op\tallocs/op\tCPU µs/op\tratio\t\n", uname)
	for _, r := range res {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t\t\n", shortVariant(r.variant), "error: "+firstLine(r.err.Error()))
			continue
		}
		p := primaryStat(g.unit, r.ns, r.bytes)
		ratio := ""
		if ref != nil && ref.err == nil && len(ref.ns.Runs) > 0 {
			rp := primaryStat(g.unit, ref.ns, ref.bytes)
			ratio = fmt.Sprintf("%.3g×", p.Median/rp.Median)
		}
		sc, dev, cp := countCols(r)
		al := "—"
		if len(r.allocs.Runs) > 0 {
			al = fmt.Sprintf("%.2f", r.allocs.Median)
		}
		cpu := "—"
		if len(r.cpu.Runs) > 0 {
			cpu = num(r.cpu.Median / 1e3)
		}
		fmt.Fprintf(tw, "%s\t%s [%s–%s]\t%s\t%s\t%s\t%s\t%s\t%s\t\n", shortVariant(r.variant), num(p.Median), num(p.Min), num(p.Max), sc, dev, cp, al, cpu, ratio)
	}
	tw.Flush()
	for _, r := range res {
		if r.err == nil {
			b.describe(shortVariant(r.variant), r.desc)
		}
		if b.o.verbose && r.counts != nil {
			var parts []string
			for _, k := range sortedNames(r.counts.ByName) {
				if v := r.counts.ByName[k]; v >= 0.0005 {
					parts = append(parts, fmt.Sprintf("%s %.4f", k, v))
				}
			}
			fmt.Fprintf(b.out, "   %-22s syscalls/op by name (device model's included): %s\n", "", strings.Join(parts, ", "))
		}
	}
}

func countCols(r *result) (sc, dev, cp string) {
	if r.counts == nil {
		na := r.countErr
		if na == "" || na == "not counted" {
			na = "—"
		}
		if strings.HasPrefix(na, "— (") {
			return na, "", ""
		}
		if strings.HasPrefix(na, "count failed") {
			na = "count failed"
		}
		return na, "", ""
	}
	c := r.counts
	return fmt.Sprintf("%.3f", c.Host), fmt.Sprintf("%.3f", c.Device), fmt.Sprintf("%.3f", c.Copies)
}

func compare(g group, e, base *result, metric, uname, better string) []entry {
	var out []entry
	mk := func(metric, unit, better string, ev, bv *float64, note string) entry {
		x := entry{Name: g.scenario, Variant: e.variant, BaselineVariant: base.variant, Metric: metric, Unit: unit, Better: better,
			Engine: ev, Baseline: bv, Runs: len(e.ns.Runs), Note: note}
		if ev != nil && bv != nil && *bv != 0 {
			x.Ratio = ptr(*ev / *bv)
		}
		return x
	}
	if base.err != nil {
		out = append(out, mk(metric, uname, better, nil, nil, "baseline failed: "+firstLine(base.err.Error())))
		return out
	}
	ep, bp := primaryStat(g.unit, e.ns, e.bytes), primaryStat(g.unit, base.ns, base.bytes)
	x := mk(metric, uname, better, ptr(ep.Median), ptr(bp.Median), "")
	x.EngineMin, x.EngineMax, x.BaselineMin, x.BaselineMax = ptr(ep.Min), ptr(ep.Max), ptr(bp.Min), ptr(bp.Max)
	x.EngineRuns, x.BaselineRuns = ep.Runs, bp.Runs
	out = append(out, x)
	if len(e.cpu.Runs) > 0 && len(base.cpu.Runs) > 0 {
		c := mk("cpu", "CPU-ns/op", "lower", ptr(e.cpu.Median), ptr(base.cpu.Median), "user+system CPU time per op: the whole process (device model, reaper and Go runtime included); fio: its job's")
		c.EngineMin, c.EngineMax, c.BaselineMin, c.BaselineMax = ptr(e.cpu.Min), ptr(e.cpu.Max), ptr(base.cpu.Min), ptr(base.cpu.Max)
		c.EngineRuns, c.BaselineRuns = e.cpu.Runs, base.cpu.Runs
		out = append(out, c)
		if e.bytes > 0 && base.bytes > 0 {
			out = append(out, mk("cpu_per_gib", "CPU-s/GiB", "lower", ptr(e.cpu.Median/float64(e.bytes)*(1<<30)/1e9), ptr(base.cpu.Median/float64(base.bytes)*(1<<30)/1e9), ""))
		}
	}
	if len(e.threadCPU.Runs) > 0 && len(e.threadCPU.Runs) == len(base.threadCPU.Runs) {
		c := mk("thread_cpu", "CPU-ns/op", "lower", ptr(e.threadCPU.Median), ptr(base.threadCPU.Median), "CPU time per op of the one OS thread that ran the whole path (CLOCK_THREAD_CPUTIME_ID; poll mode, device model inline): what other processes take from the CPU is not counted")
		c.EngineMin, c.EngineMax, c.BaselineMin, c.BaselineMax = ptr(e.threadCPU.Min), ptr(e.threadCPU.Max), ptr(base.threadCPU.Min), ptr(base.threadCPU.Max)
		c.EngineRuns, c.BaselineRuns = e.threadCPU.Runs, base.threadCPU.Runs
		out = append(out, c)
	}
	if len(e.allocs.Runs) > 0 && len(base.allocs.Runs) > 0 {
		out = append(out, mk("allocs", "allocs/op", "lower", ptr(e.allocs.Median), ptr(base.allocs.Median), ""))
	}
	if g.scenario == "alloc" || (g.scenario == "bulk" && strings.Contains(base.variant, "/copy")) {
		return out
	}
	if e.counts != nil && base.counts != nil {
		sc := mk("syscalls", "syscalls/op", "lower", ptr(e.counts.Host), ptr(base.counts.Host), "eBPF; device-model MSI writes excluded (see device_syscalls)")
		sc.EngineByName, sc.BaselineByName = e.counts.ByName, base.counts.ByName
		out = append(out, sc,
			mk("device_syscalls", "syscalls/op", "lower", ptr(e.counts.Device), ptr(base.counts.Device), "vfio-mock's MSI eventfd writes: an interrupt on hardware, not a syscall"),
			mk("copies", "CPU copies/op", "lower", ptr(e.counts.Copies), ptr(base.counts.Copies), "bytes copied by a CPU (syscalls, io_uring, engine CPU path) / bytes per op"))
	} else {
		why := e.countErr
		if why == "" {
			why = base.countErr
		}
		for _, m := range []string{"syscalls", "copies"} {
			out = append(out, mk(m, m+"/op", "lower", nil, nil, why))
		}
	}
	return out
}

func (b *bench) addPages(pr []*pageResult) {
	var base *pageResult
	for _, r := range pr {
		if r.backing.PageSize() == 4096 {
			base = r
		}
	}
	for _, r := range pr {
		if r == base || r.err != nil || base == nil || base.err != nil {
			continue
		}
		for _, m := range []struct {
			name, unit string
			e, b       stat
		}{
			{"faults", "faults/GiB", r.faults, base.faults},
			{"touch_time", "ms/GiB", r.touch, base.touch},
			{"access", "ns/access", r.access, base.access},
		} {
			b.entries = append(b.entries, statEntry(entry{Name: "pages", Variant: r.backing.String(), BaselineVariant: base.backing.String(),
				Metric: m.name, Unit: m.unit, Better: "lower"}, m.e, m.b))
		}
	}
	if !b.tables() {
		return
	}
	fmt.Fprintf(b.out, "\n== pages: 1 GiB mapped, touched once per 4 KiB, then dependent random 8-byte loads\n")
	tw := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "backing\tfaults/GiB\ttouch ms/GiB\tns/random access\taccess vs 4K\t\n")
	for _, r := range pr {
		if r.err != nil {
			fmt.Fprintf(tw, "%v\terror: %s\t\t\t\t\n", r.backing, firstLine(r.err.Error()))
			continue
		}
		ratio := ""
		if base != nil && base.err == nil {
			ratio = fmt.Sprintf("%.3g×", r.access.Median/base.access.Median)
		}
		fmt.Fprintf(tw, "%v\t%s [%s–%s]\t%s [%s–%s]\t%s [%s–%s]\t%s\t\n", r.backing,
			num(r.faults.Median), num(r.faults.Min), num(r.faults.Max),
			num(r.touch.Median), num(r.touch.Min), num(r.touch.Max),
			num(r.access.Median), num(r.access.Min), num(r.access.Max), ratio)
	}
	tw.Flush()
}

func (b *bench) printSummary(gs []goal) {
	printGoals(b.out, gs, b.o.reps)
	if len(b.skipped) > 0 {
		fmt.Fprintf(b.out, "\n== Skipped, and why\n")
		for _, s := range b.skipped {
			fmt.Fprintf(b.out, "   - %s\n", s)
		}
	}
	var us []string
	for _, u := range b.m.Units {
		s := fmt.Sprintf("%s %.0f s", u.Name, u.Seconds)
		if !u.Finished {
			s += fmt.Sprintf(" (not finished; deadline %.0f s)", u.Deadline)
		}
		us = append(us, s)
	}
	fmt.Fprintf(b.out, "\nload average at end: %.2f %.2f %.2f; %.0f s (-timeout %.0f s): %s\n", b.m.LoadEnd[0], b.m.LoadEnd[1], b.m.LoadEnd[2], b.m.Seconds, b.m.Timeout, strings.Join(us, ", "))
}

func shortVariant(v string) string { return v }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// num prints a value with about four significant digits.
func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
