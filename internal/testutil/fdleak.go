package testutil

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
)

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
	before := openFDs()
	code := m.Run()
	after := openFDs()
	if code != 0 || len(after) <= len(before) {
		return code
	}
	var leaked []string
	for fd, target := range after {
		if before[fd] != target {
			leaked = append(leaked, fmt.Sprintf("%d -> %s", fd, target))
		}
	}
	sort.Strings(leaked)
	fmt.Fprintf(os.Stderr, "file descriptors leaked: %d open before the tests, %d after; new: %v\n", len(before), len(after), leaked)
	return 1
}

// openFDs maps this process's open file descriptors to what they point to.
func openFDs() map[int]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	fds := make(map[int]string, len(ents))
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fds[fd] = target
	}
	return fds
}
