package trace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

var (
	helpersOnce  sync.Once
	helpersDir   string
	helpersErr   error
	workloadPath string
	hcommPath    string
)

// buildHelpers builds trace/testdata/workload (no hcomm imports: exact
// counts) and trace/testdata/hcommload (runs ring and engine) once per test
// binary, or takes them prebuilt (testutil.HelpersEnv; testdata/vm-helpers).
func buildHelpers(t testing.TB) {
	t.Helper()
	helpersOnce.Do(func() {
		helpersDir, helpersErr = os.MkdirTemp("", "hcomm-trace-helpers-")
		if helpersErr != nil {
			return
		}
		build := func(pkg string) func(string) error {
			return func(out string) error {
				cmd := exec.Command("go", "build", "-o", out, pkg)
				cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
				if b, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
				}
				return nil
			}
		}
		if workloadPath, helpersErr = testutil.Helper(helpersDir, "workload", build("./testdata/workload")); helpersErr != nil {
			return
		}
		hcommPath, helpersErr = testutil.Helper(helpersDir, "hcommload", build("./testdata/hcommload"))
	})
	if helpersErr != nil {
		t.Fatalf("build test helpers: %v", helpersErr)
	}
}

// workload is the path of the quiet helper.
func workload(t testing.TB) string { buildHelpers(t); return workloadPath }

// hcommload is the path of the helper that runs hcomm's packages.
func hcommload(t testing.TB) string { buildHelpers(t); return hcommPath }

func TestMain(m *testing.M) {
	code := m.Run()
	if helpersDir != "" {
		os.RemoveAll(helpersDir)
	}
	os.Exit(code)
}

func requireTracing(t testing.TB) {
	t.Helper()
	testutil.RequirePrivileged(t, "load eBPF tracing programs")
	testutil.RequireFeature(t, "eBPF tracing (CAP_BPF, CAP_PERFMON)", CheckPrivileges())
}

