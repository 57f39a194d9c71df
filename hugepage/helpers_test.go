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

// unsafeWords views mem (a power-of-two length, 8-aligned) as uint64s.
func unsafeWords(mem []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem))), len(mem)/8)
}
