package engine

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/ring"
)

// req is one staged transfer: a 64-byte entry of the staging ring, written
// by the submitter between Reserve and Commit and read by whoever drains
// the ring into the target. Plain integers only (it lives in a ring.MPSC's
// memory); Go pointers (callback, host slice) live in the slot beside it.
type req struct {
	op   uint8 // opH2D ...
	path uint8 // Path
	done uint8 // 1: already completed by the submitter (CPU path, memory, no-op)
	_    uint8
	n    uint32
	src  uint64 // IOVA, device offset, or file offset (by op)
	dst  uint64
	res  uint64 // done: the result (code<<32 | bytes)
	_    [32]byte
}

const (
	opNone = iota // a reservation made after Close began; completes silently
	opH2D
	opD2H
	opD2D
	opFileWrite
	opFileRead
	opMemCopy
)

// slot is the Go side of staging entry pos&mask, for the whole life of the
// transfer: from Reserve until its callback has run and the release
// frontier passes it.
type slot struct {
	// state is (pos+1)<<1 | done. The submitter stores it (not done) right
	// after Reserve; the reaper stores it done after the callback ran.
	// Wait and the release frontier read it. Atomic: it is the handshake
	// between submitter, reaper and waiters.
	state atomic.Uint64
	// res is the result: code<<32 | bytes. Stored before state is marked
	// done; Wait reads state, res, state again (a seqlock of atomics).
	res  atomic.Uint64
	cb   func(Result)
	user uint64
	host []byte // file target: the host bytes (for io_uring)
	_    [16]byte
}

// completion is one finished transfer as the reaper collects it.
type completion struct {
	pos uint64
	res uint64 // code<<32 | bytes
}

func packRes(code uint32, n uint32) uint64 { return uint64(code)<<32 | uint64(n) }

// target is what an engine moves data with. forward, flush, reap and check
// run only while the engine's owner flag is held (one goroutine at a time).
type target interface {
	// forward hands staged entry pos to the target without telling it;
	// false when it has no room now (or needs recovery): stop forwarding.
	forward(e *Engine, pos uint64, r *req, last bool) bool
	// flush publishes what forward queued: one doorbell or io_uring_enter.
	flush(e *Engine)
	// reap collects finished transfers into out.
	reap(e *Engine, out []completion) int
	// check handles timeouts and recovery when reap found nothing.
	check(e *Engine)
	// outstanding is how many forwarded transfers have not been reaped.
	outstanding() int
	// sleepFd is the fd that becomes readable when completions arrive
	// (device interrupt eventfd, io_uring fd), or -1.
	sleepFd() (fd int, eventfd bool)
	// cancel stops the target and collects everything still outstanding,
	// completed or not (Close, when its context ends).
	cancel(e *Engine, out []completion) int
	// close releases the target's resources.
	close(e *Engine) error
}

// Engine moves data between its pool of host memory and one target. All
// methods are safe for concurrent use.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	tag    uint64
	pool   *hugepage.Pool
	blocks *blockTable
	tgt    target
	dev    *deviceTarget // the target, by kind: validation is a direct call
	file   *fileTarget
	// arenaIOVA is the device address of the pool's arena (device target).
	arenaIOVA uint64

	// The staging ring: submitters Reserve and Commit; the owner drains.
	stage *ring.MPSC
	reqs  []req
	slots []slot
	mask  uint64
	depth int

	_ [64]byte
	// owner is held by the one goroutine that may drain the staging ring,
	// talk to the target and reap: a submitter that wins the CAS (group
	// commit), the reaper, Poll, Stats, Close. Nobody waits for it on the
	// submit path: a submitter that loses sets dirty and leaves, and the
	// holder drains again before it lets go (see kick and unlock).
	owner atomic.Uint32
	_     [60]byte
	dirty atomic.Uint32
	_     [60]byte

	// Owner-protected state.
	fwd       uint64 // next staged position to forward
	head      uint64 // release frontier: every position before it is done and released
	localDone []uint64
	ldHead    int
	ldLen     int
	torn      bool
	crowd     int    // > 0: submitters collided recently (group-commit heuristic)
	drains    uint64 // drains started by submitters (the heuristic's probe clock)
	ctr       counters

	// released mirrors head for Drain and blocked submitters (atomic: read
	// without the owner).
	released atomic.Uint64

	// Completion side.
	reaping   atomic.Uint32 // one Poll/reaper cycle at a time
	sleeping  atomic.Uint32 // the reaper is (about to be) asleep
	wakeFd    int           // eventfd that wakes the reaper
	batch     []completion  // the cycle's completions (reaper/Poll private)
	stop      atomic.Bool
	done      chan struct{} // closed when the reaper goroutine exits
	waiters   atomic.Int32
	waitMu    sync.Mutex
	waitCh    chan struct{}
	sysc      atomic.Uint64 // syscalls made by the reaper and wake-ups
	queueFull atomic.Uint64

	closing   atomic.Bool
	closeOnce sync.Once
	closedCh  chan struct{}
	closeErr  error
	fallbacks []error
}

