// Command workload makes an exactly known number of system calls, io_uring
// requests and engine hook calls, for the accuracy tests of package trace.
// It prints nothing on success (a print would be a write(2) of its own).
//
//	workload write PATH N K [direct]      N write(2) of K bytes (O_DIRECT when "direct")
//	workload readv PATH N K [direct]      N readv(2) of K bytes (O_DIRECT when "direct")
//	workload touch N                      write one byte to each of N fresh 4 KiB pages (N page faults)
//	workload socket N K                   over an AF_UNIX datagram socketpair: N sendto + N recvfrom of
//	                                       K bytes, then N/4 sendmmsg + N/4 recvmmsg of 4 messages of K bytes
//	workload uring-nop N                   N IORING_OP_NOP, one io_uring_enter each
//	workload uring-write-fixed PATH N K [direct]  N IORING_OP_WRITE_FIXED of K bytes
//	workload hooks B                       B calls of hookSubmitBatch and hookReapBatch
//	workload hooks-time B                  B calls of hookSubmitBatch, prints the ns per call
//
// With WORKLOAD_WAIT=1 it first reads one byte from stdin (so a test can
// attach before the work starts). The uring-* modes drive io_uring with raw
// syscalls on golang.org/x/sys/unix. It imports no hcomm package, so its
// start-up makes no system calls beyond the Go runtime's (no
// writes; it does read a few files, see readvFile): counts are exact.
// hcommload runs the hcomm packages.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: workload MODE ARGS...")
	}
	if os.Getenv("WORKLOAD_WAIT") == "1" {
		var b [1]byte
		if _, err := unix.Read(0, b[:]); err != nil {
			fail("wait: %v", err)
		}
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "write":
		writeFile(args[0], atoi(args[1]), atoi(args[2]), len(args) > 3 && args[3] == "direct")
	case "uring-nop":
		uringNop(atoi(args[0]))
	case "uring-write-fixed":
		uringWriteFixed(args[0], atoi(args[1]), atoi(args[2]), len(args) > 3 && args[3] == "direct")
	case "hooks":
		hooks(atoi(args[0]))
	case "hooks-time":
		hooksTime(atoi(args[0]))
	case "readv":
		readvFile(args[0], atoi(args[1]), atoi(args[2]), len(args) > 3 && args[3] == "direct")
	case "touch":
		touchPages(atoi(args[0]))
	case "socket":
		socketCopies(atoi(args[0]), atoi(args[1]))
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "workload: "+format+"\n", a...)
	os.Exit(1)
}

func atoi(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		fail("bad number %q", s)
	}
	return v
}

// alignedBuf is page-aligned memory outside the Go heap (O_DIRECT needs
// alignment; the kernel may keep registered buffers).
func alignedBuf(n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		fail("mmap %d: %v", n, err)
	}
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func openTarget(path string, direct bool) int {
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(path, flags, 0o644)
	if err != nil {
		fail("open %s: %v", path, err)
	}
	return fd
}

func writeFile(path string, n, k int, direct bool) {
	fd := openTarget(path, direct)
	buf := alignedBuf(k)
	for i := 0; i < n; i++ {
		w, err := unix.Write(fd, buf)
		if err != nil || w != k {
			fail("write %d: %d, %v", i, w, err)
		}
	}
}

// readvFile uses readv, not read or pread64: the Go runtime itself reads
// a few files at start-up (read(2): /sys/kernel/mm/transparent_hugepage/
// hpage_pmd_size, /proc/self/cgroup, /proc/self/mountinfo; pread64(2): the
// cgroup CPU quota and period), so those counts of any Go program include
// the runtime's.
func readvFile(path string, n, k int, direct bool) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		fail("open %s: %v", path, err)
	}
	buf := alignedBuf(k)
	for i := 0; i < n; i++ {
		r, err := unix.Readv(fd, [][]byte{buf})
		if err != nil || r != k {
			fail("readv %d: %d, %v", i, r, err)
		}
	}
}

