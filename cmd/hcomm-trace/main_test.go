package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/trace"
	"github.com/hcomm-go/hcomm/trace/report"
)

var (
	buildOnce          sync.Once
	buildDir           string
	buildErr           error
	traceBin, progPath string
)

// binaries builds hcomm-trace and compiles testdata/syscalls.c once per test
// binary, or takes both prebuilt (testutil.HelpersEnv, testdata/vm-helpers:
// the VM guest has no toolchain), and returns their paths. progPath is ""
// when there is no C compiler.
func binaries(t *testing.T) (hcommTrace, syscallsProg string) {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "hcomm-trace-cli-"); buildErr != nil {
			return
		}
		os.Chmod(buildDir, 0o755)
		traceBin, buildErr = testutil.Helper(buildDir, "hcomm-trace", func(out string) error {
			if b, err := exec.Command("go", "build", "-o", out, ".").CombinedOutput(); err != nil {
				return fmt.Errorf("go build: %w\n%s", err, b)
			}
			return nil
		})
		if buildErr != nil {
			return
		}
		if _, err := exec.LookPath("cc"); err != nil && os.Getenv(testutil.HelpersEnv) == "" {
			return // tests that need the C program skip with the reason
		}
		progPath, buildErr = testutil.Helper(buildDir, "syscalls", func(out string) error {
			cmd := exec.Command("cc", "-O2", "-Wall", "-Werror", "-pthread", "-o", out, "testdata/syscalls.c")
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("cc testdata/syscalls.c: %w\n%s", err, b)
			}
			return nil
		})
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return traceBin, progPath
}

// syscallsProg returns the compiled C program, skipping without a compiler.
func syscallsProg(t *testing.T) string {
	t.Helper()
	_, p := binaries(t)
	if p == "" {
		t.Skip("no C compiler (cc) to build testdata/syscalls.c")
	}
	return p
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func requireTracing(t *testing.T) {
	t.Helper()
	testutil.RequirePrivileged(t, "load eBPF tracing programs")
	testutil.RequireFeature(t, "eBPF tracing (CAP_BPF, CAP_PERFMON)", trace.CheckPrivileges())
}

// runJSON runs hcomm-trace in-process with args (a run whose report goes
// to standard error, the default) and decodes the report.
func runJSON(t *testing.T, args ...string) (*report.Report, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"run", "-o", "json"}, args...), &stdout, &stderr)
	if stdout.Len() != 0 {
		t.Errorf("report on standard output: %q", stdout.String())
	}
	var r report.Report
	dec := json.NewDecoder(&stderr)
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("exit %d, decode the report on standard error: %v\n%s", code, err, stderr.String())
	}
	if dec.More() {
		t.Error("more than one JSON value on standard error")
	}
	return &r, code
}

func counts(r *report.Report) map[string]uint64 {
	m := map[string]uint64{}
	for k, v := range r.Syscalls {
		m[k] = v.Count
	}
	return m
}

// straceCounts runs argv under strace -c -f and returns its per-syscall
// call counts.
func straceCounts(t *testing.T, argv ...string) map[string]uint64 {
	t.Helper()
	if _, err := exec.LookPath("strace"); err != nil {
		testutil.MissingPrivilege(t, "strace is not installed (apt-get install strace)")
	}
	out := filepath.Join(t.TempDir(), "strace.txt")
	cmd := exec.Command("strace", append([]string{"-c", "-f", "-o", out}, argv...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("strace: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return parseStraceSummary(t, string(b))
}

// parseStraceSummary reads strace -c's table: "% time seconds usecs/call
// calls [errors] syscall" rows between the dashed lines.
func parseStraceSummary(t *testing.T, s string) map[string]uint64 {
	m := map[string]uint64{}
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) < 5 || strings.HasPrefix(f[0], "-") || f[0] == "%" || f[len(f)-1] == "total" {
			continue
		}
		n, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			t.Fatalf("strace line %q: %v", line, err)
		}
		m[f[len(f)-1]] = n
	}
	if len(m) == 0 {
		t.Fatalf("no rows in strace's summary:\n%s", s)
	}
	return m
}

