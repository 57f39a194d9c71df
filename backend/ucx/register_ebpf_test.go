package ucx

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/trace"
)

// TestRegisterNoSyscallEBPF: TestRegisterNoSyscall's claim counted by eBPF
// (package trace attached to this process, per thread) instead of strace.
// A goroutine locked to its thread registers 1 GiB once, then in one call
// into C waits for the tracer's first snapshot, registers and releases it
// 1000 times from the cache and waits for the second: the thread's system
// calls between the snapshots must be none. A first window with 3 getppid
// calls and no registrations must show exactly those 3 on that thread (the
// tracer sees it). As root (skipped with the reason otherwise).
func TestRegisterNoSyscallEBPF(t *testing.T) {
	sess, err := trace.Attach(os.Getpid(), trace.Options{By: trace.ByThread})
	if errors.Is(err, trace.ErrNotPrivileged) || errors.Is(err, trace.ErrNotSupported) {
		testutil.MissingPrivilege(t, "eBPF syscall counting (package trace): "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	t.Setenv("UCX_TLS", "tcp")
	b, err := New(Config{CallerProgress: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mem, err := unix.Mmap(-1, 0, 1<<30, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	regs := [][]byte{mem}
	if err := b.RegisterRegions(regs); err != nil { // the one ucp_mem_map
		t.Fatal(err)
	}
	defer b.UnregisterRegions(regs)
	getppid := trace.SyscallNumber("getppid")
	// window runs n cached registrations and probes getppid calls between
	// two snapshots and returns the locked thread's system calls in it.
	window := func(n, probes int) (total, ppid uint64, calls map[string]uint64) {
		flag := new(uint32)
		tidc, done := make(chan int, 1), make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tidc <- unix.Gettid()
			done <- b.benchRegHitsWindow(mem, n, probes, flag)
		}()
		tid := <-tidc
		wait := func(v uint32) {
			for deadline := time.Now().Add(time.Minute); atomic.LoadUint32(flag) != v; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the registering thread did not reach step %d", v)
				}
			}
		}
		wait(1)
		s0, err := sess.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		atomic.StoreUint32(flag, 2)
		wait(3)
		s1, err := sess.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		atomic.StoreUint32(flag, 4)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		calls = map[string]uint64{}
		for _, c := range s1.Sub(s0).Tasks {
			if c.ID != tid {
				continue
			}
			total += c.Count
			calls[trace.SyscallName(c.Nr)] += c.Count
			if c.Nr == getppid {
				ppid += c.Count
			}
		}
		return total, ppid, calls
	}
	if total, ppid, calls := window(0, 3); total != 3 || ppid != 3 {
		t.Fatalf("control window (3 getppid calls, no registrations): the tracer counted %d calls on the thread, %d getppid: %v", total, ppid, calls)
	}
	total, _, calls := window(1000, 0)
	maps, hits := b.RegistrationStats()
	t.Logf("1000 cached registrations and releases of 1 GiB: %d system calls on their thread (eBPF, per thread); %d ucp_mem_map in all, %d cache hits", total, maps, hits)
	if total != 0 {
		t.Fatalf("cached registrations made %d system calls: %v", total, calls)
	}
	if maps != 1 || hits < 1000 {
		t.Fatalf("%d ucp_mem_map calls and %d cache hits: want 1 and >= 1000", maps, hits)
	}
}
