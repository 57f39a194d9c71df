package nvme_test

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// straceReport is what straceStacks saw: each system call counted by the
// stack it was made from.
type straceReport struct {
	calls  map[string]int // by name
	stacks map[string]int // by "name ← frame ← frame …"
}

// straceStacks runs fn with `strace -f -k` attached to this process (every
// thread, and threads started meanwhile) and counts each system call made
// during fn by its stack (see parseStraceStacks). It fails the test when
// strace is missing or cannot attach, and returns nil (the test marked
// failed) when its output cannot be read.
func straceStacks(t *testing.T, fn func()) *straceReport {
	t.Helper()
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatalf("HCOMM_BENCH_VM_STRACE=1: %v", err)
	}
	out := filepath.Join(t.TempDir(), "strace.txt")
	cmd := exec.Command("strace", "-f", "-k", "-qq", "-o", out, "-p", strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	// Attached once every thread has it as its tracer. The deadline only
	// bounds a strace that cannot attach (it then fails the test).
	for deadline := time.Now().Add(60 * time.Second); !allTraced(); {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("strace did not attach to every thread within 60 s: %s", stderr.Bytes())
		}
		time.Sleep(10 * time.Millisecond)
	}
	attached := time.Now()
	fn()
	ran := time.Now()
	// SIGINT: strace detaches from every thread and exits.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	t.Logf("strace: attached in %v, the row ran %v, detached in %v", attached.Sub(start).Round(time.Millisecond), ran.Sub(attached).Round(time.Millisecond), time.Since(ran).Round(time.Millisecond))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseStraceStacks(bytes.NewReader(b), selfResolver(t))
	if err != nil {
		head := b[:min(len(b), 2000)]
		t.Errorf("strace (exit: %v; stderr: %q): %v; its output (%d bytes) begins:\n%s", werr, stderr.Bytes(), err, len(b), head)
		return nil
	}
	return r
}

// selfResolver names a code address of this executable as strace prints
// it (a file offset) when the binary has no symbol table for strace (go
// test links with -s -w): through the mapping of /proc/self/exe that holds
// the offset, and the runtime's own function table.
func selfResolver(t *testing.T) func(off uint64) string {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	type mapping struct{ start, end, off uint64 }
	var ms []mapping
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			ms = append(ms, mapping{start, end, off})
		}
	}
	return func(off uint64) string {
		for _, m := range ms {
			if off < m.off || off >= m.off+(m.end-m.start) {
				continue
			}
			// A return address but for the innermost frame: CallersFrames
			// looks at the call before it, and names the functions
			// inlined there too (innermost first).
			var names []string
			frames := runtime.CallersFrames([]uintptr{uintptr(m.start + off - m.off)})
			for {
				f, more := frames.Next()
				if f.Function != "" {
					names = append(names, shortName(f.Function))
				}
				if !more {
					break
				}
			}
			return strings.Join(names, " ← ")
		}
		return ""
	}
}

// allTraced reports whether every thread of this process has a tracer.
func allTraced() bool {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		_, after, ok := strings.Cut(string(b), "\nTracerPid:")
		if !ok {
			return false
		}
		pid, _, _ := strings.Cut(strings.TrimSpace(after), "\n")
		if pid == "0" {
			return false
		}
	}
	return true
}

// maxFrames is how many frames a stack key keeps at most.
const maxFrames = 12

