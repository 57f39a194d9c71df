package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hcomm-go/hcomm/trace"
)

// countFio runs fio twice under trace, for n0 and n0+n I/Os (fio's
// number_ios), and divides the difference of what eBPF saw by the
// difference of fio's own I/O counts: fio's start-up and exit (a thousand
// calls) cancel out. Fixed I/O counts, not run times: two timed runs on a
// loaded machine or a slow virtual disk could do about as many I/Os (or
// the longer one fewer), which failed the count or made it noise.
func countFio(o *options, variant string, n int) (*counts, string) {
	rest, stable := strings.CutPrefix(variant, stablePrefix)
	op, eng, _ := strings.Cut(rest, "/fio-")
	path, size, err := targetPath(o, stable)
	if err != nil {
		return nil, "count failed: " + err.Error()
	}
	blocks := int(size / fileBlock)
	n0 := min(1000, blocks/8)
	n = max(1000, min(n, blocks-n0))
	s1, ios1, err := traceFio(path, size, op, eng, n0)
	if err != nil {
		return nil, "count failed: " + err.Error()
	}
	s2, ios2, err := traceFio(path, size, op, eng, n0+n)
	if err != nil {
		return nil, "count failed: " + err.Error()
	}
	if ios2 <= ios1 {
		return nil, fmt.Sprintf("count failed: fio did %d then %d I/Os (asked for %d and %d)", ios1, ios2, n0, n0+n)
	}
	return makeCounts(s2.Sub(s1), ios2-ios1, fileBlock, 0), ""
}

// fioCountArgs are the timed run's fio arguments with the run time
// replaced by a number of I/Os (at most the file's blocks: without
// time_based fio also stops when it has covered the file's size).
func fioCountArgs(path string, size int64, op, eng string, ios int) []string {
	var a []string
	for _, x := range fioArgs(path, size, op, eng, time.Second) {
		if x == "--time_based" || strings.HasPrefix(x, "--runtime=") {
			continue
		}
		a = append(a, x)
	}
	return append(a, "--number_ios="+strconv.Itoa(ios))
}

func traceFio(path string, size int64, op, eng string, ios int) (*trace.Snapshot, int, error) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		return nil, 0, fmt.Errorf("fio not installed")
	}
	out, err := os.CreateTemp("", "hcomm-bench-fio-*.json")
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	errf, err := os.CreateTemp("", "hcomm-bench-fio-*.err")
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	argv := append([]string{fio}, fioCountArgs(path, size, op, eng, ios)...)
	s, err := trace.StartCommand(argv, trace.CommandIO{Stdout: out, Stderr: errf}, trace.Options{Logger: quietLogger()})
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code, err := s.Wait(ctx); err != nil || code != 0 {
		s.Signal(os.Kill)
		msg, _ := os.ReadFile(errf.Name())
		return nil, 0, fmt.Errorf("fio exit %d: %v: %s", code, err, firstLine(strings.TrimSpace(string(msg))))
	}
	snap, err := s.Snapshot()
	if err != nil {
		return nil, 0, err
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		return nil, 0, err
	}
	_, ios, err = parseFio(b, op)
	return snap, ios, err
}

// runtimeCalls are the Go runtime's own system calls: scheduler hand-offs
// and sleeps, preemption signals, thread creation.
var runtimeCalls = map[string]bool{
	"nanosleep": true, "futex": true, "epoll_pwait": true, "sched_yield": true, "tgkill": true, "getpid": true,
	"rt_sigreturn": true, "clone3": true, "mmap": true, "munmap": true, "mprotect": true, "sigaltstack": true,
	"rt_sigprocmask": true, "gettid": true, "rseq": true, "set_robust_list": true, "sched_getaffinity": true, "madvise": true,
}

// straceCounts runs a worker under strace -f -c and returns calls by name.
func straceCounts(o *options, w *workload, n int) (map[string]float64, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp("", "hcomm-bench-strace-*.txt")
	if err != nil {
		return nil, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := append([]string{"-f", "-c", "-o", tmp.Name(), exe, "-worker", "-w-no-handshake",
		"-w-scenario", w.scenario, "-w-variant", w.variant, "-w-n", strconv.Itoa(n)}, childFlags(o)...)
	cmd := exec.Command("strace", args...)
	cmd.Stderr = os.Stderr
	if out, err := cmd.Output(); err != nil {
		return nil, fmt.Errorf("strace %s/%s: %v (%s)", w.scenario, w.variant, err, strings.TrimSpace(string(out)))
	}
	f, err := os.Open(tmp.Name())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseStrace(f)
}

// parseStrace reads strace -c's summary table: calls (4th column) by name
// (last column).
func parseStrace(r io.Reader) (map[string]float64, error) {
	m := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || strings.HasPrefix(f[0], "%") || strings.HasPrefix(f[0], "-") || f[len(f)-1] == "total" {
			continue
		}
		calls, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			continue
		}
		m[f[len(f)-1]] += float64(calls)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("no strace -c table found")
	}
	return m, sc.Err()
}

// straceItem is one workload the strace check counts: n transfers, the
// path calls' relative tolerance tol.
type straceItem struct {
	scenario, variant string
	n                 int
	tol               float64
}

