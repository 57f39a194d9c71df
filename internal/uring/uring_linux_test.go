package uring

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

func TestSetup(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		want  SetupFlags // must be granted
		check func(t *testing.T, u *Ring)
	}{
		{name: "default", want: SetupSingleIssuer | SetupDeferTaskrun | SetupCoopTaskrun | SetupNoSQArray,
			check: func(t *testing.T, u *Ring) {
				if u.SQEntries() != 256 || !u.RingFdRegistered() {
					t.Errorf("entries %d (want 256), ring fd registered %v", u.SQEntries(), u.RingFdRegistered())
				}
			}},
		{name: "cq size", cfg: Config{Entries: 32, CQEntries: 1024}, want: SetupCQSize,
			check: func(t *testing.T, u *Ring) {
				if u.SQEntries() != 32 || u.CQEntries() != 1024 {
					t.Errorf("SQ %d CQ %d, want 32 and 1024", u.SQEntries(), u.CQEntries())
				}
			}},
		{name: "clamp", cfg: Config{Entries: 1 << 20, Clamp: true}, want: SetupClamp,
			check: func(t *testing.T, u *Ring) {
				if u.SQEntries() != 32768 {
					t.Errorf("clamped SQ %d, want 32768", u.SQEntries())
				}
			}},
		{name: "unbound", cfg: Config{Entries: 8, Unbound: true}, want: SetupCoopTaskrun | SetupNoSQArray,
			check: func(t *testing.T, u *Ring) {
				if u.Flags()&(SetupSingleIssuer|SetupDeferTaskrun) != 0 || u.RingFdRegistered() {
					t.Errorf("unbound ring has thread-bound features: %v, ring fd %v", u.Flags(), u.RingFdRegistered())
				}
			}},
		{name: "no modern flags", cfg: Config{Entries: 8, NoModernFlags: true},
			check: func(t *testing.T, u *Ring) {
				if u.Flags() != 0 {
					t.Errorf("flags %v, want none", u.Flags())
				}
			}},
		{name: "sqpoll pinned", cfg: Config{Entries: 8, SQPoll: true, SQThreadIdle: 20 * time.Millisecond, PinSQThread: true, SQThreadCPU: 0},
			want: SetupSQPoll | SetupSQAff | SetupSingleIssuer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := newTestRing(t, tc.cfg)
			t.Logf("flags %v; features %v; fallbacks %v", u.Flags(), u.Features(), u.Fallbacks())
			if u.Flags()&tc.want != tc.want {
				t.Fatalf("granted %v, want at least %v (fallbacks: %v)", u.Flags(), tc.want, u.Fallbacks())
			}
			if u.Features()&FeatSingleMmap == 0 {
				t.Error("kernel 6.x should offer IORING_FEAT_SINGLE_MMAP")
			}
			for _, op := range []Opcode{OpNop, OpRead, OpWrite, OpReadFixed, OpWriteFixed, OpReadv, OpWritev, OpFsync,
				OpSend, OpRecv, OpSendZC, OpPollAdd, OpTimeout, OpLinkTimeout} {
				if !u.Probe().Supported(op) {
					t.Errorf("probe: %v unsupported (probe: %v)", op, u.Probe())
				}
			}
			if tc.check != nil {
				tc.check(t, u)
			}
			// The ring works: 10 NOPs round-trip.
			for i := 0; i < 10; i++ {
				e, err := u.NextSQE()
				if err != nil {
					t.Fatal(err)
				}
				e.PrepNop()
				e.SetUserData(uint64(i))
			}
			if got := byUserData(t, reap(t, u, 10)); len(got) != 10 {
				t.Fatalf("%d distinct completions, want 10", len(got))
			}
		})
	}
	for _, bad := range []Config{
		{SQThreadIdle: -time.Second, SQPoll: true},
		{PinSQThread: true},
		{SQThreadIdle: time.Second},
		{Entries: 64, CQEntries: 32},
	} {
		if u, err := New(bad); !errors.Is(err, ErrConfig) {
			if err == nil {
				u.Close()
			}
			t.Errorf("New(%+v): %v, want ErrConfig", bad, err)
		}
	}
	t.Run("too large without clamp", func(t *testing.T) {
		for _, cfg := range []Config{{Entries: 1 << 20}, {Entries: 64, CQEntries: 1 << 20}} {
			u, err := New(cfg)
			if err == nil {
				u.Close()
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("New(%+v) without clamp: %v, want ErrConfig", cfg, err)
			}
			t.Log(err)
		}
	})
	t.Run("too large with clamp", func(t *testing.T) {
		u, err := New(Config{Entries: 1 << 20, CQEntries: 1 << 20, Clamp: true})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		if u.SQEntries() != maxSQEntries || u.CQEntries() != maxCQEntries {
			t.Errorf("clamped to %d/%d entries, want %d/%d", u.SQEntries(), u.CQEntries(), maxSQEntries, maxCQEntries)
		}
	})
	u, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("probe: " + u.Probe().String())
	if err := u.Close(); err != nil {
		t.Error(err)
	}
}