// touchPages maps n pages without populating them, refuses transparent
// hugepages for them (one fault per 4 KiB page, not per 2 MiB), and writes
// one byte to each: n user page faults on write.
func touchPages(n int) {
	if n == 0 {
		return
	}
	b, err := unix.Mmap(-1, 0, n*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fail("mmap: %v", err)
	}
	if err := unix.Madvise(b, unix.MADV_NOHUGEPAGE); err != nil {
		fail("madvise: %v", err)
	}
	for i := 0; i < n; i++ {
		b[i*4096] = 1
	}
}

func socketCopies(n, k int) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fail("socketpair: %v", err)
	}
	out, in := alignedBuf(4*k), alignedBuf(4*k)
	for i := 0; i < n; i++ {
		if err := unix.Sendto(fds[0], out[:k], 0, nil); err != nil {
			fail("sendto: %v", err)
		}
		if r, _, err := unix.Recvfrom(fds[1], in[:k], 0); err != nil || r != k {
			fail("recvfrom: %d, %v", r, err)
		}
	}
	var iovOut, iovIn [4]unix.Iovec
	var msgOut, msgIn [4]unix.Mmsghdr
	for j := range 4 {
		iovOut[j] = unix.Iovec{Base: &out[j*k], Len: uint64(k)}
		iovIn[j] = unix.Iovec{Base: &in[j*k], Len: uint64(k)}
		msgOut[j].Hdr.Iov, msgOut[j].Hdr.Iovlen = &iovOut[j], 1
		msgIn[j].Hdr.Iov, msgIn[j].Hdr.Iovlen = &iovIn[j], 1
	}
	for i := 0; i < n/4; i++ {
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fds[0]), uintptr(unsafe.Pointer(&msgOut[0])), 4, 0, 0, 0)
		if errno != 0 || r != 4 {
			fail("sendmmsg: %d, %v", r, errno)
		}
		r, _, errno = unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fds[1]), uintptr(unsafe.Pointer(&msgIn[0])), 4, 0, 0, 0)
		if errno != 0 || r != 4 {
			fail("recvmmsg: %d, %v", r, errno)
		}
	}
}

// ---- engine hooks: same signatures as the engine's ----

//go:noinline
func hookSubmitBatch(count uint32, bytes uint64, path uint8) {
	_, _, _ = count, bytes, path
}

//go:noinline
func hookReapBatch(count uint32, bytes uint64, errors uint32) {
	_, _, _ = count, bytes, errors
}

// hooks makes b batches; batch i has i%7+1 transfers of 4096 bytes on path
// i%3, and reaps them with i%2 errors.
func hooks(b int) {
	for i := 0; i < b; i++ {
		c := uint32(i%7 + 1)
		hookSubmitBatch(c, uint64(c)*4096, uint8(i%3))
		hookReapBatch(c, uint64(c)*4096, uint32(i%2))
	}
}

// hooksTime times b submit-hook calls (64 transfers each) and prints the
// mean nanoseconds per call: the overhead benchmark's engine-heavy loop.
func hooksTime(b int) {
	start := time.Now()
	for i := 0; i < b; i++ {
		hookSubmitBatch(64, 64*4096, 1)
	}
	fmt.Printf("%.1f\n", float64(time.Since(start).Nanoseconds())/float64(b))
}

// ---- raw io_uring ----

type sqOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type cqOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, Cqes, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

type params struct {
	SqEntries, CqEntries, Flags, SqThreadCPU, SqThreadIdle, Features, WqFd uint32
	Resv                                                                   [3]uint32
	SqOff                                                                  sqOffsets
	CqOff                                                                  cqOffsets
}

type sqe struct {
	Opcode   uint8
	Flags    uint8
	Ioprio   uint16
	Fd       int32
	Off      uint64
	Addr     uint64
	Len      uint32
	OpFlags  uint32
	UserData uint64
	BufIndex uint16
	Pers     uint16
	SpliceIn int32
	Pad      [2]uint64
}

type rawRing struct {
	fd             int
	sqHead, sqTail *uint32
	sqMask         uint32
	sqArray        []uint32
	sqes           []sqe
	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []byte
}

const (
	opNop        = 0
	opWriteFixed = 5
)

