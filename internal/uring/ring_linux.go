package uring

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetupFlags are io_uring_setup flags (IORING_SETUP_*).
type SetupFlags uint32

// The setup flags hcomm requests or reports.
const (
	SetupIOPoll       SetupFlags = setupIOPoll
	SetupSQPoll       SetupFlags = setupSQPoll
	SetupSQAff        SetupFlags = setupSQAff
	SetupCQSize       SetupFlags = setupCQSize
	SetupClamp        SetupFlags = setupClamp
	SetupSubmitAll    SetupFlags = setupSubmitAll
	SetupCoopTaskrun  SetupFlags = setupCoopTaskrun
	SetupTaskrunFlag  SetupFlags = setupTaskrunFlag
	SetupSingleIssuer SetupFlags = setupSingleIssuer
	SetupDeferTaskrun SetupFlags = setupDeferTaskrun
	SetupNoSQArray    SetupFlags = setupNoSQArray
)

var setupFlagNames = []struct {
	f    SetupFlags
	name string
}{
	{SetupIOPoll, "IOPOLL"}, {SetupSQPoll, "SQPOLL"}, {SetupSQAff, "SQ_AFF"}, {SetupCQSize, "CQSIZE"},
	{SetupClamp, "CLAMP"}, {setupAttachWQ, "ATTACH_WQ"}, {setupRDisabled, "R_DISABLED"},
	{SetupSubmitAll, "SUBMIT_ALL"}, {SetupCoopTaskrun, "COOP_TASKRUN"}, {SetupTaskrunFlag, "TASKRUN_FLAG"},
	{setupSQE128, "SQE128"}, {setupCQE32, "CQE32"}, {SetupSingleIssuer, "SINGLE_ISSUER"},
	{SetupDeferTaskrun, "DEFER_TASKRUN"}, {setupNoMmap, "NO_MMAP"}, {setupRegisteredFdOnly, "REGISTERED_FD_ONLY"},
	{SetupNoSQArray, "NO_SQARRAY"},
}

