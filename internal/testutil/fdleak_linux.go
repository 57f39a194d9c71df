package testutil

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FDs is a snapshot of the process's open file descriptors: each fd number
// and what it points to (the /proc/self/fd link: a path, "pipe:[...]",
// "anon_inode:[eventfd]", "anon_inode:[io_uring]"...).
type FDs map[int]string

// OpenFDs snapshots the process's open file descriptors.
func OpenFDs() (FDs, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("testutil: list open fds: %w", err)
	}
	fds := make(FDs, len(ents))
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own fd, closed by now
		}
		fds[fd] = target
	}
	return fds, nil
}

// SnapshotFDs is OpenFDs for a test: it fails t if /proc/self/fd cannot be
// read. Compare two snapshots with Leaked:
//
//	before := testutil.SnapshotFDs(t)
//	... open and close ...
//	if leaked := before.Leaked(testutil.SnapshotFDs(t)); leaked != nil { t.Errorf(...) }
func SnapshotFDs(t testing.TB) FDs {
	t.Helper()
	fds, err := OpenFDs()
	if err != nil {
		t.Fatal(err)
	}
	return fds
}

// Leaked compares a later snapshot with fds: when now holds more fds, it
// lists, sorted, each fd of now that fds did not hold with the same target
// ("fd -> target"); otherwise nil (an fd closed and another opened at its
// number is a reuse, not a leak). Reads of /proc itself are ignored.
func (fds FDs) Leaked(now FDs) []string {
	count := func(s FDs) int {
		n := 0
		for _, target := range s {
			if !strings.HasPrefix(target, "/proc/") {
				n++
			}
		}
		return n
	}
	if count(now) <= count(fds) {
		return nil
	}
	var leaked []string
	for fd, target := range now {
		if old, ok := fds[fd]; (!ok || old != target) && !strings.HasPrefix(target, "/proc/") {
			leaked = append(leaked, fmt.Sprintf("%d -> %s", fd, target))
		}
	}
	slices.Sort(leaked)
	return leaked
}

// CheckFDs fails t at cleanup when the test left more file descriptors open
// than were open when CheckFDs was called, naming the new ones. Call it
// first in the test, so that its cleanup runs after the test's own.
func CheckFDs(t testing.TB) {
	t.Helper()
	before, err := OpenFDs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		now, err := OpenFDs()
		if err != nil {
			t.Error(err)
			return
		}
		if leaked := before.Leaked(now); leaked != nil {
			t.Errorf("file descriptors leaked: %d open before, %d after; new: %v", len(before), len(now), leaked)
		}
	})
}

// RunCheckingFDs runs the package's tests and returns the exit code for
// TestMain, turned into a failure when the tests passed but left more file
// descriptors open than were open before them (eventfds, io_uring rings,
// memfds...); the new ones are listed on stderr with what they point to.
//
//	func TestMain(m *testing.M) { os.Exit(testutil.RunCheckingFDs(m)) }
func RunCheckingFDs(m *testing.M) int {
	// Start the runtime's network poller first: it keeps its own fds.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before, err := OpenFDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		return code
	}
	now, err := OpenFDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if leaked := before.Leaked(now); leaked != nil {
		fmt.Fprintf(os.Stderr, "file descriptors leaked: %d open before the tests, %d after; new: %v\n", len(before), len(now), leaked)
		return 1
	}
	return 0
}
