package trace

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The overhead benchmarks measure the same loop untraced and traced in one
// run and report both, plus the difference and the ratio:
//
//	go test -run '^$' -bench Overhead -benchtime 200000x ./trace/
//
// "traced" attaches the programs to this test process (its tgid), so every
// call pays the probes; "other" attaches them to a different process, so the
// loop pays only the in-kernel filter that every process on the machine pays
// while hcomm-trace runs.

func timeLoop(n int, f func()) time.Duration {
	start := time.Now()
	for i := 0; i < n; i++ {
		f()
	}
	return time.Since(start)
}

func benchOverhead(b *testing.B, op func()) {
	requireTracing(b)
	n := b.N
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()

	timeLoop(n/10+1, op) // warm up
	untraced := timeLoop(n, op)

	so, err := Attach(other.Process.Pid, Options{})
	if err != nil {
		b.Fatal(err)
	}
	otherD := timeLoop(n, op)
	so.Close()

	st, err := Attach(os.Getpid(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	// Kernel-measured run time of the programs themselves (BPF_ENABLE_STATS,
	// undone when closed): independent of how busy the machine is.
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		st.Close()
		b.Fatalf("enable BPF run-time statistics: %v", err)
	}
	traced := timeLoop(n, op)
	ps, err := st.ProgramStats()
	stats.Close()
	st.Close()
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"sys_enter", "sys_exit"} {
		if p := ps[name]; p.RunCount > 0 {
			b.ReportMetric(float64(p.Runtime.Nanoseconds())/float64(p.RunCount), "bpf-"+name+"-ns/run")
		}
	}

	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(untraced), "untraced-ns/call")
	b.ReportMetric(per(otherD), "other-traced-ns/call")
	b.ReportMetric(per(traced), "traced-ns/call")
	b.ReportMetric(per(traced)-per(untraced), "overhead-ns/call")
	b.ReportMetric(per(traced)/per(untraced), "traced/untraced")
	b.ReportMetric(per(otherD)-per(untraced), "filter-ns/call")
}

func BenchmarkOverheadGetppid(b *testing.B) {
	benchOverhead(b, func() { unix.Getppid() })
}

func BenchmarkOverheadWrite64DevNull(b *testing.B) {
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	buf := make([]byte, 64)
	benchOverhead(b, func() { unix.Write(fd, buf) })
}

// BenchmarkOverheadEngineHook: the cost of one engine batch hook call with
// a uprobe on it (traced) against the bare call (untraced), timed inside the
// workload helper (go test strips its own binary's symbol table, so the
// helper, built with symbols, carries the hook). The engine calls the hook
// once per batch: the per-transfer cost is shown for batches of 64.
func BenchmarkOverheadEngineHook(b *testing.B) {
	requireTracing(b)
	n := strconv.Itoa(b.N)
	out, err := exec.Command(workload(b), "hooks-time", n).Output()
	if err != nil {
		b.Fatalf("untraced workload: %v", err)
	}
	untraced, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		b.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	hooks := Hooks{SubmitBatch: "main.hookSubmitBatch", ReapBatch: "main.hookReapBatch"}
	s, err := StartCommand([]string{workload(b), "hooks-time", n}, CommandIO{Stdout: w}, Options{Hooks: hooks})
	w.Close()
	if err != nil {
		r.Close()
		b.Fatal(err)
	}
	defer s.Close()
	got, _ := io.ReadAll(r)
	r.Close()
	if code, err := s.Wait(context.Background()); err != nil || code != 0 {
		b.Fatalf("traced workload: %d, %v", code, err)
	}
	traced, err := strconv.ParseFloat(strings.TrimSpace(string(got)), 64)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	if snap.Engine.SubmitBatches != uint64(b.N) {
		b.Fatalf("uprobe counted %d batches, want %d", snap.Engine.SubmitBatches, b.N)
	}
	b.ReportMetric(untraced, "untraced-ns/batch")
	b.ReportMetric(traced, "traced-ns/batch")
	b.ReportMetric((traced-untraced)/64, "overhead-ns/transfer@64")
}

// BenchmarkOverheadEngineBatches: a real engine workload (vfio-mock, DMA,
// batches of 64 × 4 KiB, drained after each) timed inside the helper,
// untraced and traced; b.N is the number of batches per run.
func BenchmarkOverheadEngineBatches(b *testing.B) {
	requireTracing(b)
	n := strconv.Itoa(b.N)
	out, err := exec.Command(hcommload(b), "engine-time", n).Output()
	if err != nil {
		b.Fatalf("untraced workload: %v", err)
	}
	untraced, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		b.Fatal(err)
	}
	_, got, snap := runWorkloadOutput(b, Options{}, hcommload(b), "engine-time", n)
	traced, err := strconv.ParseFloat(strings.TrimSpace(got), 64)
	if err != nil {
		b.Fatal(err)
	}
	if snap.Engine.SubmitBatches != uint64(b.N) {
		b.Fatalf("uprobes counted %d batches, want %d", snap.Engine.SubmitBatches, b.N)
	}
	b.ReportMetric(untraced, "untraced-ns/batch")
	b.ReportMetric(traced, "traced-ns/batch")
	b.ReportMetric(traced/untraced, "traced/untraced")
}

// BenchmarkOverheadURingNop reports the kernel-measured run time of the
// io_uring programs per event (BPF_ENABLE_STATS) while the helper submits
// b.N NOPs, one io_uring_enter each, plus the syscall programs' cost.
func BenchmarkOverheadURingNop(b *testing.B) {
	requireTracing(b)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable BPF run-time statistics: %v", err)
	}
	defer stats.Close()
	s, err := StartCommand([]string{workload(b), "uring-nop", strconv.Itoa(b.N)}, CommandIO{Stderr: os.Stderr}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if code, err := s.Wait(context.Background()); err != nil || code != 0 {
		b.Fatalf("workload: %d, %v", code, err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	if snap.URing[0].Completed != uint64(b.N) {
		b.Fatalf("%d NOP completions, want %d", snap.URing[0].Completed, b.N)
	}
	ps, err := s.ProgramStats()
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"uring_submit", "uring_complete", "sys_enter", "sys_exit"} {
		if p := ps[name]; p.RunCount > 0 {
			b.ReportMetric(float64(p.Runtime.Nanoseconds())/float64(p.RunCount), "bpf-"+name+"-ns/run")
		}
	}
}