func (f SetupFlags) String() string {
	var parts []string
	for _, n := range setupFlagNames {
		if f&n.f != 0 {
			parts = append(parts, n.name)
			f &^= n.f
		}
	}
	if f != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(f)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Features is the io_uring features word the kernel returns (IORING_FEAT_*).
type Features uint32

// Feature bits hcomm relies on or reports.
const (
	FeatSingleMmap   Features = featSingleMmap
	FeatNodrop       Features = featNodrop
	FeatSubmitStable Features = featSubmitStable
	FeatFastPoll     Features = featFastPoll
	FeatExtArg       Features = featExtArg
	FeatNativeWorker Features = featNativeWorkers
	FeatCQESkip      Features = featCQESkip
	FeatRegRegRing   Features = featRegRegRing
)

var featureNames = []string{
	"SINGLE_MMAP", "NODROP", "SUBMIT_STABLE", "RW_CUR_POS", "CUR_PERSONALITY", "FAST_POLL",
	"POLL_32BITS", "SQPOLL_NONFIXED", "EXT_ARG", "NATIVE_WORKERS", "RSRC_TAGS", "CQE_SKIP",
	"LINKED_FILE", "REG_REG_RING",
}

func (f Features) String() string {
	var parts []string
	for bit := 0; bit < 32; bit++ {
		if f&(1<<bit) == 0 {
			continue
		}
		if bit < len(featureNames) {
			parts = append(parts, featureNames[bit])
		} else {
			parts = append(parts, fmt.Sprintf("bit%d", bit))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Config sets every io_uring_setup parameter. The zero value is a
// 256-entry ring bound to the calling goroutine's OS thread with the modern
// flags tried.
type Config struct {
	// Entries is the submission queue size (the kernel rounds it up to a
	// power of two; at most 32768). 0 means 256.
	Entries uint32
	// CQEntries, when non-zero, sets the completion queue size
	// (IORING_SETUP_CQSIZE); the kernel default is 2×Entries.
	CQEntries uint32
	// Clamp clamps too-large sizes instead of failing (IORING_SETUP_CLAMP).
	Clamp bool
	// SQPoll starts a kernel thread that polls the submission queue
	// (IORING_SETUP_SQPOLL): submission needs no system call while the
	// thread is awake. SQThreadIdle is how long it spins before sleeping
	// (0: the kernel's default, 1 s); SQThreadCPU pins it when
	// PinSQThread is set (IORING_SETUP_SQ_AFF).
	SQPoll       bool
	SQThreadIdle time.Duration
	PinSQThread  bool
	SQThreadCPU  uint32
	// Flags are extra IORING_SETUP_* flags requested as they are (no
	// fallback: EINVAL fails New).
	Flags SetupFlags
	// Unbound leaves the ring free of any OS thread: no
	// runtime.LockOSThread, and therefore none of SINGLE_ISSUER,
	// DEFER_TASKRUN or the registered ring fd, which tie a ring to one
	// thread. Any one goroutine at a time may then use it.
	Unbound bool
	// NoModernFlags skips the modern flags (COOP_TASKRUN|TASKRUN_FLAG,
	// SINGLE_ISSUER, DEFER_TASKRUN, NO_SQARRAY) and the registered ring fd.
	NoModernFlags bool
}

// Stats counts what the layer did. Every io_uring_enter the layer makes
// is counted; the layer makes no system call it does not count here, except
// setup, register and Close.
type Stats struct {
	Submissions uint64 // SQEs the kernel consumed (for SQPOLL: SQEs published)
	Completions uint64 // CQEs reaped
	Enters      uint64 // io_uring_enter calls, all kinds
	WaitEnters  uint64 // of which waiting calls (GETEVENTS with min_complete > 0)
}

// Ring is one io_uring instance: the shared submission and completion
// rings mapped into this process, plus the bookkeeping to use them without
// allocating.
//
// Threading model. By default New locks the calling goroutine to its OS
// thread (runtime.LockOSThread) and asks for SINGLE_ISSUER and
// DEFER_TASKRUN, and registers the ring fd: all three bind the ring to that
// thread, so that goroutine — the owner — must make every call, Close
// included (Close unlocks the thread). A call from another goroutine runs on
// another thread and the kernel refuses it; the layer reports ErrWrongThread.
// With Config.Unbound, none of that applies, but a Ring is still not
// safe for concurrent use: one goroutine at a time.
type Ring struct {
	fd         int
	enterFd    uintptr // registered ring index, or fd
	enterFlags uint32  // IORING_ENTER_REGISTERED_RING when the fd is registered
	flags      SetupFlags
	features   Features
	sqpoll     bool
	locked     bool // New called LockOSThread
	ownerTid   int  // the owner thread, when locked
	closed     bool

	// Submission queue. sqeTail counts SQEs handed out by GetSQE; sqeHead
	// those published to the kernel (stored in *sqTail).
	sqHead, sqTail, sqFlags, sqDropped *uint32
	sqMask, sqEntries                  uint32
	sqes                               []SQE
	sqeHead, sqeTail                   uint32
	sqHeadCache                        uint32

	// Completion queue.
	cqHead, cqTail, cqOverflow *uint32
	cqMask, cqEntries          uint32
	cqes                       []CQE

	ringMem, cqMem, sqeMem []byte
	timespecs              []kernelTimespec // one per SQE slot, for TIMEOUT and LINK_TIMEOUT
	waitTS                 kernelTimespec   // SubmitAndWaitTimeout's timeout (read by the kernel during the call)
	waitArg                geteventsArg
	probe                  Probe
	fallbacks              []error
	stats                  Stats
	buffers, files         int // registered counts
}

// The kernel's limits on ring sizes (IORING_MAX_ENTRIES, IORING_MAX_CQ_ENTRIES).
const (
	maxSQEntries = 32768
	maxCQEntries = 2 * maxSQEntries
)

// modernSteps are the flags New tries beyond what the config demands,
// each dropped — newest first — when the kernel answers EINVAL, the way
// liburing's own benchmarks probe them.
var modernSteps = []struct {
	flags SetupFlags
	why   string
}{
	{SetupNoSQArray, "NO_SQARRAY (Linux 6.6)"},
	{SetupDeferTaskrun, "DEFER_TASKRUN (Linux 6.1)"},
	{SetupSingleIssuer, "SINGLE_ISSUER (Linux 6.0)"},
	{SetupCoopTaskrun | SetupTaskrunFlag, "COOP_TASKRUN|TASKRUN_FLAG (Linux 5.19)"},
	{SetupCQSize, "CQSIZE (Linux 5.5)"},
}

// New creates an io_uring instance with cfg (see Config and the Ring
// threading model) and maps its rings. Fallbacks reports each flag the
// kernel refused; Flags and Features report what it granted. The phases:
// check the config, bind the thread, io_uring_setup with flag fallback, map
// the rings, probe the opcodes, register the ring fd.
func New(cfg Config) (u *Ring, err error) {
	entries, err := cfg.sqEntries()
	if err != nil {
		return nil, err
	}
	bound := !cfg.Unbound
	if bound {
		runtime.LockOSThread()
		defer func() {
			if err != nil {
				runtime.UnlockOSThread()
			}
		}()
	}
	want, optional := cfg.setupFlags(bound)
	s, err := setup(entries, cfg, want, optional)
	if err != nil {
		return nil, err
	}
	u = &Ring{
		fd:        s.fd,
		enterFd:   uintptr(s.fd),
		flags:     s.flags,
		features:  Features(s.params.Features),
		sqpoll:    s.flags&SetupSQPoll != 0,
		fallbacks: s.fallbacks,
	}
	defer func() {
		if err != nil {
			u.release()
		}
	}()
	if err := u.mapRings(&s.params); err != nil {
		return nil, err
	}
	if err := u.loadProbe(); err != nil {
		// An old kernel without IORING_REGISTER_PROBE: report, carry on.
		u.fallbacks = append(u.fallbacks, err)
	}
	u.locked = bound
	if bound {
		u.ownerTid = unix.Gettid()
		if !cfg.NoModernFlags {
			if err := u.registerRingFd(); err != nil {
				u.fallbacks = append(u.fallbacks, err)
			}
		}
	}
	return u, nil
}

// sqEntries checks what the kernel would refuse with an EINVAL that New
// would read as a refusal of each modern flag in turn, and returns the
// submission queue size to ask for.
func (cfg Config) sqEntries() (uint32, error) {
	entries := cfg.Entries
	if entries == 0 {
		entries = 256
	}
	switch {
	case !cfg.Clamp && (entries > maxSQEntries || cfg.CQEntries > maxCQEntries):
		return 0, fmt.Errorf("uring: config: %d entries (CQ %d): at most %d (CQ %d) without Clamp: %w",
			entries, cfg.CQEntries, maxSQEntries, maxCQEntries, ErrConfig)
	case cfg.SQThreadIdle < 0 || cfg.SQThreadIdle/time.Millisecond > 1<<32-1:
		return 0, fmt.Errorf("uring: config: SQThreadIdle %v out of range: %w", cfg.SQThreadIdle, ErrConfig)
	case (cfg.PinSQThread || cfg.SQThreadIdle != 0) && !cfg.SQPoll:
		return 0, fmt.Errorf("uring: config: PinSQThread/SQThreadIdle without SQPoll: %w", ErrConfig)
	case cfg.CQEntries != 0 && cfg.CQEntries < entries && !cfg.Clamp:
		return 0, fmt.Errorf("uring: config: CQEntries %d smaller than Entries %d: %w", cfg.CQEntries, entries, ErrConfig)
	}
	return entries, nil
}

// setupFlags returns the flags to request (want) and those of them New may
// drop when the kernel refuses them (optional): the config's own, plus the
// modern flags unless NoModernFlags. bound tells whether the ring is tied to
// the calling thread (the per-thread flags need that).
func (cfg Config) setupFlags(bound bool) (want, optional SetupFlags) {
	want = cfg.Flags
	if cfg.Clamp {
		want |= SetupClamp
	}
	if cfg.CQEntries != 0 {
		want |= SetupCQSize
		optional |= SetupCQSize
	}
	if cfg.SQPoll {
		want |= SetupSQPoll
		if cfg.PinSQThread {
			want |= SetupSQAff
		}
	}
	if cfg.NoModernFlags {
		return want, optional
	}
	modern := SetupNoSQArray
	if !cfg.SQPoll {
		// The kernel refuses the task-run flags with SQPOLL (EINVAL):
		// completions are run by the SQ thread, not by this task.
		modern |= SetupCoopTaskrun | SetupTaskrunFlag
	}
	if bound {
		modern |= SetupSingleIssuer
		if !cfg.SQPoll {
			modern |= SetupDeferTaskrun
		}
	}
	return want | modern, optional | modern
}

// setupResult is what io_uring_setup granted.
type setupResult struct {
	fd        int
	params    uringParams
	flags     SetupFlags // the flags the kernel accepted
	fallbacks []error    // each optional flag it refused, in order
}

// setup calls io_uring_setup with want and, on EINVAL, drops the newest
// optional flag still requested (modernSteps order) and retries.
func setup(entries uint32, cfg Config, want, optional SetupFlags) (setupResult, error) {
	var fallbacks []error
	for step := 0; ; {
		p := uringParams{
			Flags:          uint32(want),
			Sq_thread_cpu:  cfg.SQThreadCPU,
			Sq_thread_idle: uint32(cfg.SQThreadIdle / time.Millisecond),
			Cq_entries:     cfg.CQEntries,
		}
		r, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
		if errno == 0 {
			return setupResult{fd: int(r), params: p, flags: want, fallbacks: fallbacks}, nil
		}
		if errno != unix.EINVAL {
			return setupResult{}, fmt.Errorf("uring: io_uring_setup(%d entries, flags %v): %w", entries, want, errno)
		}
		for step < len(modernSteps) && want&optional&modernSteps[step].flags == 0 {
			step++
		}
		if step == len(modernSteps) {
			return setupResult{}, fmt.Errorf("uring: io_uring_setup(%d entries, flags %v; refused with more flags too: %w): %w",
				entries, want, errors.Join(fallbacks...), errno)
		}
		drop := modernSteps[step].flags & optional
		fallbacks = append(fallbacks, fmt.Errorf("uring: io_uring_setup refused %s with flags %v: %w", modernSteps[step].why, want, errno))
		want &^= drop
		if drop&SetupSingleIssuer != 0 {
			want &^= SetupDeferTaskrun // DEFER_TASKRUN requires SINGLE_ISSUER
		}
		step++
	}
}

// mapRings maps the SQ and CQ rings (one mapping when the kernel offers
// IORING_FEAT_SINGLE_MMAP) and the SQE array, and locates the shared fields.
func (u *Ring) mapRings(p *uringParams) error {
	sqSize := 0
	if u.flags&SetupNoSQArray == 0 {
		sqSize = int(p.Sq_off.Array) + int(p.Sq_entries)*4
	} else {
		sqSize = int(p.Sq_off.Flags) + 4
	}
	cqSize := int(p.Cq_off.Cqes) + int(p.Cq_entries)*sizeofCQE
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	var err error
	if u.features&FeatSingleMmap != 0 {
		size := max(sqSize, cqSize)
		if u.ringMem, err = unix.Mmap(u.fd, offSQRing, size, prot, flags); err != nil {
			return fmt.Errorf("uring: mmap io_uring rings (%d bytes): %w", size, err)
		}
		u.cqMem = u.ringMem
	} else {
		if u.ringMem, err = unix.Mmap(u.fd, offSQRing, sqSize, prot, flags); err != nil {
			return fmt.Errorf("uring: mmap io_uring SQ ring (%d bytes): %w", sqSize, err)
		}
		if u.cqMem, err = unix.Mmap(u.fd, offCQRing, cqSize, prot, flags); err != nil {
			return fmt.Errorf("uring: mmap io_uring CQ ring (%d bytes): %w", cqSize, err)
		}
	}
	sqeBytes := int(p.Sq_entries) * sizeofSQE
	if u.sqeMem, err = unix.Mmap(u.fd, offSQEs, sqeBytes, prot, flags); err != nil {
		return fmt.Errorf("uring: mmap io_uring SQEs (%d bytes): %w", sqeBytes, err)
	}

	at := func(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	u.sqHead = at(u.ringMem, p.Sq_off.Head)
	u.sqTail = at(u.ringMem, p.Sq_off.Tail)
	u.sqFlags = at(u.ringMem, p.Sq_off.Flags)
	u.sqDropped = at(u.ringMem, p.Sq_off.Dropped)
	u.sqMask = *at(u.ringMem, p.Sq_off.Mask)
	u.sqEntries = p.Sq_entries
	u.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&u.sqeMem[0])), p.Sq_entries)
	if u.flags&SetupNoSQArray == 0 {
		// The indirection array maps ring slots to SQE indexes; hcomm
		// keeps it the identity, written once here (as liburing does).
		array := unsafe.Slice(at(u.ringMem, p.Sq_off.Array), p.Sq_entries)
		for i := range array {
			array[i] = uint32(i)
		}
	}
	u.cqHead = at(u.cqMem, p.Cq_off.Head)
	u.cqTail = at(u.cqMem, p.Cq_off.Tail)
	u.cqOverflow = at(u.cqMem, p.Cq_off.Overflow)
	u.cqMask = *at(u.cqMem, p.Cq_off.Mask)
	u.cqEntries = p.Cq_entries
	u.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&u.cqMem[p.Cq_off.Cqes])), p.Cq_entries)
	u.timespecs = make([]kernelTimespec, p.Sq_entries)
	return nil
}