func newRing(entries uint32) *rawRing {
	var p params
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		fail("io_uring_setup: %v", errno)
	}
	r := &rawRing{fd: int(fd)}
	sqLen := int(p.SqOff.Array + p.SqEntries*4)
	sq, err := unix.Mmap(r.fd, 0, sqLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		fail("mmap sq ring: %v", err)
	}
	cqLen := int(p.CqOff.Cqes + p.CqEntries*16)
	cq, err := unix.Mmap(r.fd, 0x8000000, cqLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		fail("mmap cq ring: %v", err)
	}
	sqesMem, err := unix.Mmap(r.fd, 0x10000000, int(p.SqEntries)*64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		fail("mmap sqes: %v", err)
	}
	r.sqHead = (*uint32)(unsafe.Pointer(&sq[p.SqOff.Head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&sq[p.SqOff.Tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&sq[p.SqOff.RingMask]))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Pointer(&sq[p.SqOff.Array])), p.SqEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&sqesMem[0])), p.SqEntries)
	r.cqHead = (*uint32)(unsafe.Pointer(&cq[p.CqOff.Head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&cq[p.CqOff.Tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&cq[p.CqOff.RingMask]))
	r.cqes = cq[p.CqOff.Cqes:]
	return r
}

// submitOne queues e, enters the kernel once to submit and wait for it, and
// returns the completion's result.
func (r *rawRing) submitOne(e sqe) int32 {
	tail := atomic.LoadUint32(r.sqTail)
	idx := tail & r.sqMask
	r.sqes[idx] = e
	r.sqArray[idx] = idx
	atomic.StoreUint32(r.sqTail, tail+1)
	const enterGetEvents = 1
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 1, enterGetEvents, 0, 0)
	if errno != 0 {
		fail("io_uring_enter: %v", errno)
	}
	// A signal (the Go runtime's preemption SIGURG) can end the wait after
	// the submission: the call then returns 1 with no completion yet. Wait
	// again (callers that count io_uring_enter use requests that complete
	// inline, like NOP).
	head := atomic.LoadUint32(r.cqHead)
	for atomic.LoadUint32(r.cqTail) == head {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 1, enterGetEvents, 0, 0)
		if errno != 0 && errno != unix.EINTR {
			fail("io_uring_enter (wait): %v", errno)
		}
	}
	off := int(head&r.cqMask) * 16
	res := *(*int32)(unsafe.Pointer(&r.cqes[off+8]))
	atomic.StoreUint32(r.cqHead, head+1)
	return res
}

func uringNop(n int) {
	r := newRing(8)
	for i := 0; i < n; i++ {
		if res := r.submitOne(sqe{Opcode: opNop, UserData: uint64(i)}); res != 0 {
			fail("nop %d: res %d", i, res)
		}
	}
}

func uringWriteFixed(path string, n, k int, direct bool) {
	fd := openTarget(path, direct)
	// A buffered WRITE_FIXED is punted to io-wq, and the first one makes
	// the submitting thread's first io-wq worker. Linux fails that worker's
	// creation while a signal is pending on the thread (copy_process:
	// -ERESTARTNOINTR), retries three times, then cancels every queued
	// request with -ECANCELED (docs/vm-tests.md, tests/vm/repro). Go's
	// runtime signals its threads (SIGURG) at any time, so this thread keeps
	// SIGURG blocked while it submits: the counts stay exact, with no
	// request issued twice. (The file backend issues such requests again.)
	runtime.LockOSThread()
	var urg unix.Sigset_t
	urg.Val[(unix.SIGURG-1)/64] |= 1 << ((unix.SIGURG - 1) % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &urg, nil); err != nil {
		fail("block SIGURG: %v", err)
	}
	r := newRing(8)
	buf := alignedBuf(k)
	iov := []unix.Iovec{{Base: &buf[0], Len: uint64(k)}}
	const registerBuffers = 0
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerBuffers, uintptr(unsafe.Pointer(&iov[0])), 1, 0, 0)
	if errno != 0 {
		fail("register buffers: %v", errno)
	}
	for i := 0; i < n; i++ {
		res := r.submitOne(sqe{Opcode: opWriteFixed, Fd: int32(fd), Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))),
			Len: uint32(k), Off: uint64(i * k), UserData: uint64(i)})
		if res != int32(k) {
			fail("write_fixed %d: res %d, want %d", i, res, k)
		}
	}
}
