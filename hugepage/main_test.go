package hugepage

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails the run if a test left hugepages reserved: every Reserve
// of this process must be released. (It counts this process's
// reservations rather than comparing the kernel's totals, which other
// packages' tests running in parallel may change.)
func TestMain(m *testing.M) {
	code := m.Run()
	if left := outstandingPages(); len(left) != 0 {
		fmt.Fprintf(os.Stderr, "hugepage tests left hugetlb pages reserved (page size: pages): %v\n", left)
		code = 1
	}
	os.Exit(code)
}
