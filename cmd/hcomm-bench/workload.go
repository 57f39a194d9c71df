package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"
)

// runner is one set-up workload: run(n) performs n transfers (operations),
// n a multiple of per.
type runner struct {
	run   func(n int) error
	close func() error
	per   int // run's granularity (a batch)
	bytes int // bytes per transfer (0: not a data transfer)
	// devSyscalls returns how many system calls the device model has made
	// so far (vfio-mock raising an MSI writes an eventfd; on hardware the
	// interrupt is no system call of the process). nil: none.
	devSyscalls func() uint64
	// check reports transfers that failed during the runs (engine
	// completions carry their errors to Stats, not to Drain).
	check func() error
	// timed replaces run for external peers (fio): one repetition of
	// about d, returning nanoseconds per operation and the operations.
	timed func(d time.Duration) (nsPerOp float64, ops int, err error)
	// timedCPU is the CPU time per operation of timed's last run (fio
	// reports its own, user+system).
	timedCPU float64
	desc     string // what this variant does, one line
	// oneThread: run does all of its work on the calling goroutine (no
	// other goroutine or thread takes part: poll mode, the device model
	// inline), so once locks it to its OS thread and also reports that
	// thread's CPU time — the path's CPU cost, which on a shared machine
	// other processes do not add to, as they do to wall time.
	oneThread bool
}

// workload is one variant of a scenario. Its setup must be reproducible in
// a child process (the traced worker), from its names alone.
type workload struct {
	scenario  string
	variant   string
	setup     func(o *options) (*runner, error)
	count     bool                 // count syscalls and copies (eBPF, in a traced child)
	nOverride func(o *options) int // fixed transfer count (0: calibrate)
	// fresh: every repetition runs on a new setup (closed after it), so
	// the median over repetitions also spans where memory lands: a
	// CPU-bound path over its own buffers and device memory (the device
	// model inline) varies more between setups, with the physical pages
	// it got, than between repetitions on one setup.
	fresh bool
}

// registry lists every workload by scenario/variant.
var registry = map[string]*workload{}

func register(w *workload) {
	key := w.scenario + "/" + w.variant
	if registry[key] != nil {
		panic("duplicate workload " + key) // programming error, at init
	}
	registry[key] = w
}

func lookup(scenario, variant string) (*workload, error) {
	w := registry[scenario+"/"+variant]
	if w == nil {
		var keys []string
		for k := range registry {
			if strings.HasPrefix(k, scenario+"/") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("no workload %s/%s (have %s)", scenario, variant, strings.Join(keys, ", "))
	}
	return w, nil
}

// quietLogger drops the engine's and the device's informational logs
// (fallbacks are reported in the machine section instead).
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func closeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}
