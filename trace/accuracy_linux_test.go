package trace

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/bpf"
	"github.com/hcomm-go/hcomm/internal/testutil"
)

var (
	workloadOnce sync.Once
	workloadPath string
	workloadErr  error
)

// workload builds trace/testdata/workload once per test binary.
func workload(t *testing.T) string {
	t.Helper()
	workloadOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hcomm-trace-workload-")
		if err != nil {
			workloadErr = err
			return
		}
		workloadPath = filepath.Join(dir, "workload")
		cmd := exec.Command("go", "build", "-o", workloadPath, "./testdata/workload")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			workloadErr = err
			t.Logf("go build workload: %s", out)
		}
	})
	if workloadErr != nil {
		t.Fatalf("build workload helper: %v", workloadErr)
	}
	return workloadPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if workloadPath != "" {
		os.RemoveAll(filepath.Dir(workloadPath))
	}
	os.Exit(code)
}

func requireTracing(t *testing.T) {
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
	if got := s.CopyBytes(bpf.SrcSyscall, bpf.DirUserToKernel, bpf.ClassCopy); got != n*k {
		t.Errorf("user->kernel copy bytes = %d, want %d", got, n*k)
	}
	if got := s.CopyBytes(bpf.SrcSyscall, bpf.DirUserToKernel, bpf.ClassDirect); got != 0 {
		t.Errorf("direct bytes = %d, want 0", got)
	}
}
