package hugepage

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails the run if the tests changed the kernel's hugetlb pools:
// every Reserve must be released.
func TestMain(m *testing.M) {
	before := hugeTotals()
	code := m.Run()
	if after := hugeTotals(); after != before {
		fmt.Fprintf(os.Stderr, "hugepage tests left the hugetlb pools changed: before %v, after %v\n", before, after)
		code = 1
	}
	os.Exit(code)
}

func hugeTotals() [2]int {
	var t [2]int
	for i, ps := range []int{size2M, size1G} {
		if c, err := readHugeCounts(ps); err == nil {
			t[i] = c.Total
		}
	}
	return t
}
