// Command hcomm-bench runs hcomm's side-by-side benchmarks: the engine
// against the traditional path (package baseline) and against peers (fio,
// Go's copy, make and sync.Pool), on the same machine in the same run.
//
// Scenarios: device-small, file-4k, bulk, alloc, pages, pipeline, grow (see docs/benchmarks.md),
// remote (cmd/hcomm-bench/remote.go, docs/remote.md).
// Every number is a median over at least five repetitions, printed with its
// minimum and maximum, engine and baseline side by side with their ratio.
// Repetitions of the variants that are compared run interleaved, so a load
// spike on a shared machine hits both sides.
//
// System calls and CPU copies are counted by eBPF (package trace), never by
// the program's own say-so: each counted variant runs again in a child
// process (this binary with -worker) that trace observes; the child sets
// up, warms up, and only then does the counted transfers, between two
// snapshots. Timing never runs under tracing. Unprivileged, those columns
// read "n/a (needs root)".
//
// Usage:
//
//	hcomm-bench [-quick] [-json | -csv] [-json-out FILE] [-plot DIR] [-timeout 20m] [-scenarios latency,device-small,file-4k,bulk,alloc,footprint,pages,remote,pipeline,grow] [-file-targets disk,stable] [-reps 5] [-dir DIR] [-keep]
//	hcomm-bench -strace-check   # compare the eBPF counts with strace -c -f of the same workloads
//	hcomm-bench -compare-old OLD.json,... -compare-new NEW.json,...   # the goals of two sets of runs side by side
//
// The run ends with the goals (goals.go: goalTable), each named by a stable
// ID, met/missed with its measured ratio and range. Each scenario (each remote transport) runs as a
// child process with a share of -timeout and is stopped, its rows marked,
// when it runs out: the run never hangs.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	quick     bool
	json      bool
	jsonOut   string
	jsonFile  *os.File // -json-out, created before the run so that a bad path fails at once
	csv       bool
	plot      string // -plot: directory for the SVG charts
	keep      bool
	reps      int
	scenarios map[string]bool
	dir       string
	noTrace   bool
	verbose   bool
	worker    bool          // this process is a traced worker child
	child     bool          // this process runs one unit of the run for the parent (-scenario-child)
	childOut  string        // -child-out: where a scenario child checkpoints its report
	timeout   time.Duration // -timeout: the whole run's time budget, shared among its units
	noFile    error         // why the file scenarios cannot run (no suitable directory)
	target    time.Duration // wall time of one repetition
	// stableDev is the stable block device of file-4k (stabledev.go),
	// while it exists: set in the scenario child, passed to its workers.
	stableDev string
	// fileTargets: file-4k's targets (-file-targets): "disk" (the data
	// file in -dir) and "stable" (the stable device).
	fileTargets map[string]bool
}

var allScenarios = []string{"latency", "device-small", "file-4k", "bulk", "alloc", "footprint", "pages", "remote", "pipeline", "grow"}

func main() {
	var o options
	f := parseFlags(&o)
	exitIfVersion()
	if f.burnCPU >= 0 {
		os.Exit(burnMain(f.burnCPU))
	}
	if f.remotePeer != "" {
		os.Exit(remotePeerMain(f.remotePeer))
	}
	if f.runs != "" {
		os.Exit(runsMain(os.Stdout, f.runs))
	}
	if f.compareOld != "" || f.compareNew != "" {
		if f.compareOld == "" || f.compareNew == "" {
			fmt.Fprintln(os.Stderr, "hcomm-bench: -compare-old and -compare-new go together")
			os.Exit(2)
		}
		os.Exit(compareMain(os.Stdout, f.compareOld, f.compareNew))
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	if f.worker {
		o.worker = true
		if f.wScen == "footprint" {
			os.Exit(footprintWorker(&o, f.wVar, f.wN))
		}
		os.Exit(runWorker(f.wScen, f.wVar, f.wN, !f.wNoHS, &o))
	}
	if err := o.setup(f.scen, f.fileTargets, f.straceCheck); err != nil {
		fmt.Fprintln(os.Stderr, "hcomm-bench:", err)
		os.Exit(2)
	}
	// The data files (512 MiB each) go at exit, Ctrl-C included, unless
	// -keep.
	undoData := atExit(func() { removeDataFiles(&o) })
	if f.straceCheck {
		code := runStraceCheck(&o, os.Stdout)
		undoData()
		os.Exit(code)
	}
	// Give hugepage reservations back on Ctrl-C too, and when the reader
	// of the output goes away (hcomm-bench | head: SIGPIPE would otherwise
	// kill the process before its deferred releases): the benchmark must
	// leave the machine as it found it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		<-sig
		runAtExit()
		os.Exit(130)
	}()
	if o.child {
		if f.remoteTLS != "" {
			remoteTransports = slices.DeleteFunc(remoteTransports, func(t struct{ name, engineTLS, perftestTLS string }) bool { return t.name != f.remoteTLS })
		}
		b := newBench(&o)
		code := b.runChild()
		undoData()
		os.Exit(code)
	}
	if o.timeout <= 0 {
		o.timeout = 20 * time.Minute
		if o.quick {
			o.timeout = 8 * time.Minute
		}
	}
	b := newBench(&o)
	code := b.run()
	undoData()
	os.Exit(code)
}