var engineSeq atomic.Uint64

// crowdMemory is how many solo drains the group-commit heuristic remembers
// a collision between submitters for.
const crowdMemory = 16

// Open creates an engine: it maps the pool, opens the target (for the
// device target: maps the pool into the device's IOMMU, sets up a queue and
// measures the CPU-path threshold), and starts the reaper unless
// Config.Mode is ModePoll.
func Open(cfg Config) (_ *Engine, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	tag := engineSeq.Add(1) & 0xffff
	if tag == 0 {
		tag = engineSeq.Add(1) & 0xffff
	}
	e := &Engine{
		cfg: cfg, log: cfg.Logger, tag: tag, depth: cfg.QueueDepth,
		blocks:   new(blockTable),
		reqs:     make([]req, cfg.QueueDepth),
		slots:    make([]slot, cfg.QueueDepth),
		mask:     uint64(cfg.QueueDepth - 1),
		batch:    make([]completion, cfg.QueueDepth),
		wakeFd:   -1,
		waitCh:   make(chan struct{}),
		closedCh: make(chan struct{}),
		done:     make(chan struct{}),
	}
	e.localDone = make([]uint64, cfg.QueueDepth)
	var undo []func() error
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				_ = undo[i]()
			}
		}
	}()
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&e.reqs[0])), len(e.reqs)*int(unsafe.Sizeof(req{})))
	if e.stage, err = ring.NewMPSC(mem, int(unsafe.Sizeof(req{}))); err != nil {
		return nil, fmt.Errorf("engine: staging ring: %w", err)
	}
	e.pool, err = hugepage.NewPool(hugepage.PoolConfig{
		Size: cfg.PoolSize, Align: cfg.Alignment,
		Arena: hugepage.ArenaConfig{Backings: cfg.Backings, Populate: cfg.Populate, Lock: cfg.Lock},
	})
	if err != nil {
		return nil, fmt.Errorf("engine: PoolSize %d: %w", cfg.PoolSize, err)
	}
	undo = append(undo, e.pool.Close)
	for _, a := range e.pool.Arenas() {
		e.fallbacks = append(e.fallbacks, a.Fallbacks()...)
	}
	switch cfg.Target {
	case TargetDevice:
		var d *deviceTarget
		if d, err = openDevice(e); err == nil {
			e.tgt = d
		}
	case TargetFile:
		var f *fileTarget
		if f, err = openFile(e); err == nil {
			e.tgt = f
		}
	case TargetMemory:
		e.tgt = memoryTarget{}
	}
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() error { return e.tgt.close(e) })
	if e.wakeFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("engine: wake eventfd: %w", err)
	}
	undo = append(undo, func() error { return unix.Close(e.wakeFd) })
	if cfg.Mode == ModeReaper {
		ready := make(chan struct{})
		go e.reaper(ready)
		<-ready
	} else {
		close(e.done)
	}
	for _, fb := range e.fallbacks {
		e.log.Info("engine fallback", "reason", fb.Error())
	}
	return e, nil
}

