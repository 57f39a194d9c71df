package uring

import (
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Opcode is an io_uring operation (IORING_OP_*).
type Opcode uint8

// The opcodes hcomm prepares.
const (
	OpNop         Opcode = opNop
	OpReadv       Opcode = opReadv
	OpWritev      Opcode = opWritev
	OpFsync       Opcode = opFsync
	OpReadFixed   Opcode = opReadFixed
	OpWriteFixed  Opcode = opWriteFixed
	OpPollAdd     Opcode = opPollAdd
	OpTimeout     Opcode = opTimeout
	OpLinkTimeout Opcode = opLinkTimeout
	OpRead        Opcode = opRead
	OpWrite       Opcode = opWrite
	OpSend        Opcode = opSend
	OpRecv        Opcode = opRecv
	OpSendZC      Opcode = opSendZC
	OpAsyncCancel Opcode = opAsyncCancel
)

var opNames = map[Opcode]string{
	opNop: "NOP", opReadv: "READV", opWritev: "WRITEV", opFsync: "FSYNC", opReadFixed: "READ_FIXED",
	opWriteFixed: "WRITE_FIXED", opPollAdd: "POLL_ADD", opPollRemove: "POLL_REMOVE",
	opSyncFileRange: "SYNC_FILE_RANGE", opSendmsg: "SENDMSG", opRecvmsg: "RECVMSG", opTimeout: "TIMEOUT",
	opTimeoutRemove: "TIMEOUT_REMOVE", opAccept: "ACCEPT", opAsyncCancel: "ASYNC_CANCEL",
	opLinkTimeout: "LINK_TIMEOUT", opConnect: "CONNECT", opFallocate: "FALLOCATE", opOpenat: "OPENAT",
	opClose: "CLOSE", opFilesUpdate: "FILES_UPDATE", opStatx: "STATX", opRead: "READ", opWrite: "WRITE",
	opFadvise: "FADVISE", opMadvise: "MADVISE", opSend: "SEND", opRecv: "RECV", opOpenat2: "OPENAT2",
	opEpollCtl: "EPOLL_CTL", opSplice: "SPLICE", opProvideBuffers: "PROVIDE_BUFFERS",
	opRemoveBuffers: "REMOVE_BUFFERS", opTee: "TEE", opShutdown: "SHUTDOWN", opRenameat: "RENAMEAT",
	opUnlinkat: "UNLINKAT", opMkdirat: "MKDIRAT", opSymlinkat: "SYMLINKAT", opLinkat: "LINKAT",
	opMsgRing: "MSG_RING", opFsetxattr: "FSETXATTR", opSetxattr: "SETXATTR", opFgetxattr: "FGETXATTR",
	opGetxattr: "GETXATTR", opSocket: "SOCKET", opUringCmd: "URING_CMD", opSendZC: "SEND_ZC",
	opSendmsgZC: "SENDMSG_ZC",
}

func (o Opcode) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("OP_%d", uint8(o))
}

// Probe is the kernel's answer to IORING_REGISTER_PROBE: which opcodes it
// supports.
type Probe struct {
	LastOp Opcode // highest opcode the kernel knows
	ops    [4]uint64
}

// Supported reports whether the kernel supports op.
func (p Probe) Supported(op Opcode) bool { return p.ops[op>>6]&(1<<(op&63)) != 0 }

// Ops lists the supported opcodes.
func (p Probe) Ops() []Opcode {
	var ops []Opcode
	for op := 0; op < 256; op++ {
		if p.Supported(Opcode(op)) {
			ops = append(ops, Opcode(op))
		}
	}
	return ops
}

func (p Probe) String() string {
	var b strings.Builder
	for i, op := range p.Ops() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(op.String())
	}
	return b.String()
}

// SQEFlags are per-entry flags (IOSQE_*).
type SQEFlags uint8

// Entry flags.
const (
	SQEFixedFile      SQEFlags = sqeFixedFile      // Fd is an index into the registered files
	SQEIODrain        SQEFlags = sqeIODrain        // start after all earlier entries complete
	SQEIOLink         SQEFlags = sqeIOLink         // the next entry starts after this one succeeds
	SQEIOHardlink     SQEFlags = sqeIOHardlink     // ... after this one completes, success or not
	SQEAsync          SQEFlags = sqeAsync          // go to io-wq directly
	SQECQESkipSuccess SQEFlags = sqeCQESkipSuccess // post no CQE when it succeeds
)

