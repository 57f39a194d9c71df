package uring

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
)

// newTestRing creates a ring for the calling test goroutine (which it
// locks to its thread) and closes it at cleanup, on the same goroutine.
func newTestRing(t *testing.T, cfg Config) *Ring {
	t.Helper()
	u, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return u
}

// reap collects exactly n completions, failing the test if they do not all
// arrive within a generous bound.
func reap(t *testing.T, u *Ring, n int) []CQE {
	t.Helper()
	out := make([]CQE, 0, n)
	buf := make([]CQE, n)
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n {
		// Never wait for more than the CQ holds: the rest may sit in the
		// kernel's overflow list until these are reaped.
		if _, err := u.SubmitAndWaitTimeout(min(n-len(out), u.CQEntries()), time.Until(deadline)); err != nil {
			t.Fatalf("waiting for %d completions (%d arrived): %v", n, len(out), err)
		}
		got, err := u.PeekCQEs(buf[:n-len(out)])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:got]...)
	}
	return out
}

// byUserData indexes completions by user data, failing on duplicates.
func byUserData(t *testing.T, cqes []CQE) map[uint64]CQE {
	t.Helper()
	m := make(map[uint64]CQE, len(cqes))
	for _, c := range cqes {
		if _, dup := m[c.UserData()]; dup {
			t.Fatalf("two completions carry user data %d", c.UserData())
		}
		m[c.UserData()] = c
	}
	return m
}

// directIODir returns a directory on a file system where O_DIRECT is real
// (not tmpfs, whose O_DIRECT goes through the page cache), proving it by a
// misaligned O_DIRECT read being refused with EINVAL; ok false and the
// reason when none is found.
func directIODir(t testing.TB) (dir string, why string) {
	t.Helper()
	candidates := []string{t.TempDir()}
	if d, err := os.MkdirTemp("/var/tmp", "hcomm-ring-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		candidates = append(candidates, d)
	}
	var reasons []string
	for _, d := range candidates {
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); err != nil {
			reasons = append(reasons, d+": "+err.Error())
			continue
		}
		if st.Type == unix.TMPFS_MAGIC {
			reasons = append(reasons, d+": tmpfs (O_DIRECT is accepted but not direct)")
			continue
		}
		p := filepath.Join(d, "probe")
		if err := os.WriteFile(p, make([]byte, 8192), 0o600); err != nil {
			reasons = append(reasons, d+": "+err.Error())
			continue
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			reasons = append(reasons, d+": open O_DIRECT: "+err.Error())
			continue
		}
		mem, _ := unix.Mmap(-1, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		_, err = unix.Pread(fd, mem[1:4097], 0) // misaligned buffer
		unix.Munmap(mem)
		unix.Close(fd)
		os.Remove(p)
		if !errors.Is(err, unix.EINVAL) {
			reasons = append(reasons, d+": misaligned O_DIRECT read was not refused (got "+errString(err)+")")
			continue
		}
		return d, ""
	}
	return "", "no directory with real O_DIRECT: " + strings.Join(reasons, "; ")
}

func errString(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

// procCounts returns the open fds and the /proc/self/maps lines, and how
// many of each are io_uring's.
func procCounts(t *testing.T) (fds, uringFds, maps, uringMaps int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fds++
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, "io_uring") {
			uringFds++
		}
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		maps++
		if strings.Contains(l, "io_uring") {
			uringMaps++
		}
	}
	return
}

// hugeArena maps size bytes of 2 MiB hugetlb memory, reserving the pages
// (root) and giving them back at cleanup; without root the test skips (or
// fails under HCOMM_REQUIRE_PRIVILEGED=1).
func hugeArena(t *testing.T, size int) *hugepage.Arena {
	t.Helper()
	cfg := hugepage.ArenaConfig{Size: size, Populate: true}
	if os.Geteuid() == 0 {
		res, err := hugepage.Reserve(2<<20, size/(2<<20))
		if errors.Is(err, hugepage.ErrReserve) { // the kernel could not find the pages now
			testutil.MissingPrivilege(t, err.Error())
		}
		testutil.RequireFeature(t, "2 MiB hugetlb pages", err)
		t.Cleanup(func() {
			if err := res.Release(); err != nil {
				t.Errorf("release hugepages: %v", err)
			}
		})
		cfg.Backings = []hugepage.Backing{hugepage.BackingHugetlb2M}
	} else {
		testutil.MissingPrivilege(t, "reserve 2 MiB hugetlb pages for fixed buffers (falling back would hide it)")
	}
	a, err := hugepage.NewArena(cfg)
	if err != nil {
		t.Fatalf("hugepage arena: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	t.Logf("arena: %d bytes, %v", a.Len(), a.Backing())
	return a
}