// Fallbacks lists what the engine could not get and what it did instead
// (hugepage backings, io_uring features, ...), so that nothing degrades
// silently.
func (e *Engine) Fallbacks() []error { return append([]error(nil), e.fallbacks...) }

// Config returns the engine's configuration with defaults filled in (and
// CPUThreshold as measured).
func (e *Engine) Config() Config { return e.cfg }

// ---------------------------------------------------------------------
// Ownership: the group-commit protocol.
//
// Invariant: every committed staging entry is drained by some owner. A
// submitter commits, then tries the owner CAS. If it loses, it stores
// dirty=1 and tries once more. An owner clears dirty before each drain and,
// after storing owner=0, loads dirty: if it is set, it takes the owner back
// (if it can) and drains again. All of these are sequentially consistent
// atomics, so for a commit C that a drain D missed (D's Peek before C):
// clear < D < C < dirty=1; either the owner's final load sees dirty=1 and
// someone drains again after it, or the load precedes dirty=1 and then the
// submitter's second CAS comes after owner=0 and succeeds (or loses to
// another owner that will drain after taking it).
// ---------------------------------------------------------------------

// kick makes sure freshly committed entries reach the target.
func (e *Engine) kick() {
	if e.owner.CompareAndSwap(0, 1) {
		// Group commit: when other submitters were active a moment ago
		// (crowd), give the runnable ones a chance to stage their
		// transfers first, so that one doorbell carries them all. Every
		// 64th drain probes the same way, so that a crowd is noticed
		// even when the scheduler runs submitters one after another and
		// they never collide. (Plain fields: we hold the owner.)
		e.drains++
		if e.crowd > 0 || e.drains%64 == 0 {
			runtime.Gosched()
		}
		e.drainLocked()
		e.unlock()
		return
	}
	e.dirty.Store(1)
	if e.owner.CompareAndSwap(0, 1) {
		e.drainLocked()
		e.unlock()
	}
}

// lock takes the owner flag, waiting for the current holder (short: it
// drains at most one ring's worth). Not for the submit path. It leaves
// dirty alone: only a drain may clear it (see drainLocked), and unlock
// drains if it is set.
func (e *Engine) lock() {
	for i := 0; !e.owner.CompareAndSwap(0, 1); i++ {
		if i >= 8 {
			runtime.Gosched()
		}
	}
}

// unlock releases the owner flag, draining again for submitters that lost
// the CAS meanwhile.
func (e *Engine) unlock() {
	for {
		// Release: everything the owner wrote (target state, counters,
		// slots) happens before the next owner's CAS.
		e.owner.Store(0)
		if e.dirty.Load() == 0 || !e.owner.CompareAndSwap(0, 1) {
			return
		}
		e.crowd = crowdMemory // someone lost the CAS to us: a crowd
		e.drainLocked()
	}
}

// ---------------------------------------------------------------------
// The hot path, owner side.
// ---------------------------------------------------------------------