// TestNopBatchAndCounters pushes more NOPs than the SQ holds (SQ-full
// handling by NextSQE), checks every user data comes back once and that the
// counters agree with what happened.
func TestNopBatchAndCounters(t *testing.T) {
	u := newTestRing(t, Config{Entries: 16, CQEntries: 128})
	const n = 100
	for i := 0; i < n; i++ {
		e, err := u.NextSQE()
		if err != nil {
			t.Fatalf("NextSQE %d: %v", i, err)
		}
		e.PrepNop()
		e.SetUserData(uint64(1000 + i))
	}
	got := byUserData(t, reap(t, u, n))
	for i := 0; i < n; i++ {
		c, ok := got[uint64(1000+i)]
		if !ok || c.Res() != 0 {
			t.Fatalf("NOP %d: completion %v res %d", i, ok, c.Res())
		}
	}
	st := u.Stats()
	// 16 entries: NextSQE submitted 6 full batches, reap submitted the rest.
	if st.Submissions != n || st.Completions != n {
		t.Fatalf("stats %+v: want %d submissions and completions", st, n)
	}
	if st.Enters < 7 || st.Enters > 8 {
		t.Fatalf("stats %+v: want 7 enters (6 SQ-full flushes + 1 submit-and-wait), at most 8", st)
	}
	if u.GetSQE() == nil {
		t.Fatal("GetSQE on an empty SQ returned nil")
	}
	// Fill the SQ: GetSQE reports full with nil, without a system call.
	for u.GetSQE() != nil {
	}
	if st2 := u.Stats(); st2.Enters != st.Enters {
		t.Fatal("GetSQE made a system call")
	}
	for i := range u.sqes { // the queued SQEs must be valid: make them NOPs
		u.sqes[i].PrepNop()
	}
	reap(t, u, u.SQEntries())
}

// TestCQOverflow: more completions than the CQ holds are kept by the
// kernel (IORING_FEAT_NODROP) and reaped later; none is lost or doubled.
func TestCQOverflow(t *testing.T) {
	u := newTestRing(t, Config{Entries: 16, CQEntries: 32})
	const n = 200
	for i := 0; i < n; i++ {
		e, err := u.NextSQE()
		if err != nil {
			t.Fatalf("NextSQE %d: %v", i, err)
		}
		e.PrepNop()
		e.SetUserData(uint64(i))
	}
	got := byUserData(t, reap(t, u, n))
	for i := 0; i < n; i++ {
		if _, ok := got[uint64(i)]; !ok {
			t.Fatalf("completion %d lost in CQ overflow", i)
		}
	}
	t.Logf("stats %+v", u.Stats())
}

