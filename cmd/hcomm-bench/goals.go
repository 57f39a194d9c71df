package main

import (
	"fmt"
	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// goal is one goal of goalTable judged against this run's entries: the
// summary, the JSON's "goals" and the CSV's goal rows.
type goal struct {
	ID       string   `json:"id"`    // stable, names what is measured: "file.randread.iops_vs_fio.poll"
	Group    string   `json:"group"` // a key of goalGroups
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

// ref names one entry: scenario, variant, baseline variant, metric.
type ref struct{ name, variant, base, metric string }

// entries finds the entry a ref names.
type entries []entry

func (es entries) find(r ref) *entry {
	for i := range es {
		e := &es[i]
		if e.Name == r.name && e.Variant == r.variant && e.BaselineVariant == r.base && e.Metric == r.metric {
			return e
		}
	}
	return nil
}

// part is one measurement of a combined goal.
type part struct {
	label string
	e     *entry
}

// goalSpec is one goal as data: what it measures, on which entry, and its
// target. The generic code (goals) judges every spec the same way: a ratio
// (Unit "×") on the entry's ratio, a count on the engine's own value, a
// combined goal (Parts) on its worst part; Amend adds what one goal's
// verdict also rests on.
type goalSpec struct {
	ID       string // stable: <scenario>.<what>.<measure>_vs_<peer>[.<mode>]
	Group    string // a key of goalGroups
	Scenario string // the scenario that measures it
	What     string
	Unit     string // "×" for a ratio; else the unit of a count
	Limit    limit
	Ref      ref    // the measurement
	Alt      *ref   // measured instead when Ref is not (What becomes AltWhat)
	AltWhat  string // see Alt
	Detail   string // a fixed detail, shown when measured
	// Parts: the measurements of a combined goal (Ref unused).
	Parts func(es entries) []part
	// Amend: a goal's extra detail or verdict condition.
	Amend func(g *goal, s goalSpec, es entries)
}

// goalGroups head the summary's groups, in order.
var goalGroups = []struct{ key, title string }{
	{"file", "the file backend against fio io_uring: ≥ its IOPS and ≤ 1/32 system calls per I/O, in both modes"},
	{"file-stable", "the file backend against fio io_uring on the stable device (a loop device with direct I/O over tmpfs: the CPU's speed, not a disk's): ≥ its IOPS, ≤ 0.5× its CPU per I/O, ≤ 1/32 system calls per I/O"},
	{"device", "the device path's overhead, device model inline (the whole path's CPU cost)"},
	{"latency", "latency of one synchronous 4 KiB transfer (Submit then Wait), default mode"},
	{"cpu", "CPU: ≤ 0.5× fio's CPU per I/O at equal or better IOPS; the idle engine < 1% of a CPU"},
	{"footprint", "memory footprint with N reads in flight: ≤ 1× a buffer per request"},
	{"remote", "remote over UCX: put bandwidth ≥ 0.9× ucx_perftest at ≥ 64 KiB, 8 B latency ≤ 1.5× its, both ≥ the TCP socket"},
	{"pipeline", "paths in one Copy: O_DIRECT file → device memory at ≥ 0.9× fio's read bandwidth, ≤ 0.3× the traditional way's host CPU, no CPU copy, bounded memory; device memory → a peer at ≥ 0.9× the bandwidth of two engines chained by hand, ≤ 1.1× their host CPU"},
	{"grow", "registration and growth: the pool growing by 1 GiB, prefaulted and mapped into each backend, within 1.2× of the bare system calls doing the same"},
	{"traditional", "against the traditional path, concurrent O_DIRECT calls and Go's copy()"},
}

func groupTitle(key string) string {
	for _, g := range goalGroups {
		if g.key == key {
			return g.title
		}
	}
	return key
}

// fileModes are the engine's two modes in the file goals: variant suffix,
// ID suffix, label.
var fileModes = []struct{ v, id, label string }{
	{"engine", "poll", "poll mode"},
	{"engine-reaper", "default", "default (reaper) mode"},
}

// goalTable is every goal, in the summary's order.
func goalTable() []goalSpec {
	var t []goalSpec
	fileRef := func(op, v, base, metric string) ref { return ref{"file-4k", op + "/" + v, op + "/" + base, metric} }
	for _, op := range fileOps {
		for _, m := range fileModes {
			t = append(t, goalSpec{ID: "file." + op + ".iops_vs_fio." + m.id, Group: "file", Scenario: "file-4k",
				What: fmt.Sprintf("file 4 KiB %s, %s: IOPS ÷ fio io_uring", op, m.label), Unit: "×", Limit: limit{"≥", 1},
				Ref: fileRef(op, m.v, "fio-io_uring", "iops")})
		}
	}
	for _, op := range fileOps {
		for _, m := range fileModes {
			t = append(t, goalSpec{ID: "file." + op + ".syscalls_per_io." + m.id, Group: "file", Scenario: "file-4k",
				What: fmt.Sprintf("file 4 KiB %s, %s: syscalls per I/O (eBPF)", op, m.label), Unit: "/I/O", Limit: limit{"≤", 1.0 / 32},
				Ref: fileRef(op, m.v, "fio-io_uring", "syscalls"), Amend: amendSyscalls})
		}
	}
	for _, op := range fileOps {
		for _, m := range fileModes {
			sref := func(metric string) ref { return fileRef(stablePrefix+op, m.v, "fio-io_uring", metric) }
			what := fmt.Sprintf("4 KiB %s on the stable device, %s: ", op, m.label)
			t = append(t,
				goalSpec{ID: "file.stable_" + op + ".iops_vs_fio." + m.id, Group: "file-stable", Scenario: "file-4k",
					What: what + "IOPS ÷ fio io_uring", Unit: "×", Limit: limit{"≥", 1}, Ref: sref("iops")},
				goalSpec{ID: "file.stable_" + op + ".cpu_per_io_vs_fio." + m.id, Group: "file-stable", Scenario: "file-4k",
					What: what + "CPU per I/O ÷ fio io_uring, at IOPS ≥ fio's", Unit: "×", Limit: limit{"≤", 0.5}, Ref: sref("cpu"), Amend: amendCPUFloor},
				goalSpec{ID: "file.stable_" + op + ".syscalls_per_io." + m.id, Group: "file-stable", Scenario: "file-4k",
					What: what + "syscalls per I/O (eBPF)", Unit: "/I/O", Limit: limit{"≤", 1.0 / 32}, Ref: sref("syscalls"), Amend: amendSyscalls})
		}
	}
	t = append(t, driverGoal(64, 1.10),
		goalSpec{ID: "device.b64_inline.time_vs_traditional", Group: "device", Scenario: "device-small",
			What: "device 4 KiB batch 64, inline: engine ÷ traditional", Unit: "×", Limit: limit{"≤", 0.10},
			Ref: ref{"device-small", "4096-inline/engine-b64", "4096-inline/traditional", "time"}},
		driverGoal(1, 1.5))
	t = append(t, latencyGoals()...)
	t = append(t,
		goalSpec{ID: "latency.read_4k.p50_vs_readat", Group: "latency", Scenario: "latency",
			What: "sync 4 KiB O_DIRECT read, default mode: p50 ÷ ReadAt", Unit: "×", Limit: limit{"≤", 1.1},
			Ref: ref{"latency", "readat→engine", "readat", "p50"}})
	for _, op := range fileOps {
		for _, m := range fileModes {
			t = append(t, goalSpec{ID: "file." + op + ".cpu_per_io_vs_fio." + m.id, Group: "cpu", Scenario: "file-4k",
				What: fmt.Sprintf("file 4 KiB %s, %s: CPU per I/O ÷ fio io_uring, at IOPS ≥ fio's", op, m.label), Unit: "×", Limit: limit{"≤", 0.5},
				Ref: fileRef(op, m.v, "fio-io_uring", "cpu"), Amend: amendCPUAtIOPS})
		}
	}
	t = append(t, goalSpec{ID: "idle.cpu_percent", Group: "cpu", Scenario: "idle",
		What: "idle engine, default mode: % of one CPU", Unit: "%", Limit: limit{"<", 1},
		Ref: ref{"idle", "engine-reaper", "", "cpu_percent"}, Detail: "process CPU over 1 s after traffic stopped"})
	for _, n := range footprintNs {
		t = append(t, goalSpec{ID: fmt.Sprintf("footprint.inflight_%d.rss_vs_buffer_per_request", n), Group: "footprint", Scenario: "footprint",
			What: fmt.Sprintf("RSS with %d reads in flight: engine ÷ a buffer per request", n), Unit: "×", Limit: limit{"≤", 1},
			Ref: ref{"footprint", fmt.Sprintf("inflight=%d/engine", n), fmt.Sprintf("inflight=%d/traditional", n), "rss"}})
	}
	for _, tls := range []string{"tcp", vethTLS, "shm"} {
		t = append(t, remoteGoals(tls)...)
	}
	t = append(t, pipelineGoals()...)
	t = append(t, growGoals()...)
	t = append(t,
		goalSpec{ID: "device.b64.time_vs_traditional", Group: "traditional", Scenario: "device-small",
			What: "device 4 KiB batch 64, device model on its own thread: engine ÷ traditional", Unit: "×", Limit: limit{"≤", 0.10},
			Ref: ref{"device-small", "4096/engine-b64", "4096/traditional", "time"}},
		goalSpec{ID: "device.b64.syscalls_per_op", Group: "traditional", Scenario: "device-small",
			What: "device 4 KiB batch 64: syscalls per transfer", Unit: "/op", Limit: limit{"<", 0.005},
			Ref: ref{"device-small", "4096/engine-b64", "4096/traditional", "syscalls"}},
		goalSpec{ID: "device.b64.copies_per_op", Group: "traditional", Scenario: "device-small",
			What: "device 4 KiB batch 64: CPU copies per transfer", Unit: "/op", Limit: limit{"<", 0.005},
			Ref: ref{"device-small", "4096/engine-b64", "4096/traditional", "copies"}})
	for _, op := range fileOps {
		at := atName(op)
		for _, m := range fileModes {
			t = append(t, goalSpec{ID: "file." + op + ".iops_vs_" + at + "_g64." + m.id, Group: "traditional", Scenario: "file-4k",
				What: fmt.Sprintf("file 4 KiB %s, %s: IOPS ÷ %s O_DIRECT, 64 goroutines", op, m.label, at), Unit: "×", Limit: limit{"≥", 3},
				Ref: fileRef(op, m.v, at+"-direct-g64", "iops")})
		}
	}
	for _, s := range bulkSizes {
		l := sizeLabel(s)
		t = append(t,
			goalSpec{ID: "bulk." + l + ".host_to_host_vs_copy", Group: "traditional", Scenario: "bulk",
				What: "bulk " + l + " host→host: engine ÷ copy()", Unit: "×", Limit: limit{"≥", 0.9},
				Ref: ref{"bulk", "memory-" + l + "/engine", "memory-" + l + "/copy", "bandwidth"}},
			goalSpec{ID: "bulk." + l + ".host_to_device_inline_vs_copy", Group: "traditional", Scenario: "bulk",
				What: "bulk " + l + " host→device, inline: engine ÷ copy()", Unit: "×", Limit: limit{"≥", 0.9},
				Ref: ref{"bulk", "device-" + l + "-inline/engine", "device-" + l + "-inline/copy", "bandwidth"}})
	}
	return t
}

// latencyGoals: one synchronous 4 KiB host→device transfer in the default
// mode against the traditional path, by the CPU path (p50 ≤ 0.1×) and by
// DMA (p50 ≤ 0.33×), p99 ≤ 0.33× for both; with the machine idle and with
// a CPU-bound process on the other vCPU ("loaded").
func latencyGoals() []goalSpec {
	var t []goalSpec
	for _, load := range []struct{ prefix, id, label string }{{"", "", ""}, {loadedPrefix, "loaded.", ", other vCPU busy"}} {
		for _, path := range []struct {
			variant, id, label string
			p50                float64
		}{{"engine", "h2d_4k", "CPU path", 0.1}, {"engine-dma", "h2d_4k_dma", "DMA", 0.33}} {
			for _, q := range []struct {
				name string
				lim  float64
			}{{"p50", path.p50}, {"p99", 0.33}} {
				t = append(t, goalSpec{ID: "latency." + load.id + path.id + "." + q.name + "_vs_traditional", Group: "latency", Scenario: "latency",
					What: fmt.Sprintf("sync 4 KiB host→device, default mode, %s%s: %s ÷ traditional", path.label, load.label, q.name), Unit: "×", Limit: limit{"≤", q.lim},
					Ref: ref{"latency", load.prefix + "traditional→" + path.variant, load.prefix + "traditional", q.name}})
			}
		}
	}
	return t
}

// driverGoal: the engine against the bare driver, device model inline. With
// the device model inline and poll mode, each side's whole path runs on one
// OS thread, and that thread's CPU time is the cost the goal is about; wall
// time (in the detail) also carries whatever else the machine ran, and is
// the measure only when the run has no thread CPU time.
func driverGoal(batch int, lim float64) goalSpec {
	v, b := fmt.Sprintf("4096-inline/engine-b%d", batch), fmt.Sprintf("4096-inline/floor-driver-b%d", batch)
	wall := ref{"device-small", v, b, "time"}
	label := fmt.Sprintf("device 4 KiB batch %d, inline: engine ÷ bare HDMA driver, ", batch)
	return goalSpec{ID: fmt.Sprintf("device.b%d_inline.cpu_vs_driver", batch), Group: "device", Scenario: "device-small",
		What: label + "CPU time of the thread", Unit: "×", Limit: limit{"≤", lim},
		Ref: ref{"device-small", v, b, "thread_cpu"}, Alt: &wall, AltWhat: label + "wall time",
		Amend: func(g *goal, _ goalSpec, es entries) {
			e := es.find(ref{"device-small", v, b, "thread_cpu"})
			if e == nil || e.Engine == nil || e.Baseline == nil || g.Value == nil {
				return
			}
			g.Detail = fmt.Sprintf("CPU ns per transfer %.0f vs %.0f", *e.Engine, *e.Baseline)
			if w := es.find(wall); w != nil && w.Ratio != nil {
				g.Detail += fmt.Sprintf("; wall time ÷ driver %.3g×", *w.Ratio)
			}
		}}
}

// amendSyscalls adds fio's count and the engine's futex calls.
func amendSyscalls(g *goal, s goalSpec, es entries) {
	e := es.find(s.Ref)
	if g.Value == nil || e == nil || e.Baseline == nil {
		return
	}
	g.Detail = fmt.Sprintf("fio io_uring: %.3f", *e.Baseline)
	if f, ok := e.EngineByName["futex"]; ok {
		g.Detail += fmt.Sprintf("; engine futex %.4f", f)
	}
}

// amendCPUAtIOPS: the CPU goal is met only at IOPS ≥ fio's.
func amendCPUAtIOPS(g *goal, s goalSpec, es entries) {
	if g.Value == nil {
		return
	}
	r := s.Ref
	e := es.find(r)
	g.Detail = fmt.Sprintf("CPU µs per I/O %.3g vs fio %.3g", *e.Engine/1e3, *e.Baseline/1e3)
	r.metric = "iops"
	io := es.find(r)
	if io == nil || io.Ratio == nil {
		g.Verdict = "not measured"
		g.Detail += "; IOPS not measured"
		return
	}
	g.Detail += fmt.Sprintf("; IOPS ÷ fio %.3g×", *io.Ratio)
	if g.Verdict == "met" && *io.Ratio < 1 {
		g.Verdict = "missed"
		g.Detail += " (the CPU is, but at fewer IOPS than fio)"
	}
}

// amendCPUFloor is amendCPUAtIOPS with the floor beside it: the bare
// io_uring loop on the same device in the same run (a baseline of the
// table, so an entry of the engine against it), the least CPU per I/O any
// io_uring program reaches there, as a ratio to fio's, and the engine's
// CPU per I/O ÷ the floor's.
func amendCPUFloor(g *goal, s goalSpec, es entries) {
	amendCPUAtIOPS(g, s, es)
	f := s.Ref
	f.base = f.variant[:strings.LastIndex(f.variant, "/")+1] + "floor-uring"
	e, fl := es.find(s.Ref), es.find(f)
	if e == nil || fl == nil || e.Baseline == nil || fl.Baseline == nil || fl.Ratio == nil || *e.Baseline == 0 {
		return
	}
	g.Detail = strings.TrimPrefix(g.Detail+fmt.Sprintf("; the floor (a bare io_uring loop) %.3g µs per I/O, %.3g× fio; the engine %.3g× the floor", *fl.Baseline/1e3, *fl.Baseline / *e.Baseline, *fl.Ratio), "; ")
}

// remoteGoals: put bandwidth at ≥ 64 KiB (every size and batch, judged on
// the worst) and the 8 B put latency, against ucx_perftest and the TCP
// socket, over one UCX transport. Over UCX's tcp transport the socket is
// a row of the tables, not a goal: UCX's tcp put is software RMA over that
// same kind of socket (an active message the peer's progress copies into
// place), and ucx_perftest itself, on the same transport in the same run,
// does not reach the socket either (both stand against it in the tables);
// the goals there are ucx_perftest's.
func remoteGoals(tls string) []goalSpec {
	lat := func(peer string) ref {
		return ref{"remote", tls + "/put-latency/8/engine", tls + "/put-latency/8/" + peer, "latency"}
	}
	gs := remoteGoalSpecs(tls, lat)
	if tls == vethTLS {
		// Over the veth pair the scenario measures puts at ≥ 64 KiB only:
		// the bandwidth goal, judged on a device between two network
		// stacks rather than loopback alone.
		return gs[:1]
	}
	if tls != "tcp" {
		return gs
	}
	kept := gs[:0]
	for _, g := range gs {
		if !strings.HasSuffix(g.ID, "_vs_socket") {
			kept = append(kept, g)
		}
	}
	return kept
}

// remoteGoalSpecs is remoteGoals' every goal of tls, the socket's included.
func remoteGoalSpecs(tls string, lat func(peer string) ref) []goalSpec {
	return []goalSpec{
		{ID: "remote." + tls + ".put_bandwidth_vs_ucx_perftest", Group: "remote", Scenario: "remote",
			What: tls + ": put bandwidth at ≥ 64 KiB ÷ ucx_perftest (worst size/batch)", Unit: "×", Limit: limit{"≥", 0.9},
			Parts: func(es entries) []part { return remoteParts(es, tls, "/ucx_perftest") }},
		{ID: "remote." + tls + ".put_bandwidth_vs_socket", Group: "remote", Scenario: "remote",
			What: tls + ": put bandwidth at ≥ 64 KiB ÷ TCP socket (worst size/batch)", Unit: "×", Limit: limit{"≥", 1},
			Parts: func(es entries) []part { return remoteParts(es, tls, "/tcp-socket") },
			// The detail also says where UCX itself (ucx_perftest, same
			// run) stands against the socket.
			Amend: func(g *goal, _ goalSpec, es entries) {
				var vs []string
				for _, q := range remoteParts(es, tls, "/tcp-socket") {
					for _, r := range remoteParts(es, tls, "/ucx_perftest") {
						if r.label == q.label && q.e.Baseline != nil && r.e.Baseline != nil && *q.e.Baseline > 0 {
							vs = append(vs, fmt.Sprintf("%s %.3g×", q.label, *r.e.Baseline / *q.e.Baseline))
						}
					}
				}
				if len(vs) > 0 {
					g.Detail += "; ucx_perftest ÷ socket: " + strings.Join(vs, "; ")
				}
			}},
		{ID: "remote." + tls + ".put_latency_8b_vs_ucx_perftest", Group: "remote", Scenario: "remote",
			What: tls + ": 8 B put latency ÷ ucx_perftest's", Unit: "×", Limit: limit{"≤", 1.5}, Ref: lat("ucx_perftest")},
		{ID: "remote." + tls + ".put_latency_8b_vs_socket", Group: "remote", Scenario: "remote",
			What: tls + ": 8 B put latency ÷ TCP socket's", Unit: "×", Limit: limit{"≤", 1}, Ref: lat("tcp-socket"),
			Amend: func(g *goal, _ goalSpec, es entries) {
				p, q := es.find(lat("ucx_perftest")), es.find(lat("tcp-socket"))
				if p != nil && q != nil && p.Baseline != nil && q.Baseline != nil && *q.Baseline > 0 {
					g.Detail = strings.TrimPrefix(g.Detail+fmt.Sprintf("; ucx_perftest ÷ socket %.3g×", *p.Baseline / *q.Baseline), "; ")
				}
			}},
	}
}

// remoteParts: the remote put bandwidth entries of tls at ≥ 64 KiB whose
// baseline variant ends in peer, labelled "<size> b<batch>".
func remoteParts(es entries, tls, peer string) []part {
	var ps []part
	for i := range es {
		e := &es[i]
		f := strings.Split(e.Variant, "/")
		if e.Name != "remote" || e.Metric != "bandwidth" || len(f) != 5 || f[0] != tls || f[1] != "put" || !strings.HasSuffix(e.BaselineVariant, peer) {
			continue
		}
		if size, _ := strconv.Atoi(f[2]); size >= 64<<10 {
			ps = append(ps, part{figures.Size(size) + " " + f[3], e})
		}
	}
	return ps
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

// goals judges every goal of goalTable whose scenario ran against the
// entries; unfinished names the units that did not finish (scenario, or
// remote/<tls>) and why, for the goals they leave unmeasured.
func goals(es []entry, ran map[string]bool, unfinished map[string]string) []goal {
	var out []goal
	for _, s := range goalTable() {
		// The idle measurement is part of the latency scenario.
		unit := s.Scenario
		if unit == "idle" {
			unit = "latency"
		}
		if !ran[unit] {
			continue
		}
		g := judge(s, entries(es))
		if g.Value == nil {
			if tls, _, ok := strings.Cut(g.What, ":"); ok && unit == "remote" {
				unit = "remote/" + tls
			}
			if why, ok := unfinished[unit]; ok {
				g.Detail = unit + " did not finish: " + why
			}
		}
		out = append(out, g)
	}
	return out
}

// judge measures one spec against the entries.
func judge(s goalSpec, es entries) goal {
	g := goal{ID: s.ID, Group: s.Group, Scenario: s.Scenario, What: s.What, Unit: s.Unit, Target: s.Limit.String(s.Unit)}
	if s.Parts != nil {
		judgeWorst(&g, s.Parts(es), s.Limit)
	} else {
		e := es.find(s.Ref)
		if e == nil && s.Alt != nil {
			if e = es.find(*s.Alt); e != nil {
				g.What = s.AltWhat
			}
		}
		v := func(e *entry) *float64 { return e.Engine }
		if s.Unit == "×" {
			v = func(e *entry) *float64 { return e.Ratio }
		}
		switch {
		case e == nil:
			g.Verdict, g.Detail = "not measured", "no such measurement in this run"
		case v(e) == nil:
			g.Verdict, g.Detail = "not measured", e.Note
		default:
			g.Value = v(e)
			if s.Unit == "×" {
				g.Min, g.Max = ratioRange(e)
			}
			g.Verdict = verdict(s.Limit.ok(*g.Value))
			g.Detail = s.Detail
		}
	}
	if s.Amend != nil {
		s.Amend(&g, s, es)
	}
	return g
}

// judgeWorst judges a combined goal: its value is the part furthest from
// the target, met only when every part is.
func judgeWorst(g *goal, parts []part, l limit) {
	var ds []string
	all, gaps := true, false
	var w *entry
	for _, p := range parts {
		if p.e == nil || p.e.Ratio == nil {
			all, gaps = false, true
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
	switch {
	case w == nil:
		if len(parts) == 0 {
			g.Detail = "no such measurement in this run"
		}
		g.Verdict = "not measured"
		return
	case all:
		g.Verdict = "met"
	case gaps && l.ok(*w.Ratio):
		g.Verdict = "missed (parts not measured)"
	default:
		g.Verdict = "missed"
	}
	g.Value = w.Ratio
	g.Min, g.Max = ratioRange(w)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// printGoals prints the goals by group, with their ratios' ranges, targets
// and verdicts, and a count of each verdict.
func printGoals(w io.Writer, gs []goal, reps int) {
	fmt.Fprintf(w, "\n== Goals, from this run (ratio = engine ÷ baseline; [range] = each of the %d repetitions' own ratio)\n", reps)
	group := ""
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	n := map[string]int{}
	for _, g := range gs {
		if g.Group != group {
			tw.Flush()
			group = g.Group
			fmt.Fprintf(w, "\n   %s\n", groupTitle(group))
		}
		verd := g.Verdict
		if strings.HasPrefix(verd, "missed") {
			verd = strings.Replace(verd, "missed", "MISSED", 1)
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\twant %s\t%s\t%s\n", g.ID, g.What, goalValue(g), g.Target, verd, g.Detail)
		switch {
		case strings.HasPrefix(g.Verdict, "missed"):
			n["missed"]++
		default:
			n[g.Verdict]++
		}
	}
	tw.Flush()
	if len(gs) > 0 {
		fmt.Fprintf(w, "\n   code complexity is not a number: BENCHMARKS.md, \"Code complexity\"\n")
	}
	fmt.Fprintf(w, "   %d met, %d missed, %d not measured\n", n["met"], n["missed"], n["not measured"])
}

// goalValue is a goal's value with its unit and range, "—" when not measured.
func goalValue(g goal) string {
	if g.Value == nil {
		return "—"
	}
	v := fmt.Sprintf("%.4g", *g.Value)
	if g.Unit == "×" {
		v += "×"
	} else {
		v += " " + g.Unit
	}
	if g.Min != nil && g.Max != nil {
		v += fmt.Sprintf(" [%.3g–%.3g]", *g.Min, *g.Max)
	}
	return v
}

// remoteEntries turns the remote scenario's rows into entries: bandwidth
// ("<tls>/<op>/<size>/b<batch>/engine" against "<tls>/<op>/<size>/ucx_perftest"
// and "<tls>/<op>/<size>/b<batch>/tcp-socket", MiB/s) and the 8 B latency
// ("<tls>/put-latency/8/engine" against ".../ucx_perftest" and
// ".../tcp-socket", µs), the 64 KiB notification rows
// ("<tls>/notified-put-latency/65536/engine", "<tls>/put+flag-latency/65536/engine"
// against ".../ucx_perftest", its ucp_am_lat; no socket), each overall (bytes ÷ wall time, wall time ÷ round
// trips: what the goals use, as ucx_perftest's overall figures) and typical
// (metric "…_typical": the median per-operation figure).
func remoteEntries(rows []*remoteRow) []entry {
	var out []entry
	for _, r := range rows {
		metric, better, op := "bandwidth", "higher", r.op
		var v, pt, sock string
		if r.unit == "µs" {
			metric, better, op = "latency", "lower", "put-latency"
			if r.op != "put latency" { // the notification rows
				op = strings.ReplaceAll(r.op, " ", "-") + "-latency"
			}
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
			if strings.HasSuffix(base.metric, "_typical") && len(base.eng) == 0 || r.noSock && base.name == sock {
				continue
			}
			x := entry{Name: "remote", Variant: v, BaselineVariant: base.name, Metric: base.metric, Unit: r.unit, Better: better, Runs: len(base.eng)}
			es, bs := newStat(base.eng), newStat(base.runs)
			switch {
			case r.skip != "":
				x.Note = r.skip
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
