package trace

import (
	"bytes"
	"unsafe"
)

func unsafeSlice[T any](p *T, n int) []T { return unsafe.Slice(p, n) }

// bytesOf views *p as bytes (to decode ring-buffer records in place).
func bytesOf[T any](p *T) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p)) }

func binarySize[T any](v T) int { return int(unsafe.Sizeof(v)) }

// cstring converts a NUL-terminated C char array.
func cstring(b []int8) string {
	u := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), len(b))
	if i := bytes.IndexByte(u, 0); i >= 0 {
		u = u[:i]
	}
	return string(u)
}
