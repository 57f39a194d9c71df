// Package pagefault measures what touching memory for the first time costs:
// the page faults (one per page the kernel backs on first touch: 4 KiB
// pages fault 512 times as often as 2 MiB hugepages) and the time, which
// includes the kernel zeroing each page. hcomm-bench's pages scenario and
// hcomm-demo's hugepage section both use it.
package pagefault

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Touch writes one byte per 4 KiB of mem, on one OS thread, and returns
// that thread's minor faults meanwhile and the time it took.
func Touch(mem []byte) (faults int64, took time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r0, r1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &r0)
	t0 := time.Now()
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	took = time.Since(t0)
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &r1)
	return r1.Minflt - r0.Minflt, took
}
