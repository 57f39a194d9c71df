package mock_test

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails the run when the tests leak file descriptors (eventfds).
func TestMain(m *testing.M) {
	// Start the runtime's network poller first: it keeps its own fds.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	code := m.Run()
	if after := openFDs(); code == 0 && after > before {
		fmt.Fprintf(os.Stderr, "file descriptors leaked: %d open before the tests, %d after\n", before, after)
		code = 1
	}
	os.Exit(code)
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}
