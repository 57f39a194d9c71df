package uring

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// register makes one io_uring_register call on the real ring fd, retrying
// EINTR (buffer registration can be interrupted while it pins pages).
func (u *Ring) register(op uint32, arg unsafe.Pointer, nr uint32) (int, error) {
	if u.fd < 0 {
		return 0, ErrClosed
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
		return fmt.Errorf("register ring fd (IORING_REGISTER_RING_FDS, Linux 5.18): registered %d: %w", n, u.threadErr(err))
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
		return fmt.Errorf("probe opcodes (IORING_REGISTER_PROBE, Linux 5.6): %w", u.threadErr(err))
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
		return ErrClosed
	}
	if len(bufs) == 0 {
		return fmt.Errorf("register buffers: none given: %w", unix.EINVAL)
	}
	iovs := make([]unix.Iovec, len(bufs))
	total := 0
	for i, b := range bufs {
		if len(b) == 0 {
			return fmt.Errorf("register buffer %d: empty: %w", i, unix.EINVAL)
		}
		iovs[i].Base = unsafe.SliceData(b)
		iovs[i].SetLen(len(b))
		total += len(b)
	}
	_, err := u.register(registerBuffers, unsafe.Pointer(&iovs[0]), uint32(len(iovs)))
	if err != nil {
		err = u.threadErr(err)
		if errors.Is(err, unix.ENOMEM) {
			return fmt.Errorf("register %d buffers (%d bytes): %w: %s: %w", len(bufs), total, ErrMemlock, memlockFacts(), err)
		}
		return fmt.Errorf("register %d buffers (%d bytes): %w", len(bufs), total, err)
	}
	u.buffers = len(bufs)
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
		return ErrClosed
	}
	if _, err := u.register(unregisterBuffers, nil, 0); err != nil {
		return fmt.Errorf("unregister buffers: %w", u.threadErr(err))
	}
	u.buffers = 0
	return nil
}

// RegisterFiles registers fds as fixed files 0..len(fds)-1: an SQE with
// SQEFixedFile names the file by index, sparing the fd lookup per operation.
func (u *Ring) RegisterFiles(fds []int32) error {
	if u.closed {
		return ErrClosed
	}
	if len(fds) == 0 {
		return fmt.Errorf("register files: none given: %w", unix.EINVAL)
	}
	if _, err := u.register(registerFiles, unsafe.Pointer(&fds[0]), uint32(len(fds))); err != nil {
		return fmt.Errorf("register %d files: %w", len(fds), u.threadErr(err))
	}
	u.files = len(fds)
	return nil
}

// UnregisterFiles drops the fixed files.
func (u *Ring) UnregisterFiles() error {
	if u.closed {
		return ErrClosed
	}
	if _, err := u.register(unregisterFiles, nil, 0); err != nil {
		return fmt.Errorf("unregister files: %w", u.threadErr(err))
	}
	u.files = 0
	return nil
}
