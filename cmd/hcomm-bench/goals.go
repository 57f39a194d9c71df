package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// goal is one target of the issues (issue 18's goals 1–5, issue 16's
// benchmark targets, and hcomm-bench's earlier ones) checked against this
// run's entries: the summary, the JSON's "goals" and the CSV's goal rows.
type goal struct {
	Issue    int      `json:"issue"` // 18, 16; 0: an earlier target of hcomm-bench
	Goal     string   `json:"goal"`  // the issue's goal number ("1" … "5"; "bench" for issue 16)
	Scenario string   `json:"scenario"`
	What     string   `json:"what"`
	Value    *float64 `json:"value"`         // the measured value (a ratio when unit is "×"); null when not measured
	Min      *float64 `json:"min,omitempty"` // its range over the repetitions (a ratio: each repetition's, paired)
	Max      *float64 `json:"max,omitempty"`
	Unit     string   `json:"unit"`
	Target   string   `json:"target"`           // e.g. "≤ 0.1×"
	Verdict  string   `json:"verdict"`          // "met", "missed", "not measured"
	Detail   string   `json:"detail,omitempty"` // what the verdict also rests on, the parts of a combined goal, or why nothing was measured
}

// limit is a target: op ("≤", "≥", "<") and the bound.
type limit struct {
	op string
	v  float64
}

func (l limit) ok(x float64) bool {
	switch l.op {
	case "≥":
		return x >= l.v
	case "<":
		return x < l.v
	}
	return x <= l.v
}

func (l limit) String(unit string) string {
	if unit == "×" {
		return fmt.Sprintf("%s %g×", l.op, l.v)
	}
	return fmt.Sprintf("%s %g %s", l.op, l.v, unit)
}

// worse says whether x is further from meeting l than y.
func (l limit) worse(x, y float64) bool {
	if l.op == "≥" {
		return x < y
	}
	return x > y
}

// ratioRange is an entry's ratio over the repetitions: each repetition's
// engine value over the same repetition's baseline value (they run
// interleaved), or, without paired runs, the extremes' ratios.
func ratioRange(e *entry) (lo, hi *float64) {
	if n := len(e.EngineRuns); n > 0 && n == len(e.BaselineRuns) {
		a, b := math.Inf(1), math.Inf(-1)
		for i := range n {
			if e.BaselineRuns[i] == 0 {
				return nil, nil
			}
			r := e.EngineRuns[i] / e.BaselineRuns[i]
			a, b = min(a, r), max(b, r)
		}
		return ptr(a), ptr(b)
	}
	if e.EngineMin != nil && e.EngineMax != nil && e.BaselineMin != nil && e.BaselineMax != nil && *e.BaselineMin > 0 && *e.BaselineMax > 0 {
		return ptr(*e.EngineMin / *e.BaselineMax), ptr(*e.EngineMax / *e.BaselineMin)
	}
	return nil, nil
}