// cmdFlags are the flags main acts on itself (the others set options).
type cmdFlags struct {
	worker             bool   // -worker: run one workload as a traced child
	wScen, wVar        string // its scenario and variant
	wN                 int    // its transfer count
	wNoHS, straceCheck bool
	remotePeer         string
	remoteTLS          string
	burnCPU            int    // -burn-cpu: be the loaded latency tables' load
	scen               string // -scenarios, comma-separated
	fileTargets        string // -file-targets, comma-separated
	compareOld         string // -compare-old: -json-out files, comma-separated
	compareNew         string // -compare-new: the same
	runs               string // -runs: -json-out files of one binary, comma-separated
}

func parseFlags(o *options) *cmdFlags {
	f := &cmdFlags{}
	flag.BoolVar(&f.worker, "worker", false, "internal: run one workload as a traced child")
	flag.StringVar(&f.wScen, "w-scenario", "", "internal: worker scenario")
	flag.StringVar(&f.wVar, "w-variant", "", "internal: worker variant")
	flag.IntVar(&f.wN, "w-n", 0, "internal: worker transfer count")
	flag.BoolVar(&f.wNoHS, "w-no-handshake", false, "internal: worker runs without the snapshot handshake (strace)")
	flag.BoolVar(&f.straceCheck, "strace-check", false, "count syscalls with strace -c -f and with eBPF for the same workloads, side by side")
	flag.BoolVar(&o.quick, "quick", false, "everything in under a minute: shorter repetitions, smaller files and arenas")
	flag.BoolVar(&o.json, "json", false, "print one JSON object (schema: docs/benchmarks.md) instead of tables")
	flag.StringVar(&o.jsonOut, "json-out", "", "also write the -json object to this file (tables still print)")
	flag.BoolVar(&o.csv, "csv", false, "print the results as CSV (one row per metric of an engine variant against a baseline) instead of tables")
	flag.StringVar(&o.plot, "plot", "", "write SVG charts of the run into this directory (created if missing)")
	flag.BoolVar(&o.keep, "keep", false, "keep the benchmark's data files (512 MiB each in -dir) for the next run; they are removed at exit otherwise")
	flag.IntVar(&o.reps, "reps", 5, "repetitions per measurement (at least 5 for the medians)")
	flag.StringVar(&f.scen, "scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
	flag.StringVar(&f.fileTargets, "file-targets", "disk,stable", "file-4k's targets: disk (the data file in -dir), stable (a loop device with direct I/O over tmpfs, set up and removed by the run; needs root)")
	flag.StringVar(&o.dir, "dir", "", "directory for file-4k (default: the first ext4/xfs of $TMPDIR, /var/tmp, the working directory)")
	flag.BoolVar(&o.noTrace, "no-trace", false, "do not count syscalls/copies with eBPF even when privileged")
	flag.BoolVar(&o.verbose, "v", false, "log progress to stderr")
	flag.StringVar(&f.compareOld, "compare-old", "", "with -compare-new: compare the goals of two sets of runs (comma-separated -json-out files, e.g. of two binaries alternated): per goal each set's median, range and verdict; runs nothing")
	flag.StringVar(&f.compareNew, "compare-new", "", "see -compare-old")
	flag.StringVar(&f.runs, "runs", "", "the goals of several runs of one binary (comma-separated -json-out files, e.g. of make bench-report RUNS=3) as a Markdown table: every run's value, the range, runs that met it; runs nothing")
	flag.Usage = usage
	flag.StringVar(&f.remotePeer, "remote-peer", "", "internal: run as the remote scenario's peer (passive or pong)")
	flag.BoolVar(&o.child, "scenario-child", false, "internal: run the named scenarios for a parent hcomm-bench (tables to stdout unless -json, the report to -child-out)")
	flag.StringVar(&o.childOut, "child-out", "", "internal: the scenario child's report file")
	flag.IntVar(&f.burnCPU, "burn-cpu", -1, "internal: spin on this CPU until killed (the loaded latency tables' load)")
	flag.StringVar(&o.stableDev, "w-stable-dev", "", "internal: the stable device file-4k's worker opens")
	flag.StringVar(&f.remoteTLS, "remote-tls", "", "internal: the scenario child measures only this remote transport")
	flag.DurationVar(&o.timeout, "timeout", 0, "the whole run's time budget, shared among the scenarios (each runs as a child process, stopped with its rows marked when its share is spent; default 20m, 8m with -quick)")
	flag.Parse()
	return f
}

// setup checks the options and opens what they name: the scenarios of
// scen, -plot's directory, -json-out's file.
func (o *options) setup(scen, targets string, straceCheck bool) error {
	if o.reps < 5 {
		return fmt.Errorf("-reps %d: medians need at least 5 repetitions", o.reps)
	}
	o.scenarios = map[string]bool{}
	for _, s := range strings.Split(scen, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !contains(allScenarios, s) {
			return fmt.Errorf("unknown scenario %q (want %s)", s, strings.Join(allScenarios, ", "))
		}
		o.scenarios[s] = true
	}
	if len(o.scenarios) == 0 && !straceCheck {
		return fmt.Errorf("-scenarios %q names no scenario (want some of %s)", scen, strings.Join(allScenarios, ","))
	}
	o.fileTargets = map[string]bool{}
	for _, t := range strings.Split(targets, ",") {
		switch t = strings.TrimSpace(t); t {
		case "":
		case "disk", "stable":
			o.fileTargets[t] = true
		default:
			return fmt.Errorf("-file-targets: unknown target %q (want disk, stable)", t)
		}
	}
	if o.scenarios["file-4k"] && len(o.fileTargets) == 0 {
		return fmt.Errorf("-file-targets %q names no target (want disk, stable)", targets)
	}
	if o.json && o.csv {
		return errors.New("-json and -csv both print to stdout: choose one (-json-out FILE writes the JSON beside either)")
	}
	if o.plot != "" {
		if err := os.MkdirAll(o.plot, 0o755); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}
	if o.jsonOut != "" {
		f, err := os.Create(o.jsonOut)
		if err != nil {
			return fmt.Errorf("-json-out: %w", err)
		}
		o.jsonFile = f
	}
	o.target = 150 * time.Millisecond
	if o.quick {
		o.target = 20 * time.Millisecond
	}
	return nil
}

// usage prints the flags people use; the internal ones (worker
// processes) are left out.
func usage() {
	w := flag.CommandLine.Output()
	fmt.Fprintf(w, "Usage of hcomm-bench (scenarios: %s; docs/benchmarks.md):\n", strings.Join(allScenarios, ", "))
	flag.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "internal:") {
			return
		}
		name, use := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  -%s %s\n    \t%s", f.Name, name, use)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

var (
	exitMu    sync.Mutex
	exitFuncs = map[int]func(){}
	exitSeq   int
)

// atExit registers f to run if the process is interrupted; the returned
// function runs f now (once) and unregisters it.
func atExit(f func()) (undo func()) {
	exitMu.Lock()
	defer exitMu.Unlock()
	exitSeq++
	id := exitSeq
	exitFuncs[id] = f
	return func() {
		exitMu.Lock()
		g, ok := exitFuncs[id]
		delete(exitFuncs, id)
		exitMu.Unlock()
		if ok {
			g()
		}
	}
}

func runAtExit() {
	exitMu.Lock()
	defer exitMu.Unlock()
	for id, f := range exitFuncs {
		delete(exitFuncs, id)
		f()
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// logf reports progress on stderr with -v.
func (o *options) logf(format string, args ...any) {
	if o.verbose {
		fmt.Fprintf(os.Stderr, "hcomm-bench: "+format+"\n", args...)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