// Per-opcode flags.
const (
	FsyncDatasync       = fsyncDatasync       // PrepFsync: fdatasync(2)
	TimeoutAbs          = timeoutAbs          // PrepTimeout: absolute time
	TimeoutBoottime     = timeoutBoottime     // CLOCK_BOOTTIME instead of CLOCK_MONOTONIC
	TimeoutRealtime     = timeoutRealtime     // CLOCK_REALTIME
	TimeoutEtimeSuccess = timeoutEtimeSuccess // expiry is a success (res -ETIME without failing links)
	RecvsendPollFirst   = recvsendPollFirst   // PrepSend/Recv/SendZC: poll before trying
	SendZCReportUsage   = sendZCReportUsage   // SEND_ZC notification reports whether data was copied
	NotifUsageZCCopied  = notifUsageZCCopied  // in the notification's Res: the kernel copied after all
	CancelAll           = asyncCancelAll      // PrepCancel: every match, not the first (Linux 5.19)
)

// SQE is one submission queue entry, the kernel-shared 64-byte slot that
// GetSQE hands out. Fill it with exactly one Prep method (each sets every
// field, so no stale field survives from the slot's previous use), then
// optionally SetUserData and SetFlags.
//
// Memory handed to the kernel by address (buffers, iovecs, the eventfd
// counter) must stay valid and must not move until the operation completes
// (for SEND_ZC: until its notification): use hugepage arena memory, or Go
// heap memory that you keep referenced — never memory on a goroutine stack,
// which moves when the stack grows. Timeouts need no such care: the ring
// owns their timespec memory.
type SQE struct{ s sqe }

// CQE is one completion queue entry, copied out of the ring by PeekCQEs.
type CQE struct{ c cqe }

// UserData is the value the SQE carried (SetUserData).
func (c CQE) UserData() uint64 { return c.c.Data }

// Res is the operation's result: a byte count or similar, or a negated errno.
func (c CQE) Res() int32 { return c.c.Res }

// Flags are the IORING_CQE_F_* bits.
func (c CQE) Flags() uint32 { return c.c.Flags }

// More reports IORING_CQE_F_MORE: another CQE for the same request follows
// (SEND_ZC's notification).
func (c CQE) More() bool { return c.c.Flags&cqeFMore != 0 }

// Notif reports IORING_CQE_F_NOTIF: this is SEND_ZC's notification that the
// kernel no longer uses the buffer.
func (c CQE) Notif() bool { return c.c.Flags&cqeFNotif != 0 }

// Err is the errno of a failed operation (Res < 0), or nil.
func (c CQE) Err() error {
	if c.c.Res < 0 {
		return syscall.Errno(-c.c.Res)
	}
	return nil
}

// addrOf is the address of b's first byte for an SQE. The kernel reads or
// writes that memory after the call returns, so it must never move: a
// buffer the compiler proved local would live on the goroutine's stack,
// which the runtime copies elsewhere when it grows, and the kernel would
// then write into the old stack (a test saw its eventfd counter read 0
// this way). addrOf makes the memory escape, so such buffers are
// allocated on the heap, where Go never moves them.
func addrOf(b []byte) uint64 { return pinAddr(unsafe.Pointer(unsafe.SliceData(b))) }

// pinAddr returns p as an SQE address after making it escape (see addrOf).
func pinAddr(p unsafe.Pointer) uint64 {
	if escapeSink.never {
		escapeSink.p = p
	}
	return uint64(uintptr(p))
}

// escapeSink is written only when never is set, which nothing does: the
// store's mere possibility is what makes the compiler move what pinAddr
// is given to the heap.
var escapeSink struct {
	never bool
	p     unsafe.Pointer
}

// bufLen is the SQE length of buf: len(buf), capped at the largest the
// 32-bit field holds. A buffer of 4 GiB or more (a hugepage arena can be)
// then moves a prefix and the result says how much (the kernel caps one
// read or write near 2 GiB anyway), where truncating the length would
// have asked for len mod 4 GiB bytes — 0, read as end of file, for 4 GiB.
func bufLen(b []byte) uint32 { return uint32(min(uint64(len(b)), math.MaxUint32)) }

// prepRW sets every field: the common shape of liburing's io_uring_prep_rw.
func (e *SQE) prepRW(op Opcode, fd int, addr uint64, n uint32, off uint64) {
	e.s = sqe{Opcode: uint8(op), Fd: int32(fd), Addr: addr, Len: n, Off: off}
}

// SetUserData sets the value the completion carries back.
func (e *SQE) SetUserData(v uint64) { e.s.User_data = v }