func TestZeroAllocs(t *testing.T) {
	u := newTestRing(t, Config{Entries: 64})
	cqes := make([]CQE, 8)
	allocs := testing.AllocsPerRun(200, func() {
		if err := nopBatch(u, cqes); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per NOP batch, want 0", allocs)
	}
}

// TestFileOps runs every file opcode against a real O_DIRECT file on a
// file system where O_DIRECT is real (ext4 or xfs, not tmpfs), with the data in a
// hugepage arena registered as fixed buffers.
func TestFileOps(t *testing.T) {
	dir, why := directIODir(t)
	if dir == "" {
		testutil.MissingPrivilege(t, "an O_DIRECT-capable file system: "+why)
	}
	arena := hugeArena(t, 4<<20)
	mem := arena.Bytes()
	u := newTestRing(t, Config{Entries: 32})
	if err := u.RegisterBuffers([][]byte{mem[:2<<20], mem[2<<20:]}); err != nil {
		t.Fatalf("register hugepage fixed buffers (%v arena): %v", arena.Backing(), err)
	}
	path := filepath.Join(dir, "uring-data")
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := u.RegisterFiles([]int32{int32(fd)}); err != nil {
		t.Fatal(err)
	}

	const blk = 64 << 10
	src := mem[0:blk]             // fixed buffer 0
	dst := mem[2<<20 : 2<<20+blk] // fixed buffer 1
	for i := range src {
		src[i] = byte(i*7 + i>>12)
	}
	one := func(prep func(e *SQE)) CQE {
		t.Helper()
		e, err := u.NextSQE()
		if err != nil {
			t.Fatal(err)
		}
		prep(e)
		e.SetUserData(42)
		c := reap(t, u, 1)[0]
		if c.UserData() != 42 {
			t.Fatalf("user data %d, want 42", c.UserData())
		}
		return c
	}
	wantRes := func(what string, c CQE, want int) {
		t.Helper()
		if int(c.Res()) != want {
			t.Fatalf("%s: res %d (%v), want %d", what, c.Res(), c.Err(), want)
		}
	}

	wantRes("WRITE_FIXED", one(func(e *SQE) { e.PrepWriteFixed(fd, src, 0, 0) }), blk)
	wantRes("FSYNC", one(func(e *SQE) { e.PrepFsync(fd, 0) }), 0)
	wantRes("READ_FIXED", one(func(e *SQE) { e.PrepReadFixed(fd, dst, 0, 1) }), blk)
	if !bytes.Equal(src, dst) {
		t.Fatal("READ_FIXED data differs from WRITE_FIXED data")
	}

	// WRITE and READ (not fixed) at 64 KiB, through the registered file.
	clear(dst)
	wantRes("WRITE", one(func(e *SQE) { e.PrepWrite(0, src, blk); e.SetFlags(SQEFixedFile) }), blk)
	wantRes("READ", one(func(e *SQE) { e.PrepRead(fd, dst, blk) }), blk)
	if !bytes.Equal(src, dst) {
		t.Fatal("READ data differs from WRITE data")
	}

	// WRITEV/READV: two 4 KiB-aligned pieces each.
	iov := func(a, b []byte) []unix.Iovec {
		v := make([]unix.Iovec, 2)
		v[0].Base, v[1].Base = &a[0], &b[0]
		v[0].SetLen(len(a))
		v[1].SetLen(len(b))
		return v
	}
	wv := iov(src[:8192], src[8192:16384])
	wantRes("WRITEV", one(func(e *SQE) { e.PrepWritev(fd, wv, 2*blk) }), 16384)
	wantRes("FSYNC datasync", one(func(e *SQE) { e.PrepFsync(fd, FsyncDatasync) }), 0)
	clear(dst)
	rv := iov(dst[:4096], dst[4096:16384])
	wantRes("READV", one(func(e *SQE) { e.PrepReadv(fd, rv, 2*blk) }), 16384)
	if !bytes.Equal(src[:16384], dst[:16384]) {
		t.Fatal("READV data differs from WRITEV data")
	}
	runtime.KeepAlive(wv)
	runtime.KeepAlive(rv)

	// O_DIRECT is real: a misaligned buffer is refused.
	c := one(func(e *SQE) { e.PrepRead(fd, dst[1:4097], 0) })
	if !errors.Is(c.Err(), unix.EINVAL) {
		t.Fatalf("misaligned O_DIRECT READ: res %d, want -EINVAL", c.Res())
	}
	// What the file holds, read without io_uring.
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(file) != 2*blk+16384 || !bytes.Equal(file[:blk], src) || !bytes.Equal(file[blk:2*blk], src) ||
		!bytes.Equal(file[2*blk:], src[:16384]) {
		t.Fatalf("file content (%d bytes) differs from what was written", len(file))
	}
	if err := u.UnregisterFiles(); err != nil {
		t.Fatal(err)
	}
	if err := u.UnregisterBuffers(); err != nil {
		t.Fatal(err)
	}
}

// TestPrepHugeBuffer: a buffer of 4 GiB or more asks the kernel for as much
// as the SQE's 32-bit length holds, never for len mod 4 GiB (0 for 4 GiB,
// which a reader would take for end of file). The memory is 4 KiB mapped
// off the Go heap; the SQE is only prepared, never submitted.
func TestPrepHugeBuffer(t *testing.T) {
	m, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	for _, n := range []int{1 << 32, 1<<32 + 4096, 5 << 30} {
		big := unsafe.Slice(&m[0], n)
		var e SQE
		for name, prep := range map[string]func(){
			"read":     func() { e.PrepRead(3, big, 0) },
			"write":    func() { e.PrepWrite(3, big, 0) },
			"read fix": func() { e.PrepReadFixed(3, big, 0, 0) },
			"send":     func() { e.PrepSend(3, big, 0) },
			"send zc":  func() { e.PrepSendZC(3, big, 0, 0) },
		} {
			prep()
			if e.s.Len != math.MaxUint32 {
				t.Errorf("%s of %d bytes: SQE length %d, want %d", name, n, e.s.Len, uint32(math.MaxUint32))
			}
		}
	}
}

// TestPublishThenEnterElsewhere: Publish makes SQEs visible without a
// system call — the kernel consumes nothing until an io_uring_enter — and
// an enter made on another OS thread, with to_submit read there from the
// shared ring (PublishedShared), submits exactly what was published (the way backend/uringfile's waiter
// carries a deferred doorbell).
func TestPublishThenEnterElsewhere(t *testing.T) {
	for _, cfg := range []Config{{Entries: 8}, {Entries: 8, Unbound: true, NoModernFlags: true}} {
		u := newTestRing(t, cfg)
		const n = 3
		for i := range n {
			e := u.GetSQE()
			e.PrepNop()
			e.SetUserData(uint64(i + 1))
		}
		before := u.Stats().Enters
		if got := u.Publish(); got != n {
			t.Fatalf("%+v: Publish = %d, want %d unsubmitted", cfg, got, n)
		}
		if u.Stats().Enters != before {
			t.Fatalf("%+v: Publish made a system call", cfg)
		}
		if got, ready := u.Unsubmitted(), u.CQReady(); got != n || ready != 0 {
			t.Fatalf("%+v: after Publish: %d unsubmitted (want %d), %d ready (want 0: nothing entered)", cfg, got, n, ready)
		}
		if cfg.Unbound {
			// Another thread's enter: the SQEs' contents must be visible
			// to it (release store of the tail).
			done := make(chan error)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				pub := u.PublishedShared()
				r, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(u.Fd()), uintptr(pub), n, enterGetevents, 0, 0)
				switch {
				case errno != 0:
					done <- errno
				case pub != n || int(r) != n:
					done <- fmt.Errorf("PublishedShared %d, submitted %d: want %d", pub, r, n)
				default:
					done <- nil
				}
			}()
			if err := <-done; err != nil {
				t.Fatalf("enter on another thread: %v", err)
			}
		} else if _, err := u.SubmitAndWait(n); err != nil {
			t.Fatal(err)
		}
		if got := u.Unsubmitted(); got != 0 {
			t.Fatalf("%+v: %d unsubmitted after the enter, want 0", cfg, got)
		}
		got := byUserData(t, reap(t, u, n))
		for i := range n {
			if c, ok := got[uint64(i+1)]; !ok || c.Res() != 0 {
				t.Fatalf("%+v: NOP %d: completion %v res %d", cfg, i, ok, c.Res())
			}
		}
	}
}
