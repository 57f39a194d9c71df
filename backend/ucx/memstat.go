package ucx

/*
#include <malloc.h>

// hc_malloc_inuse is what the C heap holds: bytes in use in every malloc
// arena plus the chunks malloc mapped on their own.
static size_t hc_malloc_inuse(void) {
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
}
*/
import "C"

// mallocInUse is the C heap in use (glibc mallinfo2: every arena's bytes
// in use plus malloc's own mappings), for tests that bound what UCX and
// the C layer keep.
func mallocInUse() uint64 { return uint64(C.hc_malloc_inuse()) }