// TestCountsMatchStrace is the acceptance test: every per-syscall count of
// a deterministic C program (and its fork+exec child) equals strace -c -f's,
// exit and exit_group aside (strace -c does not count calls that never
// return). It also checks the in-kernel copies the program makes.
func TestCountsMatchStrace(t *testing.T) {
	requireTracing(t)
	prog := syscallsProg(t)
	dir := t.TempDir()
	want := straceCounts(t, prog, dir)
	r, code := runJSON(t, "--", prog, dir)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	got := counts(r)
	delete(got, "exit")
	delete(got, "exit_group")
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: hcomm-trace %d, strace %d", name, got[name], n)
		}
	}
	for name, n := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: hcomm-trace %d, strace none", name, n)
		}
	}
	if t.Failed() {
		t.Logf("hcomm-trace: %v\nstrace: %v", got, want)
	}
	// The program's own numbers (testdata/syscalls.c).
	for name, n := range map[string]uint64{"sendfile": 1, "splice": 2, "copy_file_range": 1, "lseek": 1, "execve": 2} {
		if got[name] != n {
			t.Errorf("%s = %d, want %d", name, got[name], n)
		}
	}
	if c := r.Copy; c.KernelCopyBytes != 3000 || c.UserToKernelBytes != 1003 || c.Syscalls.KernelCopyBytes != 3000 {
		t.Errorf("copy = %+v, want kernel_copy_bytes 3000 (sendfile 1000 + splice 2x500 + copy_file_range 1000), user_to_kernel 1003", c)
	}
	if r.SchemaVersion != report.SchemaVersion {
		t.Errorf("schema_version = %d", r.SchemaVersion)
	}
}

// TestLauncherNotCounted: /bin/true's count must not include the Go
// launcher's code between clone and execve (rt_sigaction per signal, fcntl).
func TestLauncherNotCounted(t *testing.T) {
	requireTracing(t)
	r, _ := runJSON(t, "--", "true")
	want := straceCounts(t, "true")
	got := counts(r)
	if got["rt_sigaction"] != want["rt_sigaction"] || got["fcntl"] != want["fcntl"] || got["execve"] != 1 {
		t.Errorf("rt_sigaction %d (strace %d), fcntl %d (strace %d), execve %d (want 1)",
			got["rt_sigaction"], want["rt_sigaction"], got["fcntl"], want["fcntl"], got["execve"])
	}
}

// TestJSONPipedToParser runs the binary as a user would, with the report on
// standard error and the command's output on standard output, and feeds the
// report to a JSON parser: the command's stdout is untouched.
func TestJSONPipedToParser(t *testing.T) {
	requireTracing(t)
	bin, _ := binaries(t)
	cmd := exec.Command(bin, "run", "-o", "json", "--", "sh", "-c", "echo hi")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if stdout.String() != "hi\n" {
		t.Errorf("standard output = %q, want the command's \"hi\\n\" only", stdout.String())
	}
	var obj map[string]any
	dec := json.NewDecoder(&stderr)
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("the report on standard error is not JSON: %v\n%s", err, stderr.String())
	}
	if dec.More() {
		t.Error("more than one JSON value")
	}
	for _, k := range []string{"schema_version", "process", "syscalls", "copy", "io_uring", "engine", "duration_ns", "page_faults", "exit_code", "lost"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("key %q missing", k)
		}
	}
	// And through a real pipe into python's parser, when there is one.
	if py, err := exec.LookPath("python3"); err == nil {
		sh := fmt.Sprintf("%s run -o json -- sh -c 'echo hi' 2>&1 >/dev/null | %s -c 'import json,sys; print(json.load(sys.stdin)[\"process\"][\"comm\"])'", bin, py)
		out, err := exec.Command("sh", "-c", sh).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "sh" {
			t.Errorf("piped into python3: %v, %q", err, out)
		}
	}
}

