package hugepage

import "unsafe"

func unsafeAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// unsafeWords views mem (a power-of-two length, 8-aligned) as uint64s.
func unsafeWords(mem []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem))), len(mem)/8)
}