// Fd is the ring's file descriptor.
func (u *Ring) Fd() int { return u.fd }

// Flags are the setup flags the kernel accepted.
func (u *Ring) Flags() SetupFlags { return u.flags }

// Features is the features word the kernel returned.
func (u *Ring) Features() Features { return u.features }

// Probe is the set of opcodes the kernel supports (IORING_REGISTER_PROBE).
func (u *Ring) Probe() Probe { return u.probe }

// RingFdRegistered reports whether enters go through a registered ring fd
// (IORING_REGISTER_RING_FDS), which saves the fd lookup on every enter.
func (u *Ring) RingFdRegistered() bool { return u.enterFlags&enterRegisteredRing != 0 }

// SQEntries and CQEntries are the queue sizes the kernel granted.
func (u *Ring) SQEntries() int { return int(u.sqEntries) }

// CQEntries is the completion queue size the kernel granted.
func (u *Ring) CQEntries() int { return int(u.cqEntries) }

// Fallbacks lists, in order, each flag or registration the kernel refused
// and why: New never falls back silently.
func (u *Ring) Fallbacks() []error { return append([]error(nil), u.fallbacks...) }

// Stats returns the counters (see Stats).
func (u *Ring) Stats() Stats { return u.stats }

// Dropped is the kernel's count of invalid SQEs it dropped (0 once closed).
func (u *Ring) Dropped() uint32 {
	if u.closed {
		return 0
	}
	return atomic.LoadUint32(u.sqDropped)
}