func TestOutDashIsStdout(t *testing.T) {
	requireTracing(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"run", "-o", "json", "-out", "-", "--", "true"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r report.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.Process.Comm != "true" {
		t.Fatalf("-out -: %v, %+v", err, r.Process)
	}
}

func TestRunExitStatusAndTable(t *testing.T) {
	requireTracing(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "-top", "5", "--", "sh", "-c", "exit 7"}, &stdout, &stderr)
	if code != 7 {
		t.Fatalf("exit %d, want 7 (the command's); stderr: %s", code, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{"SYSCALL", "MIN (us)", "MAX (us)", "COPY (bytes)", "in-kernel", "PAGE FAULTS", "on read", "ENGINE: absent", "exit status 7"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "engine hook symbols absent") {
		t.Errorf("engine reason repeats the sentinel's text:\n%s", out)
	}
}

// TestFilters checks -e, -x and --errno against the C program's known calls.
func TestFilters(t *testing.T) {
	requireTracing(t)
	prog := syscallsProg(t)
	all, _ := runJSON(t, "--", prog, t.TempDir())
	// access(2) is faccessat on arm64, which has no access system call.
	access := map[string]string{"amd64": "access", "arm64": "faccessat"}[runtime.GOARCH]
	failedAccess := all.Syscalls[access].Errors // ours 4, plus the loader's
	tests := []struct {
		name   string
		flags  []string
		want   map[string]uint64
		filter report.FilterReport
	}{
		{"names", []string{"-e", "write,read", "--syscall", "openat"},
			map[string]uint64{"write": 13, "read": all.Syscalls["read"].Count, "openat": all.Syscalls["openat"].Count},
			report.FilterReport{Syscalls: []string{"write", "read", "openat"}}},
		{"failed", []string{"-x"}, map[string]uint64{access: failedAccess}, report.FilterReport{Failed: true}},
		{"failed long", []string{"--failed", "-e", "write"}, map[string]uint64{}, report.FilterReport{Syscalls: []string{"write"}, Failed: true}},
		{"errno name", []string{"--errno", "ENOENT"}, map[string]uint64{access: failedAccess}, report.FilterReport{Errno: "ENOENT"}},
		{"errno number", []string{"--errno", "9"}, map[string]uint64{}, report.FilterReport{Errno: "EBADF"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, code := runJSON(t, append(tc.flags, "--", prog, t.TempDir())...)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			got := counts(r)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("syscalls = %v, want %v", got, tc.want)
			}
			if r.Filter == nil || fmt.Sprint(*r.Filter) != fmt.Sprint(tc.filter) {
				t.Errorf("filter = %+v, want %+v", r.Filter, tc.filter)
			}
			// Copies are not filtered.
			if r.Copy.KernelCopyBytes != 3000 {
				t.Errorf("kernel_copy_bytes = %d, want 3000", r.Copy.KernelCopyBytes)
			}
		})
	}
}

// TestPerProcessAndThread: -P splits the C program's calls between it and
// its exec'd child; -T (threads) of single-threaded processes gives the same
// rows keyed by thread id; the rows add up to the table.
func TestPerProcessAndThread(t *testing.T) {
	requireTracing(t)
	prog := syscallsProg(t)
	for _, flags := range [][]string{{"-P"}, {"--by", "process"}, {"-T"}, {"--by", "thread"}} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			r, _ := runJSON(t, append(flags, "--", prog, t.TempDir())...)
			wantBy := "process"
			if flags[0] == "-T" || flags[len(flags)-1] == "thread" {
				wantBy = "thread"
			}
			if r.By != wantBy || len(r.Tasks) != 2 {
				t.Fatalf("by %q, %d tasks, want %q and 2: %+v", r.By, len(r.Tasks), wantBy, r.Tasks)
			}
			parent, child := r.Tasks[0], r.Tasks[1]
			if parent.ID != r.Process.PID || child.ID <= 0 || child.TGID != child.ID {
				t.Errorf("tasks %d (tgid %d), %d (tgid %d); command PID %d", parent.ID, parent.TGID, child.ID, child.TGID, r.Process.PID)
			}
			if parent.Syscalls["write"].Count != 10 || child.Syscalls["write"].Count != 3 ||
				parent.Syscalls["clone"].Count != 1 || child.Syscalls["execve"].Count != 1 {
				t.Errorf("parent %+v\nchild %+v", parent.Syscalls, child.Syscalls)
			}
			sum := map[string]uint64{}
			for _, task := range r.Tasks {
				for n, s := range task.Syscalls {
					sum[n] += s.Count
				}
			}
			if fmt.Sprint(sum) != fmt.Sprint(counts(r)) {
				t.Errorf("tasks add up to %v, table %v", sum, counts(r))
			}
			if child.Comm != "syscalls" {
				t.Errorf("child comm %q", child.Comm)
			}
		})
	}
}