// drainLocked forwards every published staging entry to the target and
// publishes them with one doorbell (one flush), then reports the batch to
// the submit hook. Entries completed by their submitter (CPU path, memory)
// go straight to the local completion list for the reaper.
func (e *Engine) drainLocked() {
	// Clear dirty first: what was committed before this point is drained
	// below; a dirty=1 stored after it is seen by unlock (the invariant
	// above). Only a drain clears dirty.
	if e.dirty.Load() != 0 {
		e.dirty.Store(0)
	}
	if e.torn {
		return
	}
	e.advanceLocked()
	b := e.stage.Peek(e.depth)
	end := b.Start() + uint64(b.Len())
	if e.fwd == end {
		return
	}
	// The last entry for the target asks for an interrupt when it
	// completes: one per batch, which is what wakes a sleeping reaper.
	lastDev := e.fwd
	for p := e.fwd; p != end; p++ {
		if e.reqs[p&e.mask].done == 0 {
			lastDev = p
		}
	}
	var count [nPaths]uint32
	var bytes [nPaths]uint64
	local := false
	for e.fwd != end {
		pos := e.fwd
		r := &e.reqs[pos&e.mask]
		if r.done == 0 && !e.tgt.forward(e, pos, r, pos == lastDev) {
			break
		}
		if r.done != 0 {
			e.pushLocalLocked(pos)
			local = true
		}
		if r.op != opNone {
			count[r.path]++
			bytes[r.path] += uint64(r.n)
		}
		e.fwd++
	}
	e.tgt.flush(e)
	if count[0]+count[1]+count[2]+count[3] > 1 {
		e.crowd = crowdMemory
	} else if e.crowd > 0 {
		e.crowd--
	}
	for p := range count {
		if count[p] > 0 {
			e.ctr.batches++
			e.ctr.transfers[p] += uint64(count[p])
			e.ctr.bytes[p] += bytes[p]
			hookSubmitBatch(count[p], bytes[p], uint8(p))
		}
	}
	// Wake a sleeping reaper for completions only it delivers (CPU path,
	// memory), when the target refused entries (it needs recovery, which
	// the reaper runs), and when work reaches a target while the reaper
	// sleeps idle, without the timeout that notices a stalled device.
	switch {
	case local || e.fwd != end:
		e.wakeReaper(false)
	case count[PathDMA]+count[PathFile] > 0:
		e.wakeReaper(true)
	}
}

func (e *Engine) pushLocalLocked(pos uint64) {
	e.localDone[(e.ldHead+e.ldLen)%len(e.localDone)] = pos
	e.ldLen++
}

// advanceLocked moves the release frontier over every transfer whose
// callback has run, giving their staging slots back to submitters.
func (e *Engine) advanceLocked() {
	h := e.head
	for h != e.fwd {
		// Acquire: pairs with the reaper's done store, which follows the
		// callback; a submitter reusing the slot comes after our Release.
		if e.slots[h&e.mask].state.Load() != (h+1)<<1|1 {
			break
		}
		h++
	}
	if n := h - e.head; n > 0 {
		e.head = h
		// Cannot fail: these entries were peeked.
		_ = e.stage.Release(int(n))
		// After Release: a submitter that reads released = h and then
		// finds the ring full is sure that the ring's head was already h,
		// so the room it waits for needs a later advance (which notifies).
		e.released.Store(h)
	}
}

// collectLocked gathers finished transfers: those completed at submit
// time, then the target's.
func (e *Engine) collectLocked(out []completion) int {
	n := 0
	for e.ldLen > 0 && n < len(out) {
		pos := e.localDone[e.ldHead]
		e.ldHead = (e.ldHead + 1) % len(e.localDone)
		e.ldLen--
		out[n] = completion{pos: pos, res: e.reqs[pos&e.mask].res}
		n++
	}
	if n < len(out) {
		n += e.tgt.reap(e, out[n:])
	}
	return n
}

// Reaper sleep states (Engine.sleeping).
const (
	awake     = 0
	sleepBusy = 1 // asleep with a timeout: transfers are outstanding
	sleepIdle = 2 // asleep until woken: nothing was outstanding
)

// wakeReaper wakes a sleeping reaper with one eventfd write — only when it
// sleeps (idleOnly: only when it sleeps without a timeout), and only once
// per sleep: the swap to awake lets one waker through. Never on a busy
// engine, whose reaper is awake.
func (e *Engine) wakeReaper(idleOnly bool) {
	if e.cfg.Mode != ModeReaper {
		return
	}
	s := e.sleeping.Load()
	if s == awake || idleOnly && s != sleepIdle || !e.sleeping.CompareAndSwap(s, awake) {
		return
	}
	var one = [8]byte{1}
	_, _ = unix.Write(e.wakeFd, one[:])
	e.sysc.Add(1)
}

// errClosedWhile returns the error for a call on a closed engine.
func errClosedWhile(what string) error {
	return fmt.Errorf("engine: %s: %w", what, ErrClosed)
}