// SetFlags sets the entry's IOSQE_* flags (replacing earlier ones).
func (e *SQE) SetFlags(f SQEFlags) { e.s.Flags = uint8(f) }

// Flags returns the entry's IOSQE_* flags.
func (e *SQE) Flags() SQEFlags { return SQEFlags(e.s.Flags) }

// Opcode returns the prepared operation.
func (e *SQE) Opcode() Opcode { return Opcode(e.s.Opcode) }

// PrepNop prepares a no-op.
func (e *SQE) PrepNop() { e.prepRW(OpNop, -1, 0, 0, 0) }

// PrepRead prepares pread(fd, buf, off). off = ^uint64(0) reads at the file
// position.
func (e *SQE) PrepRead(fd int, buf []byte, off uint64) {
	e.prepRW(OpRead, fd, addrOf(buf), bufLen(buf), off)
}

// PrepWrite prepares pwrite(fd, buf, off).
func (e *SQE) PrepWrite(fd int, buf []byte, off uint64) {
	e.prepRW(OpWrite, fd, addrOf(buf), bufLen(buf), off)
}

// PrepReadFixed reads into buf, which must lie inside registered buffer
// bufIndex (RegisterBuffers): no page pinning per operation.
func (e *SQE) PrepReadFixed(fd int, buf []byte, off uint64, bufIndex uint16) {
	e.prepRW(OpReadFixed, fd, addrOf(buf), bufLen(buf), off)
	e.s.Buf_index = bufIndex
}

// PrepWriteFixed writes from buf inside registered buffer bufIndex.
func (e *SQE) PrepWriteFixed(fd int, buf []byte, off uint64, bufIndex uint16) {
	e.prepRW(OpWriteFixed, fd, addrOf(buf), bufLen(buf), off)
	e.s.Buf_index = bufIndex
}

// PrepReadv prepares preadv(fd, iovs, off). The iovec array must stay valid
// until the SQE is submitted (IORING_FEAT_SUBMIT_STABLE), the buffers until
// completion.
func (e *SQE) PrepReadv(fd int, iovs []unix.Iovec, off uint64) {
	e.prepRW(OpReadv, fd, pinAddr(unsafe.Pointer(unsafe.SliceData(iovs))), uint32(len(iovs)), off)
}

// PrepWritev prepares pwritev(fd, iovs, off).
func (e *SQE) PrepWritev(fd int, iovs []unix.Iovec, off uint64) {
	e.prepRW(OpWritev, fd, pinAddr(unsafe.Pointer(unsafe.SliceData(iovs))), uint32(len(iovs)), off)
}

// PrepFsync prepares fsync(fd), or fdatasync with FsyncDatasync.
func (e *SQE) PrepFsync(fd int, flags uint32) {
	e.prepRW(OpFsync, fd, 0, 0, 0)
	e.s.Rw_flags = flags
}

// PrepSend prepares send(fd, buf, msgFlags).
func (e *SQE) PrepSend(fd int, buf []byte, msgFlags int) {
	e.prepRW(OpSend, fd, addrOf(buf), bufLen(buf), 0)
	e.s.Rw_flags = uint32(msgFlags)
}

// PrepRecv prepares recv(fd, buf, msgFlags).
func (e *SQE) PrepRecv(fd int, buf []byte, msgFlags int) {
	e.prepRW(OpRecv, fd, addrOf(buf), bufLen(buf), 0)
	e.s.Rw_flags = uint32(msgFlags)
}

// PrepSendZC prepares a zero-copy send of buf: the kernel pins the payload's
// pages (its address, not the slice header's) and sends from them. It
// completes twice: a CQE with the result and More() set, then a
// notification CQE (Notif() set, same user data) once the kernel has let go
// of buf; do not touch buf before the notification. zcFlags:
// RecvsendPollFirst, SendZCReportUsage.
func (e *SQE) PrepSendZC(fd int, buf []byte, msgFlags int, zcFlags uint16) {
	e.prepRW(OpSendZC, fd, addrOf(buf), bufLen(buf), 0)
	e.s.Rw_flags = uint32(msgFlags)
	e.s.Ioprio = zcFlags
}

// PrepSendZCFixed is PrepSendZC from registered buffer bufIndex.
func (e *SQE) PrepSendZCFixed(fd int, buf []byte, msgFlags int, zcFlags uint16, bufIndex uint16) {
	e.PrepSendZC(fd, buf, msgFlags, zcFlags|recvsendFixedBuf)
	e.s.Buf_index = bufIndex
}