// goals checks every goal whose scenario ran against the entries; unfinished
// names the units that did not finish (scenario, or remote/<tls>) and why,
// for the goals they leave unmeasured.
func goals(es []entry, ran map[string]bool, unfinished map[string]string) []goal {
	find := func(name, variant, base, metric string) *entry {
		for i := range es {
			e := &es[i]
			if e.Name == name && e.Variant == variant && e.BaselineVariant == base && e.Metric == metric {
				return e
			}
		}
		return nil
	}
	var out []goal
	add := func(g goal) {
		if !ran[g.Scenario] && !(g.Scenario == "idle" && ran["latency"]) {
			return
		}
		if g.Value == nil {
			u := g.Scenario
			if u == "idle" {
				u = "latency"
			}
			if tls, _, ok := strings.Cut(g.What, ":"); ok && u == "remote" {
				u = "remote/" + tls
			}
			if why, ok := unfinished[u]; ok {
				g.Detail = u + " did not finish: " + why
			}
		}
		out = append(out, g)
	}
	notMeasured := func(g goal, why string) goal {
		g.Verdict, g.Detail = "not measured", why
		return g
	}
	// ratio: the entry's ratio against l.
	ratio := func(issue int, num, scen, what string, e *entry, l limit, detail string) goal {
		g := goal{Issue: issue, Goal: num, Scenario: scen, What: what, Unit: "×", Target: l.String("×")}
		switch {
		case e == nil:
			return notMeasured(g, "no such measurement in this run")
		case e.Ratio == nil:
			return notMeasured(g, e.Note)
		}
		g.Value = e.Ratio
		g.Min, g.Max = ratioRange(e)
		g.Verdict = verdict(l.ok(*e.Ratio))
		g.Detail = detail
		return g
	}
	// count: the engine's own value (a count per op, one traced run).
	count := func(issue int, num, scen, what string, e *entry, l limit, unit, detail string) goal {
		g := goal{Issue: issue, Goal: num, Scenario: scen, What: what, Unit: unit, Target: l.String(unit)}
		switch {
		case e == nil:
			return notMeasured(g, "no such measurement in this run")
		case e.Engine == nil:
			return notMeasured(g, e.Note)
		}
		g.Value = e.Engine
		g.Verdict = verdict(l.ok(*e.Engine))
		g.Detail = detail
		return g
	}
	// worst: several measurements under one target; the value is the
	// furthest from it, met only when every part is.
	type part struct {
		label string
		e     *entry
	}
	worst := func(issue int, num, scen, what string, parts []part, l limit) goal {
		g := goal{Issue: issue, Goal: num, Scenario: scen, What: what, Unit: "×", Target: l.String("×")}
		var ds []string
		all := true
		var w *entry
		for _, p := range parts {
			if p.e == nil || p.e.Ratio == nil {
				all = false
				why := "not measured"
				if p.e != nil && p.e.Note != "" {
					why += ": " + firstLine(p.e.Note)
				}
				ds = append(ds, p.label+" "+why)
				continue
			}
			s := fmt.Sprintf("%s %.3g×", p.label, *p.e.Ratio)
			if lo, hi := ratioRange(p.e); lo != nil {
				s += fmt.Sprintf(" [%.3g–%.3g]", *lo, *hi)
			}
			ds = append(ds, s)
			if !l.ok(*p.e.Ratio) {
				all = false
			}
			if w == nil || l.worse(*p.e.Ratio, *w.Ratio) {
				w = p.e
			}
		}
		g.Detail = strings.Join(ds, "; ")
		if w == nil {
			if len(parts) == 0 {
				g.Detail = "no such measurement in this run"
			}
			g.Verdict = "not measured"
			return g
		}
		g.Value = w.Ratio
		g.Min, g.Max = ratioRange(w)
		g.Verdict = verdict(all)
		if all {
			return g
		}
		for _, p := range parts {
			if p.e == nil || p.e.Ratio == nil {
				g.Verdict = "missed (parts not measured)"
				if l.ok(*w.Ratio) {
					return g
				}
			}
		}
		g.Verdict = "missed"
		return g
	}

	// Issue 18, goal 1: the file backend against fio io_uring, both modes.
	modes := []struct{ v, label string }{{"engine", "poll mode"}, {"engine-reaper", "default (reaper) mode"}}
	for _, op := range fileOps {
		for _, m := range modes {
			add(ratio(18, "1", "file-4k", fmt.Sprintf("file 4 KiB %s, %s: IOPS ÷ fio io_uring", op, m.label),
				find("file-4k", op+"/"+m.v, op+"/fio-io_uring", "iops"), limit{"≥", 1}, ""))
		}
	}
	for _, op := range fileOps {
		for _, m := range modes {
			e := find("file-4k", op+"/"+m.v, op+"/fio-io_uring", "syscalls")
			d := ""
			if e != nil && e.Baseline != nil {
				d = fmt.Sprintf("fio io_uring: %.3f", *e.Baseline)
				if f, ok := e.EngineByName["futex"]; ok {
					d += fmt.Sprintf("; engine futex %.4f", f)
				}
			}
			add(count(18, "1", "file-4k", fmt.Sprintf("file 4 KiB %s, %s: syscalls per I/O (eBPF)", op, m.label), e, limit{"≤", 1.0 / 32}, "/I/O", d))
		}
	}
	// Goal 2: the device path's overhead, the device model inline.
	// Engine against the bare driver: with the device model inline and
	// poll mode, each side's whole path runs on one OS thread, and that
	// thread's CPU time is the cost the goal is about; wall time (shown in
	// the detail) also carries whatever else the shared machine ran.
	vsDriver := func(batch int, lim float64) goal {
		v, b := fmt.Sprintf("4096-inline/engine-b%d", batch), fmt.Sprintf("4096-inline/floor-driver-b%d", batch)
		label := fmt.Sprintf("device 4 KiB batch %d, inline: engine ÷ bare HDMA driver, CPU time of the thread", batch)
		e, wall := find("device-small", v, b, "thread_cpu"), find("device-small", v, b, "time")
		if e == nil {
			e = wall
			label = fmt.Sprintf("device 4 KiB batch %d, inline: engine ÷ bare HDMA driver, wall time", batch)
		}
		g := ratio(18, "2", "device-small", label, e, limit{"≤", lim}, "")
		if e != wall && e != nil && e.Engine != nil && e.Baseline != nil {
			g.Detail = fmt.Sprintf("CPU ns per transfer %.0f vs %.0f", *e.Engine, *e.Baseline)
			if wall != nil && wall.Ratio != nil {
				g.Detail += fmt.Sprintf("; wall time ÷ driver %.3g×", *wall.Ratio)
			}
		}
		return g
	}
	add(vsDriver(64, 1.25))
	add(ratio(18, "2", "device-small", "device 4 KiB batch 64, inline: engine ÷ traditional",
		find("device-small", "4096-inline/engine-b64", "4096-inline/traditional", "time"), limit{"≤", 0.10}, ""))
	add(vsDriver(1, 2))
	// Goal 3: latency of one synchronous transfer, default mode.
	add(ratio(18, "3", "latency", "sync 4 KiB host→device, default mode: p50 ÷ traditional",
		find("latency", "traditional→engine", "traditional", "p50"), limit{"≤", 0.1}, ""))
	add(ratio(18, "3", "latency", "sync 4 KiB host→device, default mode: p99 ÷ traditional",
		find("latency", "traditional→engine", "traditional", "p99"), limit{"≤", 0.33}, ""))
	add(ratio(18, "3", "latency", "sync 4 KiB O_DIRECT read, default mode: p50 ÷ ReadAt",
		find("latency", "readat→engine", "readat", "p50"), limit{"≤", 1.1}, ""))
	// Goal 4: CPU per I/O against fio at equal or better IOPS; idle cost.
	for _, op := range fileOps {
		for _, m := range modes {
			e := find("file-4k", op+"/"+m.v, op+"/fio-io_uring", "cpu")
			io := find("file-4k", op+"/"+m.v, op+"/fio-io_uring", "iops")
			g := ratio(18, "4", "file-4k", fmt.Sprintf("file 4 KiB %s, %s: CPU per I/O ÷ fio io_uring, at IOPS ≥ fio's", op, m.label), e, limit{"≤", 0.5}, "")
			if g.Value != nil {
				g.Detail = fmt.Sprintf("CPU µs per I/O %.3g vs fio %.3g", *e.Engine/1e3, *e.Baseline/1e3)
				switch {
				case io == nil || io.Ratio == nil:
					g.Verdict = "not measured"
					g.Detail += "; IOPS not measured"
				default:
					g.Detail += fmt.Sprintf("; IOPS ÷ fio %.3g×", *io.Ratio)
					if g.Verdict == "met" && *io.Ratio < 1 {
						g.Verdict = "missed"
						g.Detail += " (the CPU is, but at fewer IOPS than fio)"
					}
				}
			}
			add(g)
		}
	}
	add(count(18, "4", "idle", "idle engine, default mode: % of one CPU", find("idle", "engine-reaper", "", "cpu_percent"), limit{"<", 1}, "%", "process CPU over 1 s after traffic stopped"))
	// Goal 5: memory footprint.
	for _, n := range footprintNs {
		add(ratio(18, "5", "footprint", fmt.Sprintf("RSS with %d reads in flight: engine ÷ a buffer per request", n),
			find("footprint", fmt.Sprintf("inflight=%d/engine", n), fmt.Sprintf("inflight=%d/traditional", n), "rss"), limit{"≤", 1}, ""))
	}
	// Issue 16: remote, per transport.
	for _, t := range []string{"tcp", "shm"} {
		scen := "remote"
		var pt, sock []part
		for i := range es {
			e := &es[i]
			f := strings.Split(e.Variant, "/")
			if e.Name != "remote" || e.Metric != "bandwidth" || len(f) != 5 || f[0] != t || f[1] != "put" {
				continue
			}
			size, _ := strconv.Atoi(f[2])
			if size < 64<<10 {
				continue
			}
			label := sizeName(size) + " " + f[3]
			if strings.HasSuffix(e.BaselineVariant, "/ucx_perftest") {
				pt = append(pt, part{label, e})
			} else {
				sock = append(sock, part{label, e})
			}
		}
		add(worst(16, "bench", scen, t+": put bandwidth at ≥ 64 KiB ÷ ucx_perftest (worst size/batch)", pt, limit{"≥", 0.9}))
		// Against the socket, the detail also says where UCX itself
		// (ucx_perftest, same run) stands against it.
		gs := worst(16, "bench", scen, t+": put bandwidth at ≥ 64 KiB ÷ TCP socket (worst size/batch)", sock, limit{"≥", 1})
		var vs []string
		for _, q := range sock {
			for _, r := range pt {
				if r.label == q.label && q.e != nil && r.e != nil && q.e.Baseline != nil && r.e.Baseline != nil && *q.e.Baseline > 0 {
					vs = append(vs, fmt.Sprintf("%s %.3g×", q.label, *r.e.Baseline / *q.e.Baseline))
				}
			}
		}
		if len(vs) > 0 {
			gs.Detail += "; ucx_perftest ÷ socket: " + strings.Join(vs, "; ")
		}
		add(gs)
		add(ratio(16, "bench", scen, t+": 8 B put latency ÷ ucx_perftest's", find("remote", t+"/put-latency/8/engine", t+"/put-latency/8/ucx_perftest", "latency"), limit{"≤", 1.5}, ""))
		gl := ratio(16, "bench", scen, t+": 8 B put latency ÷ TCP socket's", find("remote", t+"/put-latency/8/engine", t+"/put-latency/8/tcp-socket", "latency"), limit{"≤", 1}, "")
		if p, q := find("remote", t+"/put-latency/8/engine", t+"/put-latency/8/ucx_perftest", "latency"), find("remote", t+"/put-latency/8/engine", t+"/put-latency/8/tcp-socket", "latency"); p != nil && q != nil && p.Baseline != nil && q.Baseline != nil && *q.Baseline > 0 {
			gl.Detail = strings.TrimPrefix(gl.Detail+fmt.Sprintf("; ucx_perftest ÷ socket %.3g×", *p.Baseline / *q.Baseline), "; ")
		}
		add(gl)
	}
	// hcomm-bench's earlier targets.
	add(ratio(0, "", "device-small", "device 4 KiB batch 64, device model on its own thread: engine ÷ traditional",
		find("device-small", "4096/engine-b64", "4096/traditional", "time"), limit{"≤", 0.10}, ""))
	add(count(0, "", "device-small", "device 4 KiB batch 64: syscalls per transfer", find("device-small", "4096/engine-b64", "4096/traditional", "syscalls"), limit{"<", 0.005}, "/op", ""))
	add(count(0, "", "device-small", "device 4 KiB batch 64: CPU copies per transfer", find("device-small", "4096/engine-b64", "4096/traditional", "copies"), limit{"<", 0.005}, "/op", ""))
	for _, op := range fileOps {
		at := atName(op)
		for _, m := range modes {
			add(ratio(0, "", "file-4k", fmt.Sprintf("file 4 KiB %s, %s: IOPS ÷ %s O_DIRECT, 64 goroutines", op, m.label, at),
				find("file-4k", op+"/"+m.v, op+"/"+at+"-direct-g64", "iops"), limit{"≥", 3}, ""))
		}
	}
	for _, s := range bulkSizes {
		l := sizeLabel(s)
		add(ratio(0, "", "bulk", "bulk "+l+" host→host: engine ÷ copy()", find("bulk", "memory-"+l+"/engine", "memory-"+l+"/copy", "bandwidth"), limit{"≥", 0.9}, ""))
		add(ratio(0, "", "bulk", "bulk "+l+" host→device, inline: engine ÷ copy()", find("bulk", "device-"+l+"-inline/engine", "device-"+l+"-inline/copy", "bandwidth"), limit{"≥", 0.9}, ""))
	}
	return out
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// goalTitles head the summary's groups.
var goalTitles = map[string]string{
	"18/1":     "issue 18, goal 1: the file backend ≥ fio io_uring's IOPS and ≤ 1/32 syscalls per I/O, in both modes",
	"18/2":     "issue 18, goal 2: the device path's overhead, device model inline (the whole path's CPU cost)",
	"18/3":     "issue 18, goal 3: latency of one synchronous 4 KiB transfer (Submit then Wait), default mode",
	"18/4":     "issue 18, goal 4: CPU — ≤ 0.5× fio's CPU per I/O at equal or better IOPS; the idle engine < 1% of a CPU",
	"18/5":     "issue 18, goal 5: memory footprint with N reads in flight (no fixed target in the issue: ≤ 1× a buffer per request)",
	"16/bench": "issue 16: remote over UCX — put bandwidth ≥ 0.9× ucx_perftest at ≥ 64 KiB, 8 B latency ≤ 1.5× its, both ≥ the TCP socket",
	"0/":       "earlier targets of hcomm-bench",
}

// printGoals prints the goals grouped by issue and goal, with their
// ratios' ranges, targets and verdicts, and a count of each verdict.
func printGoals(w io.Writer, gs []goal, reps int) {
	fmt.Fprintf(w, "\n== Goals, from this run (ratio = engine ÷ baseline; [range] = each of the %d repetitions' own ratio)\n", reps)
	key := ""
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	n := map[string]int{}
	for _, g := range gs {
		k := fmt.Sprintf("%d/%s", g.Issue, g.Goal)
		if k != key {
			tw.Flush()
			key = k
			fmt.Fprintf(w, "\n   %s\n", goalTitles[k])
		}
		v := "—"
		if g.Value != nil {
			v = fmt.Sprintf("%.4g", *g.Value)
			if g.Unit == "×" {
				v += "×"
			} else {
				v += " " + g.Unit
			}
			if g.Min != nil && g.Max != nil {
				v += fmt.Sprintf(" [%.3g–%.3g]", *g.Min, *g.Max)
			}
		}
		verd := g.Verdict
		if strings.HasPrefix(verd, "missed") {
			verd = strings.Replace(verd, "missed", "MISSED", 1)
		}
		fmt.Fprintf(tw, "   %s\t%s\twant %s\t%s\t%s\n", g.What, v, g.Target, verd, g.Detail)
		switch {
		case strings.HasPrefix(g.Verdict, "missed"):
			n["missed"]++
		default:
			n[g.Verdict]++
		}
	}
	tw.Flush()
	if len(gs) > 0 {
		fmt.Fprintf(w, "\n   issue 18, goal 6 (code complexity) is text: BENCHMARKS.md, \"Code complexity\"\n")
	}
	fmt.Fprintf(w, "   %d met, %d missed, %d not measured\n", n["met"], n["missed"], n["not measured"])
}

// remoteEntries turns the remote scenario's rows into entries: bandwidth
// ("<tls>/<op>/<size>/b<batch>/engine" against "<tls>/<op>/<size>/ucx_perftest"
// and "<tls>/<op>/<size>/b<batch>/tcp-socket", MiB/s) and the 8 B latency
// ("<tls>/put-latency/8/engine" against ".../ucx_perftest" and
// ".../tcp-socket", µs), each overall (bytes ÷ wall time, wall time ÷ round
// trips: what the goals use, as ucx_perftest's overall figures) and typical
// (metric "…_typical": the median per-operation figure).
func remoteEntries(rows []*remoteRow) []entry {
	var out []entry
	for _, r := range rows {
		metric, better, op := "bandwidth", "higher", r.op
		var v, pt, sock string
		if r.unit == "µs" {
			metric, better, op = "latency", "lower", "put-latency"
			v = fmt.Sprintf("%s/%s/%d/engine", r.tls, op, r.size)
			pt = fmt.Sprintf("%s/%s/%d/ucx_perftest", r.tls, op, r.size)
			sock = fmt.Sprintf("%s/%s/%d/tcp-socket", r.tls, op, r.size)
		} else {
			v = fmt.Sprintf("%s/%s/%d/b%d/engine", r.tls, op, r.size, r.batch)
			pt = fmt.Sprintf("%s/%s/%d/ucx_perftest", r.tls, op, r.size)
			sock = fmt.Sprintf("%s/%s/%d/b%d/tcp-socket", r.tls, op, r.size, r.batch)
		}
		for _, base := range []struct {
			name, metric string
			eng, runs    []float64
			err          string
		}{{pt, metric, r.eng, r.pt, r.ptErr}, {sock, metric, r.eng, r.sock, ""},
			{pt, metric + "_typical", r.engT, r.ptT, r.ptErr}, {sock, metric + "_typical", r.engT, r.sockT, ""}} {
			if strings.HasSuffix(base.metric, "_typical") && len(base.eng) == 0 {
				continue
			}
			x := entry{Name: "remote", Variant: v, BaselineVariant: base.name, Metric: base.metric, Unit: r.unit, Better: better, Runs: len(base.eng)}
			es, bs := newStat(base.eng), newStat(base.runs)
			switch {
			case r.err != "" && len(base.eng) == 0:
				x.Note = "engine failed: " + firstLine(r.err)
			case len(base.eng) == 0:
				x.Note = "engine not measured"
			case len(base.runs) == 0:
				x.Engine = ptr(es.Median)
				x.Note = "baseline not measured"
				if base.err != "" {
					x.Note += ": " + firstLine(base.err)
				}
			default:
				x.Engine, x.Baseline = ptr(es.Median), ptr(bs.Median)
				if bs.Median != 0 {
					x.Ratio = ptr(es.Median / bs.Median)
				}
				x.EngineMin, x.EngineMax, x.BaselineMin, x.BaselineMax = ptr(es.Min), ptr(es.Max), ptr(bs.Min), ptr(bs.Max)
				x.EngineRuns, x.BaselineRuns = es.Runs, bs.Runs
				if r.err != "" {
					x.Note = "some repetitions failed: " + firstLine(r.err)
				}
			}
			out = append(out, x)
		}
	}
	return out
}