// straceItems: tol is 1% where the path fixes the calls per transfer; 30%
// for the engine's file target, whose io_uring_enter count depends on how
// completions cluster (it refills with what has completed, and strace
// slows every call down). The file items need the data file.
func straceItems(o *options) []straceItem {
	items := []straceItem{
		{"device-small", "4096/traditional", 4000, 0.01},
		{"device-small", "4096/engine-b64", 64000, 0.01},
		{"device-small", "4096/engine-b1", 8000, 0.01},
		{"bulk", "device-1MiB/engine", 3200, 0.01},
	}
	if o.dir != "" {
		items = append(items, straceItem{"file-4k", "randwrite/engine", 8000, 0.3}, straceItem{"file-4k", "randread/readat-direct-qd1", 2000, 0.01})
	}
	return items
}

// runStraceCheck counts the same workloads with strace -c -f (two runs of
// different lengths: the difference per transfer cancels set-up and
// teardown) and with eBPF (the windowed count hcomm-bench prints), and
// prints them side by side. Exit 1 when the path calls disagree by more
// than the item's tolerance + 0.002 calls per transfer.
func runStraceCheck(o *options, out io.Writer) int {
	if _, err := exec.LookPath("strace"); err != nil {
		fmt.Fprintln(out, "strace not installed (apt-get install strace)")
		return 2
	}
	ok, why := privileged(o)
	if dir, _, err := benchDir(o); err == nil {
		o.dir = dir
		if _, err := prepareFile(o); err != nil {
			o.dir = ""
		}
	}
	fail := 0
	for _, it := range straceItems(o) {
		w, err := lookup(it.scenario, it.variant)
		if err != nil {
			fmt.Fprintln(out, err)
			return 2
		}
		if !checkStrace(o, out, it, w, ok, why) {
			fail++
		}
	}
	if fail > 0 {
		return 1
	}
	return 0
}

// checkStrace counts one item both ways (eBPF only when ok; why says why
// not) and prints the table; false when a count failed or they disagree.
func checkStrace(o *options, out io.Writer, it straceItem, w *workload, ok bool, why string) bool {
	n1, n2 := it.n/4, it.n
	s1, err1 := straceCounts(o, w, n1)
	s2, err2 := straceCounts(o, w, n2)
	if err1 != nil || err2 != nil {
		fmt.Fprintf(out, "%s/%s: strace failed: %v %v\n", it.scenario, it.variant, err1, err2)
		return false
	}
	marg := map[string]float64{}
	for k, v := range s2 {
		if d := (v - s1[k]) / float64(n2-n1); math.Abs(d) >= 0.0005 {
			marg[k] = d
		}
	}
	var eb *counts
	if ok {
		var err error
		if eb, err = countInChild(o, w, n2); err != nil {
			fmt.Fprintf(out, "%s/%s: eBPF count failed: %v\n", it.scenario, it.variant, err)
			return false
		}
	}
	fmt.Fprintf(out, "\n== %s/%s: calls per transfer (strace: (runs of %d − %d transfers)/%d; eBPF: %d transfers between snapshots)\n",
		it.scenario, it.variant, n2, n1, n2-n1, n2)
	return printStraceTable(out, it, marg, eb, why)
}

// printStraceTable prints every call either count saw, strace's marginal
// count beside eBPF's (why where eBPF did not count), and the path totals
// with their verdict; false when they disagree.
func printStraceTable(out io.Writer, it straceItem, marg map[string]float64, eb *counts, why string) bool {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "syscall\tstrace -c -f\teBPF\tkind\n")
	// Every call either count saw, ordered by the larger of the two.
	all := map[string]float64{}
	for k, v := range marg {
		all[k] = v
	}
	if eb != nil {
		for k, v := range eb.ByName {
			if v >= 0.0005 {
				all[k] = max(all[k], v)
			}
		}
	}
	// Path calls (the transfer's own: pwrite64, read, io_uring_enter ...)
	// are deterministic per transfer and must agree. The Go runtime's
	// housekeeping (sysmon's nanosleep, futex hand-offs, preemption
	// signals, thread start-up) depends on timing, and strace slows every
	// call down many times: listed, not compared.
	var st, et, sr, er float64
	for _, k := range sortedNames(all) {
		e := why
		if eb != nil {
			e = fmt.Sprintf("%.4f", eb.ByName[k])
		}
		kind := "path"
		if runtimeCalls[k] {
			kind = "runtime"
			sr += marg[k]
			if eb != nil {
				er += eb.ByName[k]
			}
		} else {
			st += marg[k]
			if eb != nil {
				et += eb.ByName[k]
			}
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%s\t%s\n", k, marg[k], e, kind)
	}
	if eb == nil {
		fmt.Fprintf(tw, "path total\t%.4f\t%s\t\n", st, why)
		return true
	}
	agree := math.Abs(st-et) <= it.tol*math.Max(st, et)+0.002
	verdict := map[bool]string{true: "agree", false: "DISAGREE"}[agree]
	fmt.Fprintf(tw, "runtime total\t%.4f\t%.4f\t(timing-dependent)\n", sr, er)
	fmt.Fprintf(tw, "path total\t%.4f\t%.4f\t%s\n", st, et, verdict)
	return agree
}
