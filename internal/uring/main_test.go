package uring

import (
	"os"
	"testing"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// TestMain fails the run when the tests leak file descriptors (rings,
// eventfds, files, sockets, memfds of hugepage arenas).
func TestMain(m *testing.M) { os.Exit(testutil.RunCheckingFDs(m)) }