// runTraced runs the workload with args under StartCommand and returns the
// final snapshot. While it runs, this test process makes noise of its own
// (writes to /dev/null) that must not be counted.
func runTraced(t *testing.T, opts Options, args ...string) (*Session, *Snapshot) {
	t.Helper()
	requireTracing(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		noise(stop)
	}()
	defer func() { close(stop); wg.Wait() }()

	var stderr = os.Stderr
	s, err := StartCommand(append([]string{workload(t)}, args...), CommandIO{Stderr: stderr}, opts)
	if err != nil {
		t.Fatalf("StartCommand: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, err := s.Wait(ctx)
	if err != nil || code != 0 {
		t.Fatalf("workload %v: exit %d, %v", args, code, err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return s, snap
}

// noise writes to /dev/null from this (untraced) process until stop closes.
func noise(stop chan struct{}) {
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	buf := make([]byte, 333)
	for {
		select {
		case <-stop:
			return
		default:
		}
		for i := 0; i < 100; i++ {
			f.Write(buf)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWriteDevNullExact(t *testing.T) {
	const n, k = 1000, 100
	_, s := runTraced(t, Options{}, "write", "/dev/null", "1000", "100")
	if got := s.SyscallCount(unix.SYS_WRITE); got != n {
		t.Errorf("write count = %d, want %d", got, n)
	}
	if got := s.Syscalls[unix.SYS_WRITE].Errors; got != 0 {
		t.Errorf("write errors = %d, want 0", got)
	}
	if got := s.Bytes(SourceSyscall, UserToKernel, ClassCopy); got != n*k {
		t.Errorf("user->kernel copy bytes = %d, want %d", got, n*k)
	}
	if got := s.Bytes(SourceSyscall, UserToKernel, ClassDirect); got != 0 {
		t.Errorf("direct bytes = %d, want 0", got)
	}
}

// directDir returns a directory on a file system whose O_DIRECT really
// bypasses the page cache (ext4, xfs, btrfs; not tmpfs, which accepts the
// flag since 6.6 but still copies).
func directDir(t *testing.T) string {
	t.Helper()
	fsOK := map[int64]string{0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs"}
	var tried []string
	for _, d := range []string{t.TempDir(), "/var/tmp", "."} {
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); err != nil {
			continue
		}
		if _, ok := fsOK[int64(st.Type)]; ok {
			if d == t.TempDir() {
				return d
			}
			dir, err := os.MkdirTemp(d, "hcomm-trace-direct-")
			if err != nil {
				continue
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
		tried = append(tried, d)
	}
	testutil.RequireFeature(t, "a directory on ext4/xfs/btrfs for O_DIRECT", errNoDirectFS(tried))
	return ""
}

type errNoDirectFS []string

// Unwrap makes the missing file system a missing feature for
// testutil.RequireFeature.
func (errNoDirectFS) Unwrap() error { return errors.ErrUnsupported }

func (e errNoDirectFS) Error() string {
	return "none of these is on ext4, xfs or btrfs: " + strings.Join(e, "; ")
}

func TestWriteODirectCountsDirectNotCopy(t *testing.T) {
	requireTracing(t)
	const n, k = 64, 4096
	path := filepath.Join(directDir(t), "direct.dat")
	_, s := runTraced(t, Options{}, "write", path, "64", "4096", "direct")
	if got := s.SyscallCount(unix.SYS_WRITE); got != n {
		t.Errorf("write count = %d, want %d", got, n)
	}
	if got := s.Bytes(SourceSyscall, UserToKernel, ClassDirect); got != n*k {
		t.Errorf("direct bytes = %d, want %d", got, n*k)
	}
	if got := s.Bytes(SourceSyscall, UserToKernel, ClassCopy); got != 0 {
		t.Errorf("user->kernel copy bytes = %d, want 0 (O_DIRECT is DMA, not a CPU copy)", got)
	}
}

// TestWriteODirectBlockDeviceCountsDirect: O_DIRECT writes to a block
// device are DMA whatever file system holds the device node (devtmpfs
// carries tmpfs's magic): a loop device with direct I/O over a file here.
func TestWriteODirectBlockDeviceCountsDirect(t *testing.T) {
	requireTracing(t)
	// A machine without losetup or loop devices (a minimal guest) lacks
	// the feature, not a privilege: skipped with the reason.
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skipf("no losetup (util-linux) for a loop device: %v", err)
	}
	const n, k = 64, 4096
	back := filepath.Join(directDir(t), "loop-backing.dat")
	if err := os.WriteFile(back, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", back).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device: losetup --find --direct-io=on: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", dev, err, out)
		}
	})
	_, s := runTraced(t, Options{}, "write", dev, "64", "4096", "direct")
	if got := s.Bytes(SourceSyscall, UserToKernel, ClassDirect); got != n*k {
		t.Errorf("direct bytes to %s = %d, want %d", dev, got, n*k)
	}
	if got := s.Bytes(SourceSyscall, UserToKernel, ClassCopy); got != 0 {
		t.Errorf("user->kernel copy bytes = %d, want 0 (O_DIRECT to a block device is DMA)", got)
	}
}

func TestURingNopExact(t *testing.T) {
	const n = 200
	_, s := runTraced(t, Options{}, "uring-nop", "200")
	nop := s.URing[0]
	if nop.Submitted != n || nop.Completed != n || nop.Errors != 0 {
		t.Errorf("NOP submitted/completed/errors = %d/%d/%d, want %d/%d/0", nop.Submitted, nop.Completed, nop.Errors, n, n)
	}
	if got := s.SyscallCount(unix.SYS_IO_URING_ENTER); got != n {
		t.Errorf("io_uring_enter count = %d, want %d", got, n)
	}
	var lat uint64
	for _, c := range nop.Hist {
		lat += c
	}
	if lat != n {
		t.Errorf("NOP latency samples = %d, want %d", lat, n)
	}
}

func TestURingWriteFixedExact(t *testing.T) {
	requireTracing(t)
	const n, k = 100, 8192
	dir := t.TempDir()
	tests := []struct {
		name   string
		path   string
		direct bool
		class  Class
	}{
		{"devnull", "/dev/null", false, ClassCopy},
		{"pagecache", filepath.Join(dir, "fixed.dat"), false, ClassCopy},
		{"odirect", filepath.Join(directDir(t), "fixed-direct.dat"), true, ClassDirect},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"uring-write-fixed", tc.path, "100", "8192"}
			if tc.direct {
				args = append(args, "direct")
			}
			_, s := runTraced(t, Options{}, args...)
			w := s.URing[5] // IORING_OP_WRITE_FIXED
			if w.Submitted != n || w.Completed != n || w.Errors != 0 {
				t.Errorf("WRITE_FIXED submitted/completed/errors = %d/%d/%d, want %d/%d/0", w.Submitted, w.Completed, w.Errors, n, n)
			}
			if w.Bytes != n*k || w.FixedBytes != n*k || w.FixedReqs != n {
				t.Errorf("WRITE_FIXED bytes/fixed_bytes/fixed_reqs = %d/%d/%d, want %d/%d/%d", w.Bytes, w.FixedBytes, w.FixedReqs, n*k, n*k, n)
			}
			other := ClassCopy
			if tc.class == ClassCopy {
				other = ClassDirect
			}
			if got := s.Bytes(SourceIOURing, UserToKernel, tc.class); got != n*k {
				t.Errorf("io_uring user->kernel class %v bytes = %d, want %d", tc.class, got, n*k)
			}
			if got := s.Bytes(SourceIOURing, UserToKernel, other); got != 0 {
				t.Errorf("io_uring user->kernel class %v bytes = %d, want 0", other, got)
			}
			if s.URing[0].Submitted != 0 {
				t.Errorf("NOPs counted: %d", s.URing[0].Submitted)
			}
		})
	}
}

func TestEngineHooksExact(t *testing.T) {
	const b = 50
	hooks := Hooks{SubmitBatch: "main.hookSubmitBatch", ReapBatch: "main.hookReapBatch"}
	sess, s := runTraced(t, Options{Hooks: hooks}, "hooks", "50")
	if st := sess.Engine(); !st.Present {
		t.Fatalf("engine hooks not attached: %s", st.Reason)
	}
	var transfers, bytes, errs uint64
	var paths [3]uint64
	for i := 0; i < b; i++ {
		c := uint64(i%7 + 1)
		transfers += c
		bytes += c * 4096
		errs += uint64(i % 2)
		paths[i%3]++
	}
	e := s.Engine
	if e.SubmitBatches != b || e.SubmitTransfers != transfers || e.SubmitBytes != bytes {
		t.Errorf("submit batches/transfers/bytes = %d/%d/%d, want %d/%d/%d", e.SubmitBatches, e.SubmitTransfers, e.SubmitBytes, b, transfers, bytes)
	}
	if e.ReapBatches != b || e.ReapCompletions != transfers || e.ReapErrors != errs {
		t.Errorf("reap batches/completions/errors = %d/%d/%d, want %d/%d/%d", e.ReapBatches, e.ReapCompletions, e.ReapErrors, b, transfers, errs)
	}
	for p := range paths {
		if e.PathBatches[p] != paths[p] {
			t.Errorf("path %d batches = %d, want %d", p, e.PathBatches[p], paths[p])
		}
	}
}

func TestEngineAbsentWithoutSymbols(t *testing.T) {
	requireTracing(t)
	// /bin/true is stripped: no symbol table, no engine hooks.
	sess, err := StartCommand([]string{"true"}, CommandIO{}, Options{})
	if err != nil {
		t.Fatalf("StartCommand: %v", err)
	}
	defer sess.Close()
	if code, err := sess.Wait(context.Background()); err != nil || code != 0 {
		t.Fatalf("true: %d, %v", code, err)
	}
	s, err := sess.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	st := sess.Engine()
	if st.Present {
		t.Fatalf("engine reported present in a binary without %s", HookSubmitBatch)
	}
	if st.Reason == "" {
		t.Error("no reason given for the absent engine")
	}
	if s.Engine.SubmitBatches != 0 {
		t.Errorf("engine batches counted without hooks: %d", s.Engine.SubmitBatches)
	}
	if s.SyscallCount(unix.SYS_EXECVE) != 1 || s.SyscallCount(unix.SYS_EXIT_GROUP) != 1 {
		t.Errorf("execve %d, exit_group %d, want 1 and 1: the rest of the trace must work",
			s.SyscallCount(unix.SYS_EXECVE), s.SyscallCount(unix.SYS_EXIT_GROUP))
	}
}

// TestAttachCountsOnlyThatProcess attaches by PID to a workload waiting on
// stdin, releases it, and checks exact counts while a second, untraced
// workload does the same work.
func TestAttachCountsOnlyThatProcess(t *testing.T) {
	requireTracing(t)
	const n = 300
	start := func() (*exec.Cmd, *os.File) {
		cmd := exec.Command(workload(t), "write", "/dev/null", "300", "10")
		cmd.Env = append(os.Environ(), "WORKLOAD_WAIT=1")
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin, cmd.Stderr = r, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		return cmd, w
	}
	traced, tw := start()
	other, ow := start()
	// Attach once the helper is blocked in its wait read(2) on stdin: its
	// start-up is over.
	waitInRead(t, traced.Process.Pid)
	sess, err := Attach(traced.Process.Pid, Options{})
	if err != nil {
		traced.Process.Kill()
		other.Process.Kill()
		t.Fatalf("Attach: %v", err)
	}
	defer sess.Close()
	tw.Write([]byte{1})
	ow.Write([]byte{1})
	tw.Close()
	ow.Close()
	if err := traced.Wait(); err != nil {
		t.Fatalf("traced workload: %v", err)
	}
	if err := other.Wait(); err != nil {
		t.Fatalf("other workload: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sess.Wait(ctx); err == nil || !errorsIs(err, ErrProcessGone) {
		t.Errorf("Wait after exit = %v, want ErrProcessGone", err)
	}
	s, err := sess.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.SyscallCount(unix.SYS_WRITE); got != n {
		t.Errorf("write count = %d, want %d (only the attached process)", got, n)
	}
	// The wait read(2) was entered before the attach: a syscall in progress
	// when tracing starts is not counted (no entry timestamp).
	if got := s.SyscallCount(unix.SYS_READ); got != 0 {
		t.Errorf("read count = %d, want 0 (the wait read began before the attach)", got)
	}
	if got := s.Bytes(SourceSyscall, UserToKernel, ClassCopy); got != n*10 {
		t.Errorf("user->kernel bytes = %d, want %d", got, n*10)
	}
}

func TestAttachMissingPID(t *testing.T) {
	requireTracing(t)
	// Find a PID that does not exist.
	pid := 1 << 22
	for ; pid > 1000; pid-- {
		if unix.Kill(pid, 0) == unix.ESRCH {
			break
		}
	}
	_, err := Attach(pid, Options{})
	if !errorsIs(err, ErrProcessGone) {
		t.Fatalf("Attach(%d) = %v, want ErrProcessGone", pid, err)
	}
}

var errorsIs = errors.Is

// TestRingLayerEntersMatchKernel runs NOPs through hcomm's own io_uring
// layer (uring.Ring) and checks its count of io_uring_enter calls against
// the kernel's, and the NOP counts against what was submitted: one enter
// per batch of 64.
func TestRingLayerEntersMatchKernel(t *testing.T) {
	requireTracing(t)
	const n, batch = 1000, 64
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartCommand([]string{hcommload(t), "ring-nop", "1000", "64"}, CommandIO{Stdout: w, Stderr: os.Stderr}, Options{})
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("StartCommand: %v", err)
	}
	defer s.Close()
	out, _ := io.ReadAll(r)
	r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code, err := s.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("workload: exit %d, %v", code, err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var enters, completions uint64
	if _, err := fmt.Sscan(string(out), &enters, &completions); err != nil {
		t.Fatalf("parse workload output %q: %v", out, err)
	}
	if completions != n {
		t.Fatalf("ring reaped %d completions, want %d", completions, n)
	}
	if got := snap.SyscallCount(unix.SYS_IO_URING_ENTER); got != enters {
		t.Errorf("kernel saw %d io_uring_enter, uring.Ring counted %d", got, enters)
	}
	if want := uint64((n + batch - 1) / batch); enters != want {
		t.Errorf("uring.Ring made %d enters for %d NOPs in batches of %d, want %d", enters, n, batch, want)
	}
	if nop := snap.URing[0]; nop.Submitted != n || nop.Completed != n {
		t.Errorf("NOP submitted/completed = %d/%d, want %d", nop.Submitted, nop.Completed, n)
	}
}

// runWorkloadOutput runs bin with args under StartCommand and returns its
// standard output and the final snapshot.
func runWorkloadOutput(t testing.TB, opts Options, bin string, args ...string) (*Session, string, *Snapshot) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartCommand(append([]string{bin}, args...), CommandIO{Stdout: w, Stderr: os.Stderr}, opts)
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("StartCommand: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	out, _ := io.ReadAll(r)
	r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code, err := s.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("workload %v: exit %d, %v", args, code, err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s, string(out), snap
}

// TestEngineRealHooks runs B batches through the real engine (vfio-mock,
// DMA path) with the default hook symbols: the uprobes must see exactly the
// batches and transfers the engine itself counted.
func TestEngineRealHooks(t *testing.T) {
	requireTracing(t)
	const b = 50
	sess, out, s := runWorkloadOutput(t, Options{}, hcommload(t), "engine", "50")
	if st := sess.Engine(); !st.Present {
		t.Fatalf("engine hooks not found in a binary linking the engine: %s", st.Reason)
	}
	var batches, transfers, bytes, completed, reaps uint64
	if _, err := fmt.Sscan(out, &batches, &transfers, &bytes, &completed, &reaps); err != nil {
		t.Fatalf("parse %q: %v", out, err)
	}
	var want uint64
	for i := 0; i < b; i++ {
		want += uint64(i%7 + 1)
	}
	if batches != b || transfers != want {
		t.Fatalf("engine's own stats: %d batches, %d transfers; the workload made %d, %d", batches, transfers, b, want)
	}
	e := s.Engine
	if e.SubmitBatches != batches || e.SubmitTransfers != transfers || e.SubmitBytes != bytes {
		t.Errorf("uprobes: %d batches, %d transfers, %d bytes; engine: %d, %d, %d", e.SubmitBatches, e.SubmitTransfers, e.SubmitBytes, batches, transfers, bytes)
	}
	if e.PathBatches[EnginePathDMA] != b {
		t.Errorf("DMA-path batches = %d, want %d", e.PathBatches[EnginePathDMA], b)
	}
	if e.ReapBatches != reaps || e.ReapCompletions != completed || e.ReapErrors != 0 {
		t.Errorf("uprobes: %d reap batches, %d completions, %d errors; engine: %d, %d, 0", e.ReapBatches, e.ReapCompletions, e.ReapErrors, reaps, completed)
	}
}

// runtimeReads is what every Go program copies in at start-up: the runtime
// reads the THP page size, /proc/self/cgroup and mountinfo (read) and the
// cgroup CPU quota and period (pread64). The helpers never use those two
// syscalls for their work; the kernel->user copy counts include them.
func runtimeReads(s *Snapshot) uint64 {
	return s.Syscalls[unix.SYS_READ].Bytes + s.Syscalls[unix.SYS_PREAD64].Bytes
}

func TestReadDirectAndPageCache(t *testing.T) {
	requireTracing(t)
	const n, k = 32, 4096
	path := filepath.Join(directDir(t), "read.dat")
	if err := os.WriteFile(path, make([]byte, n*k), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		direct bool
	}{{"odirect", true}, {"pagecache", false}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"readv", path, "32", "4096"}
			if tc.direct {
				args = append(args, "direct")
			}
			_, s := runTraced(t, Options{}, args...)
			if got := s.SyscallCount(unix.SYS_READV); got != n {
				t.Errorf("readv count = %d, want %d", got, n)
			}
			if got := s.Syscalls[unix.SYS_READV].Bytes; got != n*k {
				t.Errorf("readv bytes = %d, want %d", got, n*k)
			}
			direct := s.Bytes(SourceSyscall, KernelToUser, ClassDirect)
			copied := s.Bytes(SourceSyscall, KernelToUser, ClassCopy) - runtimeReads(s)
			wantDirect, wantCopy := uint64(0), uint64(n*k)
			if tc.direct {
				wantDirect, wantCopy = n*k, 0
			}
			if direct != wantDirect || copied != wantCopy {
				t.Errorf("kernel->user direct/copy = %d/%d, want %d/%d", direct, copied, wantDirect, wantCopy)
			}
		})
	}
}

// TestSocketCopiesIncludingMmsg checks the bytes of sendto/recvfrom and of
// sendmmsg/recvmmsg (summed from each message's msg_len).
func TestSocketCopiesIncludingMmsg(t *testing.T) {
	const n, k = 64, 1000
	_, s := runTraced(t, Options{}, "socket", "64", "1000")
	for _, c := range []struct {
		nr   int
		want uint64
	}{{unix.SYS_SENDTO, n}, {unix.SYS_RECVFROM, n}, {unix.SYS_SENDMMSG, n / 4}, {unix.SYS_RECVMMSG, n / 4}} {
		if got := s.SyscallCount(c.nr); got != c.want {
			t.Errorf("%s count = %d, want %d", SyscallName(c.nr), got, c.want)
		}
	}
	if got := s.Syscalls[unix.SYS_SENDMMSG].Bytes; got != n*k {
		t.Errorf("sendmmsg bytes = %d, want %d (4 messages per call)", got, n*k)
	}
	if got := s.Syscalls[unix.SYS_RECVMMSG].Bytes; got != n*k {
		t.Errorf("recvmmsg bytes = %d, want %d", got, n*k)
	}
	if got := s.Bytes(SourceSyscall, UserToKernel, ClassCopy); got != 2*n*k {
		t.Errorf("user->kernel copy = %d, want %d", got, 2*n*k)
	}
	if got := s.Bytes(SourceSyscall, KernelToUser, ClassCopy) - runtimeReads(s); got != 2*n*k {
		t.Errorf("kernel->user copy (without read(2)) = %d, want %d", got, 2*n*k)
	}
}

// TestPageFaults touches N fresh pages in a helper attached to once its
// start-up is over (it waits in read(2) on stdin): N write faults, plus at
// most a few of the Go runtime's own (stack, exit).
func TestPageFaults(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		// The report lists "page_fault_user: not in this kernel" there.
		t.Skip("user page faults come from page_fault_user, an x86-only tracepoint: not counted on " + runtime.GOARCH)
	}
	requireTracing(t)
	const n = 5000
	cmd := exec.Command(workload(t), "touch", "5000")
	cmd.Env = append(os.Environ(), "WORKLOAD_WAIT=1")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	waitInRead(t, cmd.Process.Pid)
	sess, err := Attach(cmd.Process.Pid, Options{})
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("Attach: %v", err)
	}
	defer sess.Close()
	w.Write([]byte{1})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	s, err := sess.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("faults: %d total, %d on write, %d instruction fetches", s.Faults.Total, s.Faults.Write, s.Faults.Instr)
	if s.Faults.Write < n || s.Faults.Write > n+100 {
		t.Errorf("write faults = %d, want %d (+ at most 100 of the runtime's own)", s.Faults.Write, n)
	}
	if s.Faults.Total < s.Faults.Write {
		t.Errorf("total faults %d < write faults %d", s.Faults.Total, s.Faults.Write)
	}
}

// waitInRead waits until pid is blocked in read(2) on fd 0.
func waitInRead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		// The Go runtime may block in read(2) on any of its threads.
		var seen []string
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
			if strings.HasPrefix(string(b), fmt.Sprintf("%d 0x0 ", SyscallNumber("read"))) {
				return
			}
			seen = append(seen, task.Name()+": "+strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatalf("PID %d never blocked in read(0, ...): its threads' /proc/PID/task/TID/syscall: %q", pid, seen)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