// PrepPollAdd prepares a one-shot poll of fd for events (unix.POLLIN, ...);
// the CQE's Res holds the ready events.
func (e *SQE) PrepPollAdd(fd int, events uint32) {
	e.prepRW(OpPollAdd, fd, 0, 0, 0)
	e.s.Rw_flags = events // poll32_events; little-endian layout
}

// PrepReadEventfd prepares an 8-byte read of an eventfd into *counter: the
// completion arrives when the eventfd is signalled (a device interrupt
// through VFIO, for instance), with the count in *counter. counter must stay
// valid until then (heap or arena memory, see SQE).
func (e *SQE) PrepReadEventfd(efd int, counter *uint64) {
	e.prepRW(OpRead, efd, pinAddr(unsafe.Pointer(counter)), 8, 0)
}

// PrepCancel prepares IORING_OP_ASYNC_CANCEL (Linux 5.5) of the request
// in flight whose user data is userData; flags 0 cancels the first match,
// CancelAll every match. The cancelled request completes with -ECANCELED;
// this entry's Res is 0 (one cancelled; with CancelAll, how many), -ENOENT
// when none matched, or -EALREADY when the match is already running and
// cannot be stopped (it completes on its own). A kernel that does not know
// a flag answers -EINVAL in Res.
func (e *SQE) PrepCancel(userData uint64, flags uint32) {
	e.prepRW(OpAsyncCancel, -1, userData, 0, 0)
	e.s.Rw_flags = flags // cancel_flags
}

// PrepCancelAny prepares the cancellation of every request in flight on
// the ring, whatever its user data (IORING_ASYNC_CANCEL_ANY|ALL, Linux
// 5.19; an older kernel answers -EINVAL in Res): Res is how many were
// cancelled. For closing a ring with reads still pending (an empty pipe, a
// quiet socket).
func (e *SQE) PrepCancelAny() { e.PrepCancel(0, asyncCancelAny|asyncCancelAll) }

// slot returns the index of e in the SQE array, or an error when e does not
// belong to this ring.
func (u *Ring) slot(e *SQE) (int, error) {
	if len(u.sqes) == 0 {
		return 0, errRingClosed
	}
	base := uintptr(unsafe.Pointer(&u.sqes[0]))
	p := uintptr(unsafe.Pointer(e))
	if p < base || p >= base+uintptr(len(u.sqes))*sizeofSQE || (p-base)%sizeofSQE != 0 {
		return 0, ErrNotFromRing
	}
	return int((p - base) / sizeofSQE), nil
}

// setTimespec stores d in the timespec that belongs to e's slot and returns
// its address. The kernel copies the timespec while it consumes the SQE,
// and the slot (with its timespec) is reused only after that: the memory is
// valid exactly as long as the kernel needs it, and never on a Go stack.
func (u *Ring) setTimespec(e *SQE, d time.Duration) (uint64, error) {
	i, err := u.slot(e)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("timeout %v: negative: %w", d, unix.EINVAL)
	}
	ts := &u.timespecs[i]
	ts.Sec = int64(d / time.Second)
	ts.Nsec = int64(d % time.Second)
	return uint64(uintptr(unsafe.Pointer(ts))), nil
}

// PrepTimeout prepares a timeout that completes after d (Res -ETIME), or
// earlier, with Res 0, once count other completions have been posted
// (count 0: time only). flags: TimeoutAbs, TimeoutBoottime, ...
func (u *Ring) PrepTimeout(e *SQE, d time.Duration, count uint32, flags uint32) error {
	addr, err := u.setTimespec(e, d)
	if err != nil {
		return fmt.Errorf("uring: prep TIMEOUT: %w", err)
	}
	e.prepRW(OpTimeout, -1, addr, 1, uint64(count))
	e.s.Rw_flags = flags
	return nil
}

// PrepLinkTimeout prepares a timeout for the previous SQE, which must carry
// SQEIOLink: if it has not completed after d, it is cancelled (its CQE Res
// -ECANCELED, this one's -ETIME; otherwise this one's is -ECANCELED).
func (u *Ring) PrepLinkTimeout(e *SQE, d time.Duration, flags uint32) error {
	addr, err := u.setTimespec(e, d)
	if err != nil {
		return fmt.Errorf("uring: prep LINK_TIMEOUT: %w", err)
	}
	e.prepRW(OpLinkTimeout, -1, addr, 1, 0)
	e.s.Rw_flags = flags
	return nil
}
