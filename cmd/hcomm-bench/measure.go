package main

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"golang.org/x/sys/unix"
)

// stat is a median with its extremes over the repetitions.
type stat struct {
	Median, Min, Max float64
	Runs             []float64
}

func newStat(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	return stat{Median: figures.Median(v), Min: slices.Min(v), Max: slices.Max(v), Runs: v}
}

// calibrate picks a transfer count whose run takes about target: it grows
// n until a run takes an eighth of target, then times that n three times
// and scales by the fastest (one descheduled run must not shrink n).
func calibrate(r *runner, target time.Duration) (int, error) {
	n := r.per
	for {
		t0 := time.Now()
		if err := r.run(n); err != nil {
			return 0, err
		}
		if el := time.Since(t0); el >= target/8 || n >= 1<<26 {
			break
		}
		n *= 4
	}
	best := time.Duration(1<<63 - 1)
	for range 3 {
		t0 := time.Now()
		if err := r.run(n); err != nil {
			return 0, err
		}
		best = min(best, time.Since(t0))
	}
	want := int(float64(n) * float64(target) / float64(max(best, time.Microsecond)))
	return max(r.per, (want+r.per-1)/r.per*r.per), nil
}

// sample is what one repetition of a runner measured, per transfer.
type sample struct {
	ns, cpu, allocs float64
	// threadCPU: the CPU time of the one OS thread that ran the whole
	// path (runner.oneThread), 0 otherwise.
	threadCPU float64
}

// once runs n transfers and returns ns, CPU ns (user+system of the whole
// process: every thread, the device model's and the runtime's included),
// heap allocations and, for a oneThread runner, the CPU time of its thread
// per transfer.
func once(r *runner, n int) (sample, error) {
	runtime.GC()
	if r.oneThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0, tc0 := cpuNow(), threadCPUNow(r.oneThread)
	t0 := time.Now()
	err := r.run(n)
	el := time.Since(t0)
	c1, tc1 := cpuNow(), threadCPUNow(r.oneThread)
	runtime.ReadMemStats(&m1)
	if err != nil {
		return sample{}, err
	}
	f := float64(n)
	return sample{ns: float64(el.Nanoseconds()) / f, cpu: float64(c1-c0) / f,
		allocs: float64(m1.Mallocs-m0.Mallocs) / f, threadCPU: float64(tc1-tc0) / f}, nil
}

// threadCPUNow is the calling OS thread's CPU time so far in ns
// (CLOCK_THREAD_CPUTIME_ID: time other threads and processes take from
// the CPU is not counted), or 0 when !want or the clock fails.
func threadCPUNow(want bool) int64 {
	if !want {
		return 0
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// cpuNow is the process's CPU time so far (user+system, every thread), in
// ns, from getrusage(2).
func cpuNow() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// result is what one variant measured.
type result struct {
	scenario, variant string
	desc              string
	ns                stat // per transfer (or per operation)
	cpu               stat // CPU ns per transfer (user+system, whole process; fio: its job's)
	threadCPU         stat // CPU ns per transfer of the one thread that ran it (runner.oneThread)
	allocs            stat
	bytes             int
	n                 int // transfers per repetition
	counts            *counts
	countErr          string // why counts are missing
	err               error
}

// measureGroup sets up every workload of a group, calibrates each, then
// runs reps repetitions interleaved (rep 1 of each variant, then rep 2 ...),
// so a load spike on the shared machine falls on all of them alike.
func measureGroup(o *options, ws []*workload) []*result {
	res := make([]*result, len(ws))
	rs := make([]*runner, len(ws))
	ns := make([][]float64, len(ws))
	al := make([][]float64, len(ws))
	cp := make([][]float64, len(ws))
	tc := make([][]float64, len(ws))
	for i, w := range ws {
		res[i] = &result{scenario: w.scenario, variant: w.variant}
		o.logf("setting up %s/%s", w.scenario, w.variant)
		r, err := w.setup(o)
		if err != nil {
			res[i].err = fmt.Errorf("set up: %w", err)
			continue
		}
		rs[i] = r
		res[i].desc, res[i].bytes = r.desc, r.bytes
		if r.timed != nil {
			continue
		}
		if w.nOverride != nil {
			res[i].n = w.nOverride(o)
		} else if res[i].n, err = calibrate(r, o.target); err != nil {
			res[i].err = fmt.Errorf("calibrate: %w", err)
		}
	}
	for rep := 0; rep < o.reps; rep++ {
		for i, r := range rs {
			if r == nil || res[i].err != nil {
				continue
			}
			if ws[i].fresh && rep > 0 {
				if r, res[i].err = resetup(o, ws[i], r); res[i].err != nil {
					rs[i] = nil
					continue
				}
				rs[i] = r
			}
			if r.timed != nil {
				v, ops, err := r.timed(o.target * 4)
				if err != nil {
					res[i].err = err
					continue
				}
				ns[i] = append(ns[i], v)
				if r.timedCPU > 0 {
					cp[i] = append(cp[i], r.timedCPU)
				}
				res[i].n = ops
				continue
			}
			sm, err := once(r, res[i].n)
			if err != nil {
				res[i].err = err
				continue
			}
			ns[i] = append(ns[i], sm.ns)
			cp[i] = append(cp[i], sm.cpu)
			al[i] = append(al[i], sm.allocs)
			if sm.threadCPU > 0 {
				tc[i] = append(tc[i], sm.threadCPU)
			}
		}
	}
	for i, r := range rs {
		res[i].ns, res[i].allocs, res[i].cpu, res[i].threadCPU = newStat(ns[i]), newStat(al[i]), newStat(cp[i]), newStat(tc[i])
		if r == nil { // never set up, or resetup failed (it closed the last one)
			continue
		}
		if res[i].err == nil && r.check != nil {
			res[i].err = r.check()
		}
		if err := r.close(); err != nil && res[i].err == nil {
			res[i].err = fmt.Errorf("close: %w", err)
		}
	}
	return res
}

// resetup checks and closes a fresh workload's runner after a repetition
// and sets the workload up again for the next one.
func resetup(o *options, w *workload, r *runner) (*runner, error) {
	var err error
	if r.check != nil {
		err = r.check()
	}
	if cerr := r.close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	o.logf("setting up %s/%s afresh", w.scenario, w.variant)
	nr, err := w.setup(o)
	if err != nil {
		return nil, fmt.Errorf("set up afresh: %w", err)
	}
	return nr, nil
}
