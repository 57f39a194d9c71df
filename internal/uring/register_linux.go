package uring

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// register makes one io_uring_register call on the real ring fd, retrying
// EINTR (buffer registration can be interrupted while it pins pages).
func (u *Ring) register(op uint32, arg unsafe.Pointer, nr uint32) (int, error) {
	if u.fd < 0 {
		return 0, errRingClosed
	}
	for {
		r, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(u.fd), uintptr(op), uintptr(arg), uintptr(nr), 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(r), nil
	}
}

// registerRingFd registers the ring fd in the owner thread's io_uring
// context, so that every enter skips the fd table lookup and reference count
// (IORING_ENTER_REGISTERED_RING).
func (u *Ring) registerRingFd() error {
	upd := rsrcUpdate{Offset: ^uint32(0), Data: uint64(u.fd)} // offset -1: any free slot
	n, err := u.register(registerRingFds, unsafe.Pointer(&upd), 1)
	if err != nil || n != 1 {
		return fmt.Errorf("uring: register ring fd (IORING_REGISTER_RING_FDS, Linux 5.18): registered %d: %w", n, u.threadErr(err))
	}
	u.enterFd = uintptr(upd.Offset)
	u.enterFlags |= enterRegisteredRing
	return nil
}

// loadProbe asks the kernel which opcodes it supports.
func (u *Ring) loadProbe() error {
	const nOps = 256
	var buf [sizeofProbeHeader + nOps*sizeofProbeOp]byte
	if _, err := u.register(registerProbe, unsafe.Pointer(&buf[0]), nOps); err != nil {
		return fmt.Errorf("uring: probe opcodes (IORING_REGISTER_PROBE, Linux 5.6): %w", u.threadErr(err))
	}
	h := (*probeHeader)(unsafe.Pointer(&buf[0]))
	u.probe.LastOp = Opcode(h.Last_op)
	for i := 0; i < int(h.Ops_len); i++ {
		op := (*probeOp)(unsafe.Pointer(&buf[sizeofProbeHeader+i*sizeofProbeOp]))
		if op.Flags&opSupported != 0 {
			u.probe.ops[op.Op>>6] |= 1 << (op.Op & 63)
		}
	}
	return nil
}

// RegisterBuffers registers bufs as fixed buffers 0..len(bufs)-1 for
// READ_FIXED/WRITE_FIXED/SEND_ZC fixed: the kernel pins their pages once,
// not per operation. Hugepage arena memory (hugepage.Arena.Bytes or a
// Block's Bytes) is the intended source: fewer pages to pin, and aligned for
// O_DIRECT. The pinned memory is charged to RLIMIT_MEMLOCK unless the
// process has CAP_IPC_LOCK; exceeding it returns ErrMemlock with both facts.
// The buffers must stay mapped until UnregisterBuffers or Close.
func (u *Ring) RegisterBuffers(bufs [][]byte) error {
	if u.closed {
		return errRingClosed
	}
	if len(bufs) == 0 {
		return fmt.Errorf("uring: register buffers: none given: %w", unix.EINVAL)
	}
	iovs := make([]unix.Iovec, len(bufs))
	total := 0
	for i, b := range bufs {
		if len(b) == 0 {
			return fmt.Errorf("uring: register buffer %d: empty: %w", i, unix.EINVAL)
		}
		iovs[i].Base = unsafe.SliceData(b)
		iovs[i].SetLen(len(b))
		total += len(b)
	}
	if _, err := u.register(registerBuffers, unsafe.Pointer(&iovs[0]), uint32(len(iovs))); err != nil {
		return u.bufferErr(fmt.Sprintf("register %d buffers (%d bytes)", len(bufs), total), err)
	}
	u.buffers = len(bufs)
	return nil
}

// bufferErr wraps a failed buffer registration: ENOMEM is ErrMemlock, with
// the limit and the capability state.
func (u *Ring) bufferErr(what string, err error) error {
	err = u.threadErr(err)
	if errors.Is(err, unix.ENOMEM) {
		return fmt.Errorf("%w: %s: %s: %w", ErrMemlock, what, memlockFacts(), err)
	}
	return fmt.Errorf("uring: %s: %w", what, err)
}

// maxRegBuffers is the kernel's limit on a buffer table
// (IORING_MAX_REG_BUFFERS, io_uring/rsrc.h, not in the UAPI headers).
const maxRegBuffers = 1 << 14