// TestPerThread: two threads of one process writing 5 and 7 times are two
// rows with -T and one with -P.
func TestPerThread(t *testing.T) {
	requireTracing(t)
	prog := syscallsProg(t)
	r, _ := runJSON(t, "-T", "-e", "write", "--", prog, "threads")
	var writes []uint64
	for _, task := range r.Tasks {
		if task.TGID != r.Process.PID {
			t.Errorf("thread %d of process %d, want %d", task.ID, task.TGID, r.Process.PID)
		}
		writes = append(writes, task.Syscalls["write"].Count)
	}
	if fmt.Sprint(writes) != "[5 7]" && fmt.Sprint(writes) != "[7 5]" {
		t.Errorf("per-thread writes %v, want 5 and 7: %+v", writes, r.Tasks)
	}
	r, _ = runJSON(t, "-P", "-e", "write", "--", prog, "threads")
	if len(r.Tasks) != 1 || r.Tasks[0].ID != r.Process.PID || r.Tasks[0].Syscalls["write"].Count != 12 {
		t.Errorf("per-process: %+v, want one row with 12 writes", r.Tasks)
	}
}

func TestLatencyMinAvgMax(t *testing.T) {
	requireTracing(t)
	r, _ := runJSON(t, "--", syscallsProg(t), t.TempDir())
	for name, s := range r.Syscalls {
		if name == "exit" || name == "exit_group" {
			if s.MinNs != 0 || s.MaxNs != 0 {
				t.Errorf("%s timed: %+v", name, s)
			}
			continue
		}
		if s.MinNs == 0 || s.MinNs > s.AvgNs || s.AvgNs > s.MaxNs || s.MaxNs > s.TotalNs {
			t.Errorf("%s: min %d avg %d max %d total %d", name, s.MinNs, s.AvgNs, s.MaxNs, s.TotalNs)
		}
		if s.Count == 1 && (s.MinNs != s.MaxNs || s.MaxNs != s.TotalNs) {
			t.Errorf("%s: one call but min %d max %d total %d", name, s.MinNs, s.MaxNs, s.TotalNs)
		}
	}
}

