package uringfile

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/uring"
)

// DirectAlign is the alignment O_DIRECT needs of addresses, lengths and
// offsets (the logical block size of common devices and file systems).
const DirectAlign = 4096

// Config configures the backend. The zero value is the default.
type Config struct {
	// Logger receives warnings (default: the engine's logger).
	Logger *slog.Logger
	// MaxFiles is the size of the ring's registered-file table: the most
	// files served at once (default DefaultMaxFiles, lowered to
	// RLIMIT_NOFILE; 1..MaxFiles).
	MaxFiles int
}

// Op codes (backend.Op.Code).
const (
	opWrite = 1 + iota
	opRead
)

// Backend moves host blocks to and from files through io_uring. Create it
// with New (one file, more with AddFile) or NewEmpty and give it to
// engine.Open.
type Backend struct {
	cfg      Config
	name     string // New's file, for Describe
	attached atomic.Bool
	log      *slog.Logger
	ctr      *backend.Counters
	desc     backend.Description

	// The file table (files.go). mu serializes its writers (AddFile,
	// RemoveFile, Attach, Close); Prepare and Forward read a slot's
	// state without it.
	mu           sync.Mutex
	files        []fileSlot
	fresh        int      // slots never used: fresh..len(files)-1
	free         []uint32 // slots to reuse, oldest first
	draining     []uint32 // removed slots the kernel may still have SQEs for
	nfiles       int
	closed       bool
	alignment    int         // the engine's Alignment (Attach)
	fileTable    bool        // the ring has a sparse file table: files come and go
	fileTableErr error       // why not
	fwdBusy      atomic.Bool // the owner may hold an SQE naming a file it has not published (drainTail)
	reapBusy     bool        // Reap set fwdBusy (owner)

	u         *uring.Ring
	fixedFile bool // files are named by their slot in the ring's table
	sparse    bool // a table of MaxArenas fixed-buffer slots, one per arena slot
	cqes      []uring.CQE
	queued    int
	inFlight  int
	canceling bool // an ASYNC_CANCEL of ours is in flight (Cancel)
	cancelled bool // Cancel ran: an ECANCELED may be ours, never re-issued

	// inflight remembers each forwarded transfer's Op by tag (tags in
	// flight are distinct modulo the engine's queue depth, a power of
	// two), so that one the kernel canceled because a submitting thread
	// exited can be issued again (reissue).
	inflight []inflightOp
	tagMask  uint64
	reissued atomic.Uint64

	// WaitCompletions' own state: the ring fd and the wait argument
	// (set at Attach, then used only by whoever holds the engine's reaping
	// flag, without the owner flag: nothing it touches is written by the
	// owner's methods).
	ringFd     int
	minTimeout bool // the kernel honours min_wait_usec (IORING_FEAT_MIN_TIMEOUT)
	waitArg    geteventsArg
	waitTS     unix.Timespec

	// arenas are the pool's arenas by slot; fixed says which slots are
	// registered (buffer index = slot).
	arenas [backend.MaxArenas][]byte
	fixed  [backend.MaxArenas]bool
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend over f, which must be a regular file or a block
// device opened for reading and/or writing, without O_APPEND: its file 0
// (engine.FileAt). AddFile adds more. The file stays the caller's.
func New(f *os.File, cfg Config) (*Backend, error) {
	if _, _, err := checkFile(f); err != nil {
		return nil, err
	}
	b, err := NewEmpty(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := b.AddFile(f); err != nil {
		return nil, err
	}
	b.name = f.Name()
	return b, nil
}

// Describe implements backend.Backend.
func (b *Backend) Describe() backend.Description { return b.desc }

// Attach implements backend.Backend: an io_uring of twice the engine's depth,
// the file registered as a fixed file.
func (b *Backend) Attach(env backend.Env) (err error) {
	if !b.attached.CompareAndSwap(false, true) {
		return errors.New("uringfile: backend already attached to an engine")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if env.QueueDepth < 1 || env.QueueDepth&(env.QueueDepth-1) != 0 {
		return fmt.Errorf("uringfile: the engine's queue depth %d is not a power of two: %w", env.QueueDepth, backend.ErrBadConfig)
	}
	b.ctr, b.log = env.Counters, b.cfg.Logger
	if b.log == nil {
		b.log = env.Logger
	}
	b.alignment = env.Alignment
	device := b.name
	if device == "" {
		device = fmt.Sprintf("files (up to %d)", len(b.files))
	}
	b.desc = backend.Description{Name: "file", Device: device, Locs: 1 << backend.LocFile, Align: 1, CPUThreshold: -1}
	for i := range b.fresh {
		if st := b.files[i].state.Load(); st&(fileLive|fileDirect) == fileLive|fileDirect {
			if env.Alignment < DirectAlign {
				return fmt.Errorf("uringfile: file %#x is O_DIRECT: the engine's Alignment %d must be ≥ %d: %w", st>>slotBits<<slotBits|uint32(i), env.Alignment, DirectAlign, backend.ErrBadConfig)
			}
			if b.desc.Align == 1 {
				b.desc.Align = DirectAlign
				b.desc.Features = append(b.desc.Features, "o_direct")
			}
		}
	}
	// The ring is Unbound (any one goroutine at a time: the engine's
	// owner) and uses no DEFER_TASKRUN/COOP_TASKRUN, so completions are
	// posted without waiting for the submitting thread to enter the
	// kernel again.
	entries := uint32(max(8, 2*env.QueueDepth))
	if b.u, err = uring.New(uring.Config{Entries: entries, Unbound: true, NoModernFlags: true}); err != nil {
		return fmt.Errorf("uringfile: io_uring for %s: %w", device, err)
	}
	b.cqes = make([]uring.CQE, b.u.CQEntries())
	b.inflight = make([]inflightOp, env.QueueDepth)
	b.tagMask = uint64(env.QueueDepth - 1)
	b.ringFd = b.u.Fd()
	b.minTimeout = b.u.Features()&featMinTimeout != 0
	if err := b.u.RegisterBuffersSparse(backend.MaxArenas); err != nil {
		b.desc.Fallbacks = append(b.desc.Fallbacks, fmt.Errorf("uringfile: no sparse fixed-buffer table: only the pool's first arena is registered, arenas it grows by use plain READ/WRITE: %w", err))
	} else {
		b.sparse = true
	}
	return b.registerFiles()
}

// registerFiles gives the ring its file table (Attach, under mu): a sparse
// table of MaxFiles slots holding the files added so far. A kernel without
// sparse tables (before 5.19) serves one file, file 0: registered as the
// only fixed file, or by its fd.
func (b *Backend) registerFiles() error {
	err := b.u.RegisterFilesSparse(len(b.files))
	if err == nil {
		fds := make([]int32, b.fresh)
		for i := range fds {
			fds[i] = -1
			if b.files[i].state.Load()&fileLive != 0 {
				fds[i] = int32(b.files[i].fd)
			}
		}
		if len(fds) > 0 {
			if err := b.u.UpdateFiles(0, fds); err != nil {
				return fmt.Errorf("uringfile: register %d files: %w", len(fds), err)
			}
		}
		b.fileTable, b.fixedFile = true, true
		b.desc.Features = append(b.desc.Features, "fixed-files")
		return nil
	}
	b.fileTableErr = err
	b.desc.Fallbacks = append(b.desc.Fallbacks, fmt.Errorf("uringfile: no sparse file table: one file only, none added while the engine runs: %w", err))
	if b.nfiles > 1 || b.fresh > 1 || b.files[0].state.Load()&fileLive == 0 {
		return fmt.Errorf("uringfile: %d files need a sparse file table: %w", b.nfiles, err)
	}
	if err := b.u.RegisterFiles([]int32{int32(b.files[0].fd)}); err != nil {
		b.desc.Fallbacks = append(b.desc.Fallbacks, fmt.Errorf("uringfile: registered file refused, using the fd: %w", err))
	} else {
		b.fixedFile = true
		b.desc.Features = append(b.desc.Features, "fixed-file")
	}
	return nil
}

// MapArena implements backend.Backend: the arena becomes fixed buffer
// number slot (registered into the sparse table; without one, only the
// first arena is registered and later ones use plain READ/WRITE). Host
// addresses are offsets in their arena.
func (b *Backend) MapArena(slot int, a *hugepage.Arena) (uint64, error) {
	var err error
	switch {
	case b.sparse:
		err = b.u.UpdateBuffers(slot, [][]byte{a.Bytes()})
	case slot == 0:
		err = b.u.RegisterBuffers([][]byte{a.Bytes()})
	default:
		b.arenas[slot] = a.Bytes()
		return 0, nil
	}
	if err != nil {
		b.desc.Fallbacks = append(b.desc.Fallbacks, fmt.Errorf("uringfile: arena %d not registered as a fixed buffer, using plain READ/WRITE for it: %w", slot, err))
	} else {
		b.fixed[slot] = true
		if slot == 0 {
			b.desc.Features = append(b.desc.Features, "fixed-buffers")
		}
	}
	b.arenas[slot] = a.Bytes()
	return 0, nil
}

// UnmapArena implements backend.Backend: the arena's fixed-buffer slot is
// cleared (the kernel lets go of its pages once no request uses it).
func (b *Backend) UnmapArena(slot int) error {
	b.arenas[slot] = nil
	if !b.fixed[slot] || b.u == nil {
		return nil
	}
	b.fixed[slot] = false
	var err error
	if b.sparse {
		err = b.u.UpdateBuffers(slot, [][]byte{nil})
	} else {
		err = b.u.UnregisterBuffers()
	}
	if err != nil && !errors.Is(err, uring.ErrClosed) {
		return fmt.Errorf("uringfile: unregister the buffer of arena %d: %w", slot, err)
	}
	return nil
}

// Prepare implements backend.Backend: host↔file, the file live, aligned
// for O_DIRECT. The Op carries the file's slot (Aux) and generation (the
// high bits of Src, above the host offset), which Forward checks again.
func (b *Backend) Prepare(src, dst backend.Endpoint, n uint32, op *backend.Op) error {
	var host, file *backend.Endpoint
	switch {
	case src.Kind == backend.LocHost && dst.Kind == backend.LocFile:
		op.Code, host, file = opWrite, &src, &dst
	case src.Kind == backend.LocFile && dst.Kind == backend.LocHost:
		op.Code, host, file = opRead, &dst, &src
	default:
		return fmt.Errorf("uringfile: %v → %v: the file backend moves host↔file: %w", src.Kind, dst.Kind, backend.ErrBadTransfer)
	}
	slot, gen := file.File&slotMask, file.File>>slotBits
	if int(slot) >= len(b.files) {
		return fmt.Errorf("uringfile: file %#x: no slot %d (the table has %d): %w", file.File, slot, len(b.files), backend.ErrBadTransfer)
	}
	st := b.files[slot].state.Load()
	if st>>slotBits != gen || st&fileLive == 0 {
		return fmt.Errorf("uringfile: file %#x: not a file of this backend (removed, or never added): %w", file.File, backend.ErrBadTransfer)
	}
	if file.Off > 1<<62 {
		return fmt.Errorf("uringfile: file offset %d: negative or huge: %w", int64(file.Off), backend.ErrOutOfBounds)
	}
	// host.Off is the offset in a page-aligned arena: its alignment to
	// 4096 is the memory address's.
	if st&fileDirect != 0 && (host.Off%DirectAlign != 0 || n%DirectAlign != 0 || file.Off%DirectAlign != 0) {
		return fmt.Errorf("uringfile: memory at arena offset %#x, length %d and file offset %d must be multiples of %d on an O_DIRECT file: %w",
			host.Off, n, file.Off, DirectAlign, backend.ErrAlignment)
	}
	op.Path = backend.PathFile
	op.HostArena = uint16(host.Arena)
	op.Aux = uint16(slot)
	op.Src, op.Dst = host.Addr|uint64(gen)<<genShift, file.Off // host offset in its arena (and the file's generation), file offset
	return nil
}

// genShift places a file's generation in Op.Src above the host offset
// (an offset in one arena: below 2^40, MaxPoolSize).
const (
	genShift = 48
	hostMask = 1<<genShift - 1
)

// fileOK reports whether op's file is still the one Prepare accepted.
func (b *Backend) fileOK(op *backend.Op) bool {
	st := b.files[op.Aux].state.Load()
	return st>>slotBits == uint32(op.Src>>genShift) && st&fileLive != 0
}

// Execute implements backend.Backend; nothing is carried out inline.
func (b *Backend) Execute(*backend.Op) (uint32, backend.Status) { return 0, backend.StatusCanceled }

// Forward implements backend.Backend: one READ/WRITE SQE (fixed buffer and
// fixed file where registered). A transfer whose file was removed after
// Prepare becomes a NOP tagged removedTag, which Reap reports as
// errFileRemoved.
func (b *Backend) Forward(tag uint64, op *backend.Op, last bool) bool {
	sqe := b.u.GetSQE()
	if sqe == nil {
		return false
	}
	if b.queued == 0 {
		b.fwdBusy.Store(true) // before the file is read: drainTail
	}
	b.queued++
	if !b.fileOK(op) {
		sqe.PrepNop()
		sqe.SetUserData(tag | removedTag)
		return true
	}
	b.prep(sqe, tag, op)
	b.inflight[tag&b.tagMask] = inflightOp{op: op, tag: tag}
	return true
}

// removedTag marks the user data of a NOP standing in for a transfer whose
// file was removed; the engine's tags are ring positions, far below it.
const removedTag = 1 << 63

// prep fills sqe with op's READ or WRITE.
func (b *Backend) prep(sqe *uring.SQE, tag uint64, op *backend.Op) {
	slot := op.HostArena & (backend.MaxArenas - 1)
	off := op.Src & hostMask
	buf := b.arenas[slot][off : off+uint64(op.Len)]
	fd := int(op.Aux)
	if !b.fixedFile {
		fd = b.files[op.Aux].fd
	}
	fixed := b.fixed[slot]
	switch {
	case op.Code == opWrite && fixed:
		sqe.PrepWriteFixed(fd, buf, op.Dst, slot)
	case op.Code == opWrite:
		sqe.PrepWrite(fd, buf, op.Dst)
	case fixed:
		sqe.PrepReadFixed(fd, buf, op.Dst, slot)
	default:
		sqe.PrepRead(fd, buf, op.Dst)
	}
	if b.fixedFile {
		sqe.SetFlags(uring.SQEFixedFile)
	}
	sqe.SetUserData(tag)
}

// Flush implements backend.Backend: the batch in one io_uring_enter.
func (b *Backend) Flush() {
	if b.queued == 0 {
		return
	}
	before := b.u.Stats().Enters
	n, err := b.u.Submit()
	b.fwdBusy.Store(false)
	b.ctr.Syscalls += b.u.Stats().Enters - before
	b.ctr.Doorbells++
	if err != nil {
		b.log.Warn("uringfile: io_uring submit", "err", err, "submitted", n)
	}
	b.inFlight += b.queued
	b.queued = 0
}

// FlushDeferred is Flush without the system call (the engine's optional
// deferred doorbell): what Forward queued is published in the submission
// queue, and the kernel takes it at the next io_uring_enter — the engine's
// batched wait (WaitCompletions carries it), SubmitDeferred, or any Flush.
// The engine uses it only while a goroutine holds its reaping flag (a
// completion round: a waiter, Poll, the reaper), which then either waits
// in WaitCompletions or calls SubmitDeferred before it lets the flag go.
func (b *Backend) FlushDeferred() {
	if b.queued == 0 {
		return
	}
	b.u.Publish()
	b.fwdBusy.Store(false)
	b.ctr.Doorbells++
	b.inFlight += b.queued
	b.queued = 0
}

// SubmitDeferred submits what FlushDeferred published and the kernel has
// not taken yet: one io_uring_enter, none when there is nothing.
func (b *Backend) SubmitDeferred() {
	if b.u == nil || b.u.Unsubmitted() == 0 {
		return
	}
	before := b.u.Stats().Enters
	n, err := b.u.Submit()
	b.ctr.Syscalls += b.u.Stats().Enters - before
	if err != nil {
		b.log.Warn("uringfile: io_uring submit", "err", err, "submitted", n)
	}
}

// Reap implements backend.Backend: ready CQEs, no system call unless the
// kernel has deferred work, or a transfer is issued again (reissue).
func (b *Backend) Reap(out []backend.Completion) int {
	before := b.u.Stats().Enters
	n, err := b.u.PeekCQEs(b.cqes[:min(len(out), len(b.cqes))])
	if err != nil {
		b.log.Warn("uringfile: io_uring reap", "err", err)
	}
	k, again := 0, 0
	for i := range n {
		c := &b.cqes[i]
		res, ud := c.Res(), c.UserData()
		if res >= 0 && ud < removedTag {
			out[k] = backend.Completion{Tag: ud, N: uint32(res)} // short: the engine compares with Len
			k++
			continue
		}
		switch st, reissued := b.failed(ud, res); {
		case reissued:
			again++
		case ud == cancelTag:
			b.canceling = false
		default:
			out[k] = backend.Completion{Tag: ud &^ removedTag, Status: st}
			k++
		}
	}
	if again > 0 {
		// The kernel tied these to a thread that has exited; this
		// thread starts them again (an error path: no batching).
		if _, err := b.u.Submit(); err != nil {
			b.log.Warn("uringfile: io_uring submit (re-issue)", "err", err)
		}
		b.reissued.Add(uint64(again))
		b.log.Debug("uringfile: transfers canceled by the kernel at a submitting thread's exit, issued again", "n", again)
	}
	if b.reapBusy {
		b.fwdBusy.Store(false)
		b.reapBusy = false
	}
	b.ctr.Syscalls += b.u.Stats().Enters - before
	b.inFlight -= k
	return k
}

// inflightOp is what the backend remembers of a forwarded transfer: the
// engine's Op (which stays put until the transfer is reaped), its tag, and
// how often it was issued again.
type inflightOp struct {
	op    *backend.Op
	tag   uint64
	tries uint32
}

// MaxReissue bounds how often one transfer is issued again after the
// kernel canceled it at a submitting thread's exit (reissue); past that,
// its error is reported as it came.
const MaxReissue = 16

// failed is the status of a completion that is not a plain result: a
// transfer whose file was removed (errFileRemoved), or one the kernel
// ended because a thread that submitted it exited, which it queues again
// and reports as reissued — never one the backend canceled itself (Cancel).
//
// io_uring ties a request to the task that submitted it. When that thread
// exits, the kernel tears down the thread's io-wq: what its workers have
// not started is failed with ECANCELED (never run: io_wq_submit_work sees
// IO_WQ_WORK_CANCEL before it issues the request), and a buffered read
// waiting to be retried from the thread's task work (a page-cache miss)
// fails with EFAULT. A running request completes with its real result.
// Issuing either again is safe even where a first attempt did part of the
// work before it was punted (a partial non-blocking write on file systems
// with async buffered writes, a partial read): READ and WRITE here are
// positional, from and to the engine's block, which the caller leaves
// alone until the transfer completes, so doing them again leaves the file
// and the block as doing them once. docs/io_uring.md has the kernel paths.
func (b *Backend) failed(ud uint64, res int32) (st backend.Status, reissued bool) {
	st = backend.StatusErrno + backend.Status(-res)
	if ud&removedTag != 0 {
		return statusFileRemoved, false
	}
	in := &b.inflight[ud&b.tagMask]
	if in.tag != ud || in.op == nil {
		return st, false
	}
	lost := res == -int32(unix.ECANCELED) || res == -int32(unix.EFAULT) && in.op.Code == opRead
	if !lost || b.cancelled || in.tries >= MaxReissue {
		if res == -int32(unix.EBADF) && !b.fileOK(in.op) {
			return statusFileRemoved, false // the slot was cleared before the kernel took it
		}
		return st, false
	}
	b.fwdBusy.Store(true) // before the file is read: drainTail (Reap clears it)
	b.reapBusy = true
	if !b.fileOK(in.op) {
		return statusFileRemoved, false // removed before it could run again
	}
	sqe := b.u.GetSQE()
	if sqe == nil {
		return st, false
	}
	in.tries++
	b.prep(sqe, ud, in.op)
	return 0, true
}

// Reissued is how many transfers were issued again because the kernel
// canceled them at a submitting thread's exit. Safe to call at any time.
func (b *Backend) Reissued() uint64 { return b.reissued.Load() }

// geteventsArg is struct io_uring_getevents_arg (Linux 5.11; min_wait_usec
// since 6.12, a padding word before).
type geteventsArg struct {
	sigmask     uint64
	sigmaskSz   uint32
	minWaitUsec uint32
	ts          uint64
}

const (
	enterGetevents = 1 << 0    // IORING_ENTER_GETEVENTS
	enterExtArg    = 1 << 3    // IORING_ENTER_EXT_ARG
	featMinTimeout = 1 << 15   // IORING_FEAT_MIN_TIMEOUT
	maxBatchWait   = 1<<20 - 1 // µs: well within min_wait_usec's 32 bits
)

// WaitCompletions blocks until at least want completions are ready in the
// ring, or — on kernels with IORING_FEAT_MIN_TIMEOUT (6.12) — until
// minWait has passed with at least one ready, or until timeout. It lets
// the engine sleep between batches of completions (one io_uring_enter per
// batch) instead of spinning or waking per completion. The same enter
// submits what FlushDeferred published (to_submit is read from the shared
// ring; the kernel takes the SQEs under its own lock, as beside a
// concurrent Flush — and an enter that finds fewer than to_submit, because
// a concurrent one took some, returns without waiting: the engine waits
// again). It does not reap (Reap does, under the owner flag) and touches
// nothing the owner's methods write, so the engine calls it without the
// owner flag while submitters keep submitting. Without min_wait support want is taken as 1
// (a straggler must not hold the others back until the timeout). It
// returns the system calls made.
func (b *Backend) WaitCompletions(want int, minWait, timeout time.Duration) int {
	if !b.minTimeout {
		want, minWait = 1, 0
	}
	if want <= 1 {
		// Nothing to batch: no min_wait_usec. The kernel arms a timer
		// for it even then, which on this VM added ~11 µs to a lone
		// 4 KiB O_DIRECT read's Submit+Wait (p50 74 → 63 µs, ReadAt's
		// 62 µs; docs/engine.md).
		minWait = 0
	}
	b.waitTS = unix.NsecToTimespec(int64(timeout))
	b.waitArg = geteventsArg{ts: uint64(uintptr(unsafe.Pointer(&b.waitTS)))}
	if minWait > 0 {
		b.waitArg.minWaitUsec = uint32(min(int64(minWait/time.Microsecond), maxBatchWait))
	}
	// ETIME (the timeout) and EINTR are normal ends of a wait; other
	// errors show up in the next Reap or Flush.
	_, _, _ = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(b.ringFd), uintptr(b.u.PublishedShared()), uintptr(max(want, 1)),
		enterGetevents|enterExtArg, uintptr(unsafe.Pointer(&b.waitArg)), unsafe.Sizeof(b.waitArg))
	return 1
}

// Check implements backend.Backend: file I/O has no timeout of its own.
func (b *Backend) Check() {}

// Outstanding implements backend.Backend.
func (b *Backend) Outstanding() int { return b.inFlight }

// ReadyFD implements backend.Backend: the ring's fd polls readable when CQEs
// are posted.
func (b *Backend) ReadyFD() (int, bool) { return b.u.Fd(), false }

// cancelTag is the user data of the backend's own IORING_OP_ASYNC_CANCEL
// entry; the engine's tags are ring positions, far below it.
const cancelTag = ^uint64(0)

// CancelWait is how long one Cancel waits for the kernel to give back the
// requests it was asked to cancel. File I/O that already reached a device
// (or an io-wq worker blocked in the file system) cannot be taken back:
// what is still outstanding after CancelWait stays so, and the engine
// keeps its memory mapped until it completes.
const CancelWait = 500 * time.Millisecond

// Cancel implements backend.Backend: it collects what finished, asks the
// kernel to cancel every request still in flight (one
// IORING_OP_ASYNC_CANCEL with IORING_ASYNC_CANCEL_ANY|ALL: what has not
// started completes with ECANCELED, reported as backend.StatusCanceled) and
// waits at most CancelWait for the rest. It never blocks for ever: a
// request stuck in the kernel (a hung device, a frozen file system) stays
// outstanding (Outstanding > 0), and a later Cancel asks again.
func (b *Backend) Cancel(out []backend.Completion) int {
	b.cancelled = true
	n := b.collect(out)
	if b.inFlight == 0 || b.u == nil {
		return n
	}
	if !b.canceling {
		if sqe := b.u.GetSQE(); sqe != nil {
			sqe.PrepCancelAny()
			sqe.SetUserData(cancelTag)
			b.canceling = true
		}
	}
	deadline := time.Now().Add(CancelWait)
	for b.inFlight > 0 && n < len(out) {
		d := time.Until(deadline)
		if d <= 0 {
			break
		}
		before := b.u.Stats().Enters
		_, err := b.u.SubmitAndWaitTimeout(1, d)
		b.ctr.Syscalls += b.u.Stats().Enters - before
		n += b.collect(out[n:])
		switch {
		case err == nil, errors.Is(err, uring.ErrTimeout), errors.Is(err, unix.EINTR):
		case errors.Is(err, uring.ErrNotSupported):
			// No waiting with a timeout (before Linux 5.11): poll.
			if _, err := b.u.Submit(); err != nil {
				return n
			}
			time.Sleep(time.Millisecond)
		default:
			b.log.Warn("uringfile: cancel: io_uring wait", "err", err)
			return n
		}
	}
	return n
}

// collect reaps CQEs like Reap, for Cancel: its own cancel entry's
// completion is dropped, and a request the kernel canceled (ECANCELED) is
// backend.StatusCanceled.
func (b *Backend) collect(out []backend.Completion) int {
	n := 0
	for n < len(out) {
		before := b.u.Stats().Enters
		k, err := b.u.PeekCQEs(b.cqes[:min(len(out)-n, len(b.cqes))])
		b.ctr.Syscalls += b.u.Stats().Enters - before
		if err != nil || k == 0 {
			break
		}
		for i := range k {
			c := &b.cqes[i]
			res := c.Res()
			switch {
			case c.UserData() == cancelTag:
				b.canceling = false // answered: a later Cancel may ask again
				continue
			case c.UserData()&removedTag != 0:
				out[n] = backend.Completion{Tag: c.UserData() &^ removedTag, Status: statusFileRemoved}
			case res == -int32(unix.ECANCELED):
				out[n] = backend.Completion{Tag: c.UserData(), Status: backend.StatusCanceled}
			case res < 0:
				out[n] = backend.Completion{Tag: c.UserData(), Status: backend.StatusErrno + backend.Status(-res)}
			default:
				out[n] = backend.Completion{Tag: c.UserData(), N: uint32(res)}
			}
			n++
			b.inFlight--
		}
	}
	return n
}

// Close implements backend.Backend: the ring (the files stay the
// caller's). AddFile and RemoveFile fail from here on.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.u == nil {
		return nil
	}
	err := b.u.Close()
	b.u = nil
	if err != nil && !errors.Is(err, uring.ErrClosed) {
		return fmt.Errorf("uringfile: close io_uring: %w", err)
	}
	return nil
}

// Err implements backend.Backend: the file backend's errors are errnos
// (backend.StatusErrno), which the engine formats itself, and
// errFileRemoved (wrapping backend.ErrCanceled) for a transfer whose file
// was removed before the kernel took it.
func (b *Backend) Err(s backend.Status) error {
	if s == statusFileRemoved {
		return errFileRemoved
	}
	return nil
}