// parseStraceStacks reads the output of strace -f -k: a call's line ("PID
// name(args) = ret", or "PID <... name resumed> ..." for one that was
// interrupted, whose "<unfinished ...>" line has no stack) followed by its
// stack, " > /path/binary(function+0xoff) [0xaddr]" from the innermost
// frame. A stack is keyed by the call's name and its functions up to and
// including the first outside the Go runtime (the caller that made the
// runtime call), package paths cut to their last element.
func parseStraceStacks(r io.Reader, resolve func(off uint64) string) (*straceReport, error) {
	rep := &straceReport{calls: map[string]int{}, stacks: map[string]int{}}
	var name string
	var frames []string
	done := false // the current stack reached a non-runtime frame
	flush := func() {
		if name == "" {
			return
		}
		rep.calls[name]++
		rep.stacks[strings.Join(append([]string{name}, frames...), " ← ")]++
		name, frames, done = "", frames[:0], false
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, " > "); ok {
			if name == "" || done || len(frames) == maxFrames {
				continue
			}
			fn := stackFunction(rest, resolve)
			frames = append(frames, fn)
			// The frame's own function is the last of an inlined chain.
			if k := strings.LastIndex(fn, " ← "); k >= 0 {
				fn = fn[k+len(" ← "):]
			}
			done = !runtimeFrame(fn)
			continue
		}
		flush()
		// "PID call…" (several threads traced), or "call…" (one).
		call := line
		if pid, rest, ok := strings.Cut(line, " "); ok && pid != "" && strings.Trim(pid, "0123456789") == "" {
			call = strings.TrimLeft(rest, " ") // strace pads the PID
		}
		switch {
		case strings.HasPrefix(call, "<... "):
			call = strings.TrimPrefix(call, "<... ")
			if n, _, ok := strings.Cut(call, " resumed>"); ok {
				name = n
			}
		case strings.HasPrefix(call, "---"), strings.HasPrefix(call, "+++"), strings.Contains(call, "<unfinished ...>"):
			// a signal, an exit, or a call whose stack follows its
			// "resumed" line
		default:
			if n, _, ok := strings.Cut(call, "("); ok && n != "" && !strings.ContainsAny(n, " <>") {
				name = n
			}
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rep.calls) == 0 {
		return nil, fmt.Errorf("strace recorded no system calls")
	}
	return rep, nil
}

// stackFunction is the function of one stack line, "/path(fn+0x1f)
// [0xoff]", without its offset, ABI suffix and package path; "/path()
// [0xoff]" (no symbol table) is named by resolve (when not nil) from the
// file offset; "unknown" when neither names it.
func stackFunction(s string, resolve func(uint64) string) string {
	i, j := strings.Index(s, "("), strings.LastIndex(s, ") [")
	if i < 0 || j < i {
		return "unknown"
	}
	fn, rest := s[i+1:j], s[j+1:]
	if k := strings.LastIndex(fn, "+0x"); k >= 0 {
		fn = fn[:k]
	}
	if fn == "" && resolve != nil {
		if _, a, ok := strings.Cut(rest, "[0x"); ok {
			a, _, _ = strings.Cut(a, "]")
			if off, err := strconv.ParseUint(a, 16, 64); err == nil {
				fn = resolve(off)
			}
		}
	}
	if fn == "" {
		return "unknown"
	}
	return shortName(fn)
}

// shortName is a function's name without its ABI suffix and package path.
func shortName(fn string) string {
	fn = strings.TrimSuffix(fn, ".abi0")
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		fn = fn[i+1:]
	}
	return fn
}

// runtimeFrame: a function of the Go runtime or of the system-call
// wrappers, which a stack key goes past to find who called them.
func runtimeFrame(fn string) bool {
	for _, p := range []string{"runtime.", "syscall.", "linux.", "unix.", "atomic.", "sync.", "time.", "poll.", "os."} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// log prints the calls per I/O and the most frequent stacks.
func (r *straceReport) log(t *testing.T, label string, ios int) {
	t.Helper()
	type kv struct {
		k string
		n int
	}
	sorted := func(m map[string]int) []kv {
		var s []kv
		for k, n := range m {
			s = append(s, kv{k, n})
		}
		slices.SortFunc(s, func(a, b kv) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.k, b.k)) })
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nunder strace -f -k: %s, %d I/Os\n\ncalls per I/O:", label, ios)
	total := 0
	for _, c := range sorted(r.calls) {
		fmt.Fprintf(&b, " %s %.3f", c.k, float64(c.n)/float64(max(ios, 1)))
		total += c.n
	}
	fmt.Fprintf(&b, " (all %.3f)\n\n| calls | per I/O | share | call ← stack (innermost first, to the first caller outside the runtime) |\n|---:|---:|---:|---|\n", float64(total)/float64(max(ios, 1)))
	for i, s := range sorted(r.stacks) {
		if i == 25 {
			break
		}
		fmt.Fprintf(&b, "| %d | %.3f | %.1f%% | %s |\n", s.n, float64(s.n)/float64(max(ios, 1)), 100*float64(s.n)/float64(total), s.k)
	}
	t.Log(b.String())
}