// TestIntervals: -i prints one compact line per interval, then the report;
// json intervals are one object per line.
func TestIntervals(t *testing.T) {
	requireTracing(t)
	tableLine := regexp.MustCompile(`^\d\d:\d\d:\d\d \+\d+ms: `)
	intervalLines := func(out string) []string {
		var lines []string
		for line := range strings.Lines(out) {
			if tableLine.MatchString(line) || strings.HasPrefix(line, `{"mode":"interval"`) {
				lines = append(lines, line)
			}
		}
		return lines
	}
	for _, format := range []string{"table", "json"} {
		t.Run(format, func(t *testing.T) {
			// The command runs until the test has seen three interval
			// lines (then it creates the file the command waits for):
			// however slow the machine, it outlives three intervals.
			done := filepath.Join(t.TempDir(), "done")
			var stdout bytes.Buffer
			var stderr lockedBuffer
			exit := make(chan int, 1)
			go func() {
				exit <- run([]string{"run", "-o", format, "-i", "100ms", "--", "sh", "-c",
					"while [ ! -e " + done + " ]; do sleep 0.02; done; echo x >/dev/null"}, &stdout, &stderr)
			}()
			deadline := time.Now().Add(2 * time.Minute)
			for len(intervalLines(stderr.String())) < 3 {
				select {
				case code := <-exit:
					t.Fatalf("exit %d before 3 interval lines: %s", code, stderr.String())
				case <-time.After(20 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					_ = os.WriteFile(done, nil, 0o600)
					<-exit
					t.Fatalf("no 3 interval lines in 2 minutes:\n%s", stderr.String())
				}
			}
			if err := os.WriteFile(done, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if code := <-exit; code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			out := stderr.String()
			lines := intervalLines(out)
			for _, bad := range []string{"IO_URING: no requests", "ENGINE: absent"} {
				if n := strings.Count(out, bad); n > 1 {
					t.Errorf("%q printed %d times", bad, n)
				}
			}
			if format == "json" {
				for _, l := range lines {
					var iv report.Interval
					if err := json.Unmarshal([]byte(l), &iv); err != nil || iv.IntervalNs <= 0 {
						t.Errorf("interval line %q: %v", l, err)
					}
				}
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer that one goroutine writes while another
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version", "-version"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d", arg, code)
		}
		if !regexp.MustCompile(`^hcomm-trace \S+, revision \S+.*, go1\.`).MatchString(stdout.String()) {
			t.Errorf("%s: %q", arg, stdout.String())
		}
	}
}

func TestHelpIsComplete(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := stdout.String()
	for _, want := range []string{"run flags:", "attach flags:", "version", "-e value", "-x", "-errno", "-P", "-T", "-by", "-linger", "-prometheus-pid", "-p int", "-d duration", "-out", "-i duration"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in standard error
	}{
		{"no subcommand", nil, "usage:"},
		{"unknown subcommand", []string{"frob"}, `unknown subcommand "frob"`},
		{"run without command", []string{"run"}, "no command"},
		{"attach without pid", []string{"attach"}, "need -p PID"},
		{"bad format", []string{"run", "-o", "xml", "--", "true"}, `-o "xml"`},
		{"negative duration", []string{"attach", "-p", "1", "-d", "-1s"}, "negative"},
		{"negative interval", []string{"run", "-i", "-5s", "--", "true"}, "negative"},
		{"negative top", []string{"run", "-top", "-3", "--", "true"}, "negative"},
		{"negative linger", []string{"run", "--prometheus", ":0", "--linger", "-1s", "--", "true"}, "negative"},
		{"linger without prometheus", []string{"run", "--linger", "1s", "--", "true"}, "--linger needs --prometheus"},
		{"unknown syscall", []string{"run", "-e", "wirte", "--", "true"}, `unknown syscall "wirte"`},
		{"unknown errno", []string{"run", "--errno", "ENOPE", "--", "true"}, `"ENOPE"`},
		{"P and T", []string{"run", "-P", "-T", "--", "true"}, "choose one"},
		{"bad breakdown", []string{"run", "--by", "cpu", "--", "true"}, `--by "cpu"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2; stderr %q", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.want)
			}
		})
	}
}

// TestMissingCommand: 127 when the command does not exist, 126 when it
// cannot be executed, as shells report.
func TestMissingCommand(t *testing.T) {
	requireTracing(t)
	noexec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd  string
		want int
	}{{"hcomm-trace-no-such-command", 127}, {noexec, 126}} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"run", "--", tc.cmd}, &stdout, &stderr); code != tc.want {
			t.Errorf("%s: exit %d, want %d; stderr %q", tc.cmd, code, tc.want, stderr.String())
		}
	}
}

func TestAttachMissingPID(t *testing.T) {
	requireTracing(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"attach", "-p", "4194000"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "no such process") {
		t.Fatalf("exit %d, stderr %q; want 1 and 'no such process'", code, stderr.String())
	}
}

// TestAttachZombieAndThread: a zombie and a thread id are refused with a
// message that says what they are.
func TestAttachZombieAndThread(t *testing.T) {
	requireTracing(t)
	z := exec.Command("true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", z.Process.Pid))
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child did not become a zombie")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"attach", "-p", strconv.Itoa(z.Process.Pid)}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "zombie") {
		t.Errorf("zombie: exit %d, stderr %q", code, stderr.String())
	}

	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	tid := 0
	for _, e := range tasks {
		if n, _ := strconv.Atoi(e.Name()); n != os.Getpid() {
			tid = n
			break
		}
	}
	if tid == 0 {
		t.Fatal("the test process has no second thread")
	}
	stdout.Reset()
	stderr.Reset()
	code := run([]string{"attach", "-p", strconv.Itoa(tid)}, &stdout, &stderr)
	if want := fmt.Sprintf("thread of process %d", os.Getpid()); code != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("thread: exit %d, stderr %q, want %q", code, stderr.String(), want)
	}
}

// TestPrometheusBusyPortBeforeCommand: a port already taken fails before
// the command runs.
func TestPrometheusBusyPortBeforeCommand(t *testing.T) {
	requireTracing(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	marker := filepath.Join(t.TempDir(), "ran")
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "--prometheus", ln.Addr().String(), "--", "sh", "-c", "touch " + marker}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "--prometheus") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although the metrics address was busy")
	}
}

// TestPrometheusEndpoint runs the binary with --prometheus and --linger and
// scrapes it after the command has exited: histograms, page-fault labels,
// build_info, the landing page, and a pid label only with --prometheus-pid.
func TestPrometheusEndpoint(t *testing.T) {
	requireTracing(t)
	bin, _ := binaries(t)
	for _, pidLabel := range []bool{false, true} {
		t.Run(fmt.Sprintf("pid=%v", pidLabel), func(t *testing.T) {
			args := []string{"run", "--prometheus", "127.0.0.1:0", "--linger", "30s", "-out", os.DevNull}
			if pidLabel {
				args = append(args, "--prometheus-pid")
			}
			cmd := exec.Command(bin, append(args, "--", "sh", "-c", "for i in 1 2 3; do echo; done >/dev/null")...)
			errPipe, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			// Wait for the lingering line: the command has exited then.
			var addr string
			sc := bufio.NewScanner(errPipe)
			for sc.Scan() {
				if m := regexp.MustCompile(`final metrics on http://(\S+)/metrics`).FindStringSubmatch(sc.Text()); m != nil {
					addr = m[1]
					break
				}
			}
			if addr == "" {
				t.Fatal("no lingering metrics line")
			}
			go io.Copy(io.Discard, errPipe)
			metrics := get(t, "http://"+addr+"/metrics")
			for _, want := range []string{
				`hcomm_trace_syscall_duration_seconds_bucket{comm="sh",syscall="write",le="2.56e-07"}`,
				`hcomm_trace_syscalls_total{comm="sh",syscall="write"} 3` + "\n",
				`hcomm_trace_page_faults_total{access="read",comm="sh"}`,
				`hcomm_trace_page_faults_total{access="instruction",comm="sh"}`,
				`hcomm_trace_build_info{goversion="go1.`,
				`direction="kernel_to_kernel"`,
			} {
				if pidLabel {
					want = strings.Replace(want, `comm="sh"`, `comm="sh",pid="`, 1)
					if i := strings.Index(want, `pid="`); i >= 0 {
						want = want[:i+5] // the PID is not known here
					}
				}
				if !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			if hasPID := strings.Contains(metrics, `pid="`); hasPID != pidLabel {
				t.Errorf("pid label present = %v, want %v", hasPID, pidLabel)
			}
			if page := get(t, "http://"+addr+"/"); !strings.Contains(page, `href="/metrics"`) || !strings.Contains(page, "hcomm-trace") {
				t.Errorf("landing page: %q", page)
			}
		})
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// TestNotRootFailsClearly runs hcomm-trace without privileges: in-process
// when the test itself is not root, else as user nobody.
func TestNotRootFailsClearly(t *testing.T) {
	var stderr string
	var code int
	if os.Geteuid() != 0 {
		var out, errb bytes.Buffer
		code = run([]string{"run", "-o", "json", "--", "true"}, &out, &errb)
		stderr = errb.String()
	} else {
		bin, _ := binaries(t)
		cmd := exec.Command(bin, "run", "-o", "json", "--", "true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		stderr = errb.String()
		code = cmd.ProcessState.ExitCode()
		if err == nil {
			t.Fatal("hcomm-trace succeeded as user nobody")
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr %q", code, stderr)
	}
	if !strings.Contains(stderr, "CAP_BPF") || !strings.Contains(stderr, "CAP_PERFMON") {
		t.Errorf("stderr does not name the missing capabilities: %q", stderr)
	}
}