// RegisterBuffersSparse registers a table of n empty fixed-buffer slots
// (IORING_REGISTER_BUFFERS2 with IORING_RSRC_REGISTER_SPARSE, Linux 5.19),
// to be filled and cleared one slot at a time with UpdateBuffers: a pool
// that grows by whole arenas registers each new arena into its own slot
// without re-registering (and re-pinning) the others. n is 1..16384. A
// kernel without the operation or the flag answers EINVAL: that is
// ErrNotSupported, naming both.
func (u *Ring) RegisterBuffersSparse(n int) error {
	if u.closed {
		return errRingClosed
	}
	if n <= 0 || n > maxRegBuffers {
		return fmt.Errorf("uring: register a sparse table of %d buffers: want 1..%d: %w", n, maxRegBuffers, unix.EINVAL)
	}
	rr := rsrcRegister{Nr: uint32(n), Flags: rsrcRegisterSparse}
	if _, err := u.register(registerBuffers2, unsafe.Pointer(&rr), uint32(unsafe.Sizeof(rr))); err != nil {
		if errors.Is(err, unix.EINVAL) {
			// n is in range and the struct is the kernel's own: only an
			// unknown opcode or flag is left.
			return fmt.Errorf("uring: register a sparse table of %d buffers: needs "+
				"IORING_REGISTER_BUFFERS2 (Linux 5.13) with IORING_RSRC_REGISTER_SPARSE (Linux 5.19): %w (%w)",
				n, ErrNotSupported, err)
		}
		return u.bufferErr(fmt.Sprintf("register a sparse table of %d buffers", n), err)
	}
	u.buffers = n
	return nil
}

// UpdateBuffers replaces fixed-buffer slots slot..slot+len(bufs)-1 with
// bufs (IORING_REGISTER_BUFFERS_UPDATE, Linux 5.13): the kernel pins each
// new buffer's pages and lets go of the old one once the operations using
// it have completed. A nil or empty buffer clears its slot: a READ_FIXED or
// WRITE_FIXED naming it then fails (EFAULT). The slots must lie inside the
// table (RegisterBuffersSparse or RegisterBuffers); the buffers must stay
// mapped while registered, as for RegisterBuffers.
func (u *Ring) UpdateBuffers(slot int, bufs [][]byte) error {
	if u.closed {
		return errRingClosed
	}
	if u.buffers == 0 {
		return fmt.Errorf("uring: update buffer slot %d: no buffer table registered (RegisterBuffersSparse first): %w",
			slot, unix.ENXIO)
	}
	if len(bufs) == 0 || slot < 0 || slot+len(bufs) > u.buffers {
		return fmt.Errorf("uring: update buffer slots %d..%d: outside the table's %d slots: %w",
			slot, slot+len(bufs)-1, u.buffers, unix.EINVAL)
	}
	iovs := make([]unix.Iovec, len(bufs))
	total := 0
	for i, b := range bufs {
		if len(b) > 0 {
			iovs[i].Base = unsafe.SliceData(b)
			iovs[i].SetLen(len(b))
			total += len(b)
		}
	}
	upd := rsrcUpdate2{Offset: uint32(slot), Data: uint64(uintptr(unsafe.Pointer(&iovs[0]))), Nr: uint32(len(bufs))}
	n, err := u.register(registerBuffersUpdate, unsafe.Pointer(&upd), uint32(unsafe.Sizeof(upd)))
	runtime.KeepAlive(iovs) // the kernel read them through upd.Data, a plain integer
	what := fmt.Sprintf("update buffer slots %d..%d (%d bytes)", slot, slot+len(bufs)-1, total)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			// The range was checked above and a bad buffer is EFAULT:
			// only an unknown opcode is left.
			return fmt.Errorf("uring: %s: needs IORING_REGISTER_BUFFERS_UPDATE (Linux 5.13): %w (%w)",
				what, ErrNotSupported, err)
		}
		return u.bufferErr(what, err)
	}
	if n != len(bufs) {
		return fmt.Errorf("uring: %s: the kernel updated %d slots of %d: %w", what, n, len(bufs), unix.EIO)
	}
	return nil
}

// memlockFacts says what limits buffer registration: RLIMIT_MEMLOCK and
// whether CAP_IPC_LOCK (which lifts it) is in the effective set.
func memlockFacts() string {
	var rl unix.Rlimit
	lim := "unknown"
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) == nil {
		lim = fmt.Sprintf("%d bytes", rl.Cur)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	capState := "unknown"
	if unix.Capget(&hdr, &data[0]) == nil {
		if data[0].Effective&(1<<unix.CAP_IPC_LOCK) != 0 {
			capState = "held"
		} else {
			capState = "not held"
		}
	}
	return fmt.Sprintf("RLIMIT_MEMLOCK is %s, CAP_IPC_LOCK %s", lim, capState)
}

// UnregisterBuffers drops the fixed buffers.
func (u *Ring) UnregisterBuffers() error {
	if u.closed {
		return errRingClosed
	}
	if _, err := u.register(unregisterBuffers, nil, 0); err != nil {
		return fmt.Errorf("uring: unregister buffers: %w", u.threadErr(err))
	}
	u.buffers = 0
	return nil
}

