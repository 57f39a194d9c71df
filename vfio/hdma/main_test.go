package hdma_test

import (
	"os"
	"testing"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// TestMain fails the run when the tests leak file descriptors (eventfds of
// the driver, io_uring rings, arena memfds).
func TestMain(m *testing.M) { os.Exit(testutil.RunCheckingFDs(m)) }
