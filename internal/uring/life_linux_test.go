package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCloseLeavesNothing: after Close, no fd and no mapping of the ring
// is left (counted in /proc/self/fd and /proc/self/maps), for each kind of
// ring, with buffers and files registered and I/O done.
func TestCloseLeavesNothing(t *testing.T) {
	for _, cfg := range []Config{{Entries: 64}, {Entries: 8, Unbound: true}, {Entries: 8, NoModernFlags: true},
		{Entries: 8, SQPoll: true, SQThreadIdle: 10 * time.Millisecond}} {
		runtime.GC()
		fds0, ufds0, maps0, umaps0 := procCounts(t)
		u, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, ufds1, _, umaps1 := procCounts(t)
		if ufds1 != ufds0+1 || umaps1 < umaps0+1 {
			t.Errorf("%+v: open ring shows %d io_uring fds and %d mappings (before: %d, %d)", cfg, ufds1, umaps1, ufds0, umaps0)
		}
		buf := make([]byte, 1<<16)
		efd := newEventfd(t)
		if err := u.RegisterBuffers([][]byte{buf}); err != nil {
			t.Fatal(err)
		}
		if err := u.RegisterFiles([]int32{int32(efd)}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			e, _ := u.NextSQE()
			e.PrepNop()
		}
		reap(t, u, 4)
		if err := u.Close(); err != nil {
			t.Fatalf("%+v: Close: %v", cfg, err)
		}
		if err := u.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		runtime.KeepAlive(buf)
		fds2, ufds2, maps2, umaps2 := procCounts(t)
		// newEventfd's fd is closed at test cleanup: one more fd than before.
		if ufds2 != ufds0 || umaps2 != umaps0 || fds2 != fds0+1 {
			t.Errorf("%+v: after Close: %d fds (%d io_uring), %d mappings (%d io_uring); before: %d (%d), %d (%d)",
				cfg, fds2, ufds2, maps2, umaps2, fds0, ufds0, maps0, umaps0)
		}
		t.Logf("%+v: fds %d -> %d (+1 eventfd), io_uring mappings %d -> %d -> %d, maps lines %d -> %d",
			cfg, fds0, fds2, umaps0, umaps1, umaps2, maps0, maps2)
	}
}

// TestWrongThread: a thread-bound ring used from another goroutine
// (another OS thread) returns ErrWrongThread; the owner still works.
func TestWrongThread(t *testing.T) {
	u := newTestRing(t, Config{Entries: 8})
	if !u.RingFdRegistered() && u.Flags()&SetupSingleIssuer == 0 {
		t.Skip("ring is not thread-bound on this kernel")
	}
	errc := make(chan error)
	go func() {
		e := u.GetSQE()
		e.PrepNop()
		_, err := u.Submit()
		errc <- err
	}()
	if err := <-errc; !errors.Is(err, ErrWrongThread) {
		t.Fatalf("Submit from another goroutine: %v, want ErrWrongThread", err)
	}
	if c := reap(t, u, 1)[0]; c.Res() != 0 {
		t.Fatalf("owner's NOP after misuse: res %d", c.Res())
	}
}

func TestErrors(t *testing.T) {
	u := newTestRing(t, Config{Entries: 8})
	var foreign SQE
	if err := u.PrepTimeout(&foreign, time.Second, 0, 0); !errors.Is(err, ErrNotFromRing) {
		t.Errorf("PrepTimeout on a foreign SQE: %v, want ErrNotFromRing", err)
	}
	e := u.GetSQE()
	if err := u.PrepTimeout(e, -time.Second, 0, 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("PrepTimeout with a negative duration: %v, want EINVAL", err)
	}
	e.PrepNop()
	if err := u.RegisterBuffers(nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RegisterBuffers(nil): %v, want EINVAL", err)
	}
	if err := u.RegisterFiles(nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RegisterFiles(nil): %v, want EINVAL", err)
	}
	reap(t, u, 1)

	v, err := New(Config{Entries: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Submit(); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v, want ErrClosed", err)
	}
	if _, err := v.PeekCQEs(make([]CQE, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("PeekCQEs after Close: %v, want ErrClosed", err)
	}
	if err := v.RegisterBuffers([][]byte{make([]byte, 8)}); !errors.Is(err, ErrClosed) {
		t.Errorf("RegisterBuffers after Close: %v, want ErrClosed", err)
	}
	if v.GetSQE() != nil {
		t.Error("GetSQE after Close returned an entry")
	}
	if _, err := v.NextSQE(); !errors.Is(err, ErrClosed) {
		t.Errorf("NextSQE after Close: %v, want ErrClosed", err)
	}
	if v.CQReady() != 0 || v.Dropped() != 0 {
		t.Error("CQReady/Dropped after Close are not 0")
	}
	if _, err := v.SubmitAndWait(1); !errors.Is(err, ErrClosed) {
		t.Errorf("SubmitAndWait after Close: %v, want ErrClosed", err)
	}
	if _, err := v.SubmitAndWaitTimeout(1, time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("SubmitAndWaitTimeout after Close: %v, want ErrClosed", err)
	}
	if err := v.RegisterFiles([]int32{0}); !errors.Is(err, ErrClosed) {
		t.Errorf("RegisterFiles after Close: %v, want ErrClosed", err)
	}
}

// TestRegisterMemlock: registering more than RLIMIT_MEMLOCK without
// CAP_IPC_LOCK fails with ErrMemlock, and the error names both facts. As
// root, the test drops CAP_IPC_LOCK from the effective set of one thread
// (capabilities are per thread) that is never unlocked, so it exits with its
// goroutine and no other goroutine ever runs with the reduced set.
func TestRegisterMemlock(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur > 8<<20 { // lowering the soft limit needs no privilege; restored below
		old := rl
		rl.Cur = 8 << 20
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
			t.Fatal(err)
		}
		defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread dies with the goroutine
		if os.Geteuid() == 0 {
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err := unix.Capget(&hdr, &data[0]); err != nil {
				errc <- err
				return
			}
			data[0].Effective &^= 1 << unix.CAP_IPC_LOCK
			if err := unix.Capset(&hdr, &data[0]); err != nil {
				errc <- fmt.Errorf("drop CAP_IPC_LOCK: %w", err)
				return
			}
		}
		u, err := New(Config{Entries: 8}) // the kernel notes CAP_IPC_LOCK at creation
		if err != nil {
			errc <- err
			return
		}
		defer u.Close()
		size := int(rl.Cur) + 1<<20
		buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Munmap(buf)
		errc <- u.RegisterBuffers([][]byte{buf})
	}()
	err := <-errc
	if !errors.Is(err, ErrMemlock) || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("registering %d bytes over a %d-byte RLIMIT_MEMLOCK: %v, want ErrMemlock wrapping ENOMEM", rl.Cur+1<<20, rl.Cur, err)
	}
	if !strings.Contains(err.Error(), "CAP_IPC_LOCK not held") || !strings.Contains(err.Error(), "RLIMIT_MEMLOCK is") {
		t.Fatalf("error does not say why: %v", err)
	}
	t.Log(err)
}
