package hugepage

import (
	"strconv"
	"testing"
	"unsafe"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

func unsafeAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func itoa(n int) string { return strconv.Itoa(n) }

func testutilFeature(t *testing.T, feature string, err error) {
	t.Helper()
	testutil.RequireFeature(t, feature, err)
}
