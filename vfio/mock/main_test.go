package mock_test

import (
	"os"
	"testing"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// TestMain fails the run when the tests leak file descriptors (the device's
// eventfd duplicates, eventfds).
func TestMain(m *testing.M) { os.Exit(testutil.RunCheckingFDs(m)) }