// Close unregisters the ring fd, unmaps the rings, closes the ring and, for
// a thread-bound ring, unlocks the owner goroutine from its thread. It must
// be called by the owner goroutine (ErrWrongThread otherwise, and the
// kernel keeps the ring until the owner thread exits). Idempotent.
func (u *Ring) Close() error {
	if u.closed {
		return nil
	}
	var errs []error
	if u.enterFlags&enterRegisteredRing != 0 {
		// The registered ring fd lives in the owner thread's io_uring
		// context and holds a reference on the ring: without this the ring
		// would outlive Close.
		upd := rsrcUpdate{Offset: uint32(u.enterFd)}
		if _, err := u.register(unregisterRingFds, unsafe.Pointer(&upd), 1); err != nil {
			errs = append(errs, fmt.Errorf("uring: unregister ring fd %d: %w", u.enterFd, u.threadErr(err)))
		}
		u.enterFlags &^= enterRegisteredRing
	}
	errs = append(errs, u.release())
	if u.locked {
		u.locked = false
		runtime.UnlockOSThread()
	}
	return errors.Join(errs...)
}

// release unmaps and closes whatever exists; used by Close and failed setup.
func (u *Ring) release() error {
	var errs []error
	u.closed = true
	if len(u.cqMem) > 0 && len(u.ringMem) > 0 && &u.cqMem[0] == &u.ringMem[0] {
		u.cqMem = nil // single mmap: unmapped with ringMem
	}
	for _, m := range []*[]byte{&u.sqeMem, &u.cqMem, &u.ringMem} {
		if *m == nil {
			continue
		}
		if err := unix.Munmap(*m); err != nil {
			errs = append(errs, fmt.Errorf("uring: munmap io_uring memory: %w", err))
		}
		*m = nil
	}
	u.sqes, u.cqes = nil, nil
	if u.fd >= 0 {
		if err := unix.Close(u.fd); err != nil {
			errs = append(errs, fmt.Errorf("uring: close io_uring fd %d: %w", u.fd, err))
		}
		u.fd = -1
	}
	return errors.Join(errs...)
}

// threadErr turns the kernel's answer to a call from the wrong thread
// (EEXIST for SINGLE_ISSUER; EINVAL or EBADF for a registered ring fd, which
// exists only in the owner thread) into ErrWrongThread. Only on this error
// path does it compare the calling thread with the owner (one gettid).
func (u *Ring) threadErr(err error) error {
	if err == nil || !u.locked {
		return err
	}
	if tid := unix.Gettid(); tid != u.ownerTid {
		return fmt.Errorf("%w: called on thread %d, owner goroutine is locked to thread %d: %w",
			ErrWrongThread, tid, u.ownerTid, err)
	}
	return err
}