// RegisterFiles registers fds as fixed files 0..len(fds)-1: an SQE with
// SQEFixedFile names the file by index, sparing the fd lookup per operation.
func (u *Ring) RegisterFiles(fds []int32) error {
	if u.closed {
		return errRingClosed
	}
	if len(fds) == 0 {
		return fmt.Errorf("uring: register files: none given: %w", unix.EINVAL)
	}
	if _, err := u.register(registerFiles, unsafe.Pointer(&fds[0]), uint32(len(fds))); err != nil {
		return fmt.Errorf("uring: register %d files: %w", len(fds), u.threadErr(err))
	}
	u.files = len(fds)
	return nil
}

// maxRegFiles is the kernel's limit on a file table
// (IORING_MAX_FIXED_FILES); RLIMIT_NOFILE bounds it too.
const maxRegFiles = 1 << 20

// RegisterFilesSparse registers a table of n empty fixed-file slots
// (IORING_REGISTER_FILES2 with IORING_RSRC_REGISTER_SPARSE, Linux 5.19),
// which UpdateFiles fills and clears one slot at a time: a backend serving
// files that come and go keeps one table. n is 1..2^20 and at most
// RLIMIT_NOFILE (EMFILE otherwise). A kernel without the operation or the
// flag answers EINVAL: that is ErrNotSupported, naming both.
func (u *Ring) RegisterFilesSparse(n int) error {
	if u.closed {
		return errRingClosed
	}
	if n <= 0 || n > maxRegFiles {
		return fmt.Errorf("uring: register a sparse table of %d files: want 1..%d: %w", n, maxRegFiles, unix.EINVAL)
	}
	rr := rsrcRegister{Nr: uint32(n), Flags: rsrcRegisterSparse}
	if _, err := u.register(registerFiles2, unsafe.Pointer(&rr), uint32(unsafe.Sizeof(rr))); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("uring: register a sparse table of %d files: needs "+
				"IORING_REGISTER_FILES2 (Linux 5.13) with IORING_RSRC_REGISTER_SPARSE (Linux 5.19): %w (%w)",
				n, ErrNotSupported, err)
		}
		return fmt.Errorf("uring: register a sparse table of %d files: %w", n, u.threadErr(err))
	}
	u.files = n
	return nil
}

// UpdateFiles puts fds into fixed-file slots slot..slot+len(fds)-1
// (IORING_REGISTER_FILES_UPDATE2, Linux 5.13); -1 clears a slot. The kernel
// takes its own reference to each new file (closing the fd afterwards does
// not end the registration) and lets go of a replaced file once the
// requests that use it have completed; an SQE that names a cleared slot
// fails with EBADF. The slots must lie inside the table (RegisterFiles or
// RegisterFilesSparse).
func (u *Ring) UpdateFiles(slot int, fds []int32) error {
	if u.closed {
		return errRingClosed
	}
	if u.files == 0 {
		return fmt.Errorf("uring: update file slot %d: no file table registered (RegisterFilesSparse first): %w", slot, unix.ENXIO)
	}
	if len(fds) == 0 || slot < 0 || slot+len(fds) > u.files {
		return fmt.Errorf("uring: update file slots %d..%d: outside the table's %d slots: %w", slot, slot+len(fds)-1, u.files, unix.EINVAL)
	}
	upd := rsrcUpdate2{Offset: uint32(slot), Data: uint64(uintptr(unsafe.Pointer(&fds[0]))), Nr: uint32(len(fds))}
	n, err := u.register(registerFilesUpdate2, unsafe.Pointer(&upd), uint32(unsafe.Sizeof(upd)))
	runtime.KeepAlive(fds) // the kernel read them through upd.Data, a plain integer
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("uring: update file slots %d..%d: needs IORING_REGISTER_FILES_UPDATE2 (Linux 5.13): %w (%w)",
				slot, slot+len(fds)-1, ErrNotSupported, err)
		}
		return fmt.Errorf("uring: update file slots %d..%d: %w", slot, slot+len(fds)-1, u.threadErr(err))
	}
	if n != len(fds) {
		return fmt.Errorf("uring: update file slots %d..%d: the kernel updated %d of %d: %w", slot, slot+len(fds)-1, n, len(fds), unix.EIO)
	}
	return nil
}

// UnregisterFiles drops the fixed files.
func (u *Ring) UnregisterFiles() error {
	if u.closed {
		return errRingClosed
	}
	if _, err := u.register(unregisterFiles, nil, 0); err != nil {
		return fmt.Errorf("uring: unregister files: %w", u.threadErr(err))
	}
	u.files = 0
	return nil
}
