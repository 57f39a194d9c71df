// Package uring is hcomm's io_uring layer over golang.org/x/sys/unix: no
// cgo, no linkname; the io_uring_setup/enter/register system calls, the ring
// mmaps, and the SQE/CQE layouts generated from linux/io_uring.h
// (types_linux.go, make generate).
//
// # Why internal
//
// The layer is a means, not hcomm's product: programs move data through the
// engine and its io_uring file backend, which own the ring, the registered
// pool arenas and the completion loop. It implements only what those need
// (a dozen opcodes, fixed buffers and files, a sparse buffer table for a
// pool that grows), and its API follows the backend's needs from one change
// to the next. Public, it would freeze that API and compete with general
// io_uring libraries for a job it does not try to do. Internal, it can grow
// or change with the engine; promoting it later breaks nobody, taking it
// back would.
//
// # Use
//
// New(Config) sets every io_uring_setup parameter, maps the rings (one
// mapping with IORING_FEAT_SINGLE_MMAP), tries the modern flags
// (NO_SQARRAY, DEFER_TASKRUN, SINGLE_ISSUER, COOP_TASKRUN, CQSIZE) and drops
// them newest-first on EINVAL, recording each refusal (Fallbacks), registers
// the ring fd and probes the opcodes (Probe). GetSQE hands out a
// kernel-shared entry, the SQE Prep methods fill it (NOP, READ/WRITE,
// READ_FIXED/WRITE_FIXED, READV/WRITEV, FSYNC, SEND/RECV, SEND_ZC, POLL_ADD,
// ASYNC_CANCEL, an eventfd READ; Ring.PrepTimeout and Ring.PrepLinkTimeout
// own their timespec memory), Submit publishes a batch with at most one
// io_uring_enter, PeekCQEs reaps completions in batches, SubmitAndWait(Timeout)
// sleeps for them. Stats counts submissions, completions and every
// io_uring_enter. RegisterBuffers (hugepage arenas), RegisterBuffersSparse
// with UpdateBuffers (a table whose slots are filled and cleared one at a
// time, for a pool that grows and shrinks by arenas), and RegisterFiles
// register fixed resources.
//
// Threading: by default the ring is bound to the OS thread of the goroutine
// that called New (it calls runtime.LockOSThread): SINGLE_ISSUER,
// DEFER_TASKRUN and the registered ring fd are per thread, so only that
// goroutine may use the ring, and it must Close it. Other callers get
// ErrWrongThread. Config.Unbound gives up those features for a ring any one
// goroutine at a time may use. A Ring is never safe for concurrent use.
//
// System calls: a submit-only enter (and one that only runs deferred task
// work) uses RawSyscall6, which skips the Go scheduler's bookkeeping because
// it cannot sleep; an enter that waits for completions uses Syscall6, so the
// scheduler can run other goroutines meanwhile. A signal does not end a
// wait: EINTR is retried, and so is a call that submitted and was then
// interrupted before enough completions were ready.
//
// Sentinel errors, for errors.Is: ErrConfig, ErrClosed, ErrWrongThread,
// ErrSQFull, ErrBusy, ErrNotFromRing, ErrNotSupported (wraps
// errors.ErrUnsupported; it and ErrClosed are hcomm's shared sentinels, the
// same values as engine's), ErrTimeout, ErrMemlock. Kernel errors are wrapped
// as unix.Errno values, and a failed operation's CQE.Err is a syscall.Errno.
package uring
