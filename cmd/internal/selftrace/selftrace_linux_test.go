package selftrace

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/trace"
)

// The test binary is also the child: with SELFTRACE_CHILD set it runs
// childMain instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("SELFTRACE_CHILD") != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

const childCalls = 1000

// childMain does noise before and after the window and exactly childCalls
// getppid(2) calls inside it.
func childMain() int {
	for range 50 {
		unix.Getppid()
	}
	if err := Begin(); err != nil {
		return 1
	}
	for range childCalls {
		unix.Getppid()
	}
	if err := End(); err != nil {
		return 1
	}
	for range 50 {
		unix.Getppid()
	}
	if err := Report(map[string]int{"calls": childCalls}); err != nil {
		return 1
	}
	return 0
}

func TestWindowCountsExactly(t *testing.T) {
	testutil.RequirePrivileged(t, "eBPF tracing of a child process")
	if err := trace.CheckPrivileges(); err != nil {
		testutil.RequireFeature(t, "eBPF tracing", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SELFTRACE_CHILD", "1")
	d, rep, err := Run([]string{exe}, trace.Options{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]int
	if err := json.Unmarshal(rep, &r); err != nil || r["calls"] != childCalls {
		t.Fatalf("report %q: %v", rep, err)
	}
	if got := d.SyscallCount(unix.SYS_GETPPID); got != childCalls {
		t.Errorf("getppid in the window: %d, want exactly %d (the 100 outside it must not count)", got, childCalls)
	}
	if rd, wr := d.SyscallCount(unix.SYS_READ), d.SyscallCount(unix.SYS_WRITE); rd > 1<<62 || wr > 1<<62 {
		t.Errorf("handshake correction went negative: read %d write %d", int64(rd), int64(wr))
	}
}

func TestRunChildFails(t *testing.T) {
	testutil.RequirePrivileged(t, "eBPF tracing of a child process")
	if err := trace.CheckPrivileges(); err != nil {
		testutil.RequireFeature(t, "eBPF tracing", err)
	}
	if _, _, err := Run([]string{"/bin/true"}, trace.Options{}, 30*time.Second); err == nil {
		t.Fatal("a child that never begins: no error")
	}
}
