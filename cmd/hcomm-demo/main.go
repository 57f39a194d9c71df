// Command hcomm-demo shows hcomm's main job in one screen: 4 KiB blocks
// moved host→device and back, through the engine and through the
// traditional path (package baseline: pwrite into a kernel staging buffer,
// doorbell, blocking wait on an eventfd), on the same device model, with
// the system calls and CPU copies of each counted by eBPF (package trace)
// when privileged. Two figures, each labelled as what it is: the time per
// transfer when transfers are pipelined (throughput, with the counts), and
// the latency (p50, p99) of one synchronous transfer — Submit then Wait on
// the engine in its default mode against the traditional blocking Write —
// each with a line saying what the numbers mean.
//
// As root it reserves the hugepages the engine's pool uses and gives them
// back at the end; unprivileged it runs on a THP/4 KiB pool without
// tracing and says what it skipped. -hugepages adds the hugepage sections
// (backings, fallbacks, page faults, the pool).
//
// The runtime's periodic GOMAXPROCS update is off (updatemaxprocs=0): once
// a second it calls sched_getaffinity and preads the cgroup's CPU limit,
// two system calls a counted window would charge to the path it measures.
// A demo's GOMAXPROCS need not follow CPU limits changed while it runs.
//
//go:debug updatemaxprocs=0
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// demo carries what the sections share: where to print, the hugepage
// reservations to give back at the end, and what was skipped and why.
type demo struct {
	out     io.Writer
	root    bool
	touchGB int // GiB touched in the fault comparison
	n       int // round trips per measurement
	cleanup []func()
	skipped []string
}

type section struct {
	title string
	run   func(*demo) error
}

// options are the command line's.
type options struct {
	touchGB int
	huge    bool
	n       int
	worker  string
	version bool
}

// parseArgs parses the command line. Everything it cannot honour is an
// error that says so: an argument that is not a flag (flag parsing would
// otherwise stop there and silently ignore every flag after it), a count
// that would have to be changed to be used.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("hcomm-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.touchGB, "touch-gib", 1, "GiB of memory each backing touches in the page-fault comparison (-hugepages), at least 1")
	fs.BoolVar(&o.huge, "hugepages", false, "also show the hugepage sections: backings and fallbacks, page faults 4K vs hugepages, the pool")
	fs.IntVar(&o.n, "n", 6400, "round trips (host→device and back) per measurement, a positive multiple of 64")
	fs.StringVar(&o.worker, "worker", "", "internal: run one path as a traced child (engine or traditional)")
	fs.BoolVar(&o.version, "version", false, versionUsage)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q: hcomm-demo takes flags only (flags after it would be ignored)", fs.Arg(0))
	case o.n < 64 || o.n%64 != 0:
		return o, fmt.Errorf("-n %d: want a positive multiple of 64 (the transfers go in batches of 64)", o.n)
	case o.touchGB < 1:
		return o, fmt.Errorf("-touch-gib %d: want at least 1", o.touchGB)
	case o.worker != "" && o.worker != "engine" && o.worker != "traditional":
		return o, fmt.Errorf("-worker %q: want engine or traditional", o.worker)
	}
	return o, nil
}

func main() {
	o, err := parseArgs(os.Args[1:], os.Stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintf(os.Stderr, "hcomm-demo: %v\n", err)
		}
		os.Exit(2)
	}
	exitIfVersion(o.version)
	huge := &o.huge
	d := &demo{out: os.Stdout, root: os.Geteuid() == 0, touchGB: o.touchGB, n: o.n}
	if o.worker != "" {
		os.Exit(runWorker(o.worker, d.n))
	}

	sections := []section{
		{"Host→device and back: the engine vs the traditional path", (*demo).transfers},
	}
	if *huge {
		sections = append(sections,
			section{"Machine: hugepages, THP, privileges", (*demo).machine},
			section{"Arenas: backing policies and fallbacks", (*demo).arenas},
			section{"Page faults to touch memory: 4 KiB vs hugepages", (*demo).faults},
			section{"Pool: aligned blocks over an arena", (*demo).pool},
		)
	}

	// Give reservations back on Ctrl-C too, and when the reader of the
	// output goes away (SIGPIPE): the demo must leave the machine as it
	// found it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		<-sig
		d.release()
		os.Exit(130)
	}()

	start := time.Now()
	failed := false
	for i, s := range sections {
		fmt.Fprintf(d.out, "\n== %d. %s\n", i+1, s.title)
		if err := s.run(d); err != nil {
			fmt.Fprintf(d.out, "   FAILED: %v\n", err)
			failed = true
		}
	}
	d.release()
	if len(d.skipped) == 0 {
		fmt.Fprintf(d.out, "\n   everything ran (%.1fs)\n", time.Since(start).Seconds())
	} else {
		fmt.Fprintf(d.out, "\n== Skipped, and why\n")
		for _, s := range d.skipped {
			fmt.Fprintf(d.out, "   - %s\n", s)
		}
		fmt.Fprintf(d.out, "   (%.1fs)\n", time.Since(start).Seconds())
	}
	if !*huge {
		fmt.Fprintf(d.out, "   more: hcomm-demo -hugepages (what the pool stands on), make bench (every scenario, BENCHMARKS.md)\n")
	}
	if failed {
		os.Exit(1)
	}
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.out, "   "+format+"\n", args...) }

func (d *demo) skip(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.printf("SKIPPED: %s", msg)
	d.skipped = append(d.skipped, msg)
}

// release undoes the sections' reservations, last first.
func (d *demo) release() {
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i]()
	}
	d.cleanup = nil
}
