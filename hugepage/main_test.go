package hugepage

import (
	"fmt"
	"os"
	"testing"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// TestMain fails the run if a test left hugepages reserved: every Reserve
// of this process must be released. (It counts this process's
// reservations rather than comparing the kernel's totals, which other
// packages' tests running in parallel may change.) It fails the run too
// when the tests leak file descriptors (memfds of arenas).
func TestMain(m *testing.M) {
	code := testutil.RunCheckingFDs(m)
	if left := outstandingPages(); len(left) != 0 {
		fmt.Fprintf(os.Stderr, "hugepage tests left hugetlb pages reserved (page size: pages): %v\n", left)
		code = 1
	}
	os.Exit(code)
}
