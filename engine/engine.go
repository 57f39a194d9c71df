package engine

import (
	"fmt"
	"log/slog"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/atomicrel"
	"github.com/hcomm-go/hcomm/ring"
)

// Staged entries (entry.done): forwarded to the backend, completed by the
// submitter (Inline), or a no-op.
const (
	opForward = 0
	opDone    = 1 // completed at submit time: entry.res holds the result
	opNoop    = 2 // a reservation made after Close began, or the rest of a refused batch
)

// slot is the Go side of staging entry pos&mask, for the whole life of the
// transfer: from Reserve until its callback has run and the release
// frontier passes it.
type slot struct {
	// state is (pos+1)<<1 | done (| stateFailed) of the last transfer
	// that completed in the slot: the reaper stores it after the callback
	// ran. A transfer in flight is not in it: the slot still shows its
	// previous occupant, and lookup tells an issued ID from an unknown one
	// by the staging ring's reservations. Wait and the release frontier
	// read it. Atomic: the handshake between reaper and waiters; complete
	// stores it with release ordering only (see there).
	state atomicrel.Uint64
	// res is the result of a failed transfer: status<<32 | bytes. Stored
	// before state is marked done and failed; Wait reads state, res, state
	// again (a seqlock of atomics).
	res  atomic.Uint64
	cb   func(Result)
	user uint64
	reg  uint16 // registered regions the transfer uses (register.go)
	_    [30]byte
}

func packRes(s backend.Status, n uint32) uint64 { return uint64(s)<<32 | uint64(n) }

// stateFailed marks a done slot state whose transfer failed: only then
// does slot.res hold its result (a successful transfer's is backend.StatusOK).
const stateFailed = 1 << 63

// doneState is slot pos's done state for a transfer that ended with st.
func doneState(pos uint64, st backend.Status) uint64 {
	s := (pos+1)<<1 | 1
	if st != backend.StatusOK {
		s |= stateFailed
	}
	return s
}

func resOf(c backend.Completion) uint64 { return packRes(c.Status, c.N) }

// Engine moves data between its pool of host memory and its backends (up
// to MaxBackends: devices, files, peers). All methods are safe for
// concurrent use.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	tag    uint64
	pool   *hugepage.Pool
	blocks *blockTable
	// The backends (members.go): slots of MaxBackends, nil when free.
	// Submitters load them (routing); AddBackend and RemoveBackend store
	// them under memberMu, the arena table's lock and the owner flag.
	members   [MaxBackends]atomic.Pointer[member]
	memberGen [MaxBackends]uint16 // under memberMu
	memberMu  sync.Mutex
	route     atomic.Uint64          // per LocKind, the backend of Locs that name none (updateRoutes)
	single    atomic.Pointer[member] // the only backend, when there is one (updateRoutes)
	retired   []memberTotals         // removed backends' counts (owner)
	// first is the first backend Open was given: Backend(), IOVA, and
	// the single-backend policies (batched waits, the deferred doorbell).
	first   *member
	arenas  arenaTable
	reg     registry         // caller memory (Register)
	backing hugepage.Backing // the first arena's

	// The staging ring: submitters Reserve and Commit; the owner drains.
	stage *ring.MPSC
	ents  []entry
	slots []slot
	mask  uint64
	depth int

	_ [64]byte
	// owner is held by the one goroutine that may drain the staging ring,
	// talk to the backend and reap: a submitter that wins the CAS (group
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
	probe     uint64 // drains between probes: 64, doubled after each probe that found nobody
	own       int    // entries the kicking submitter committed itself (kick sets it for its drain)
	intr      bool   // ask the backend for an interrupt per batch (ModeReaper: someone may sleep)
	ctr       counters

	// released mirrors head for Drain and blocked submitters (atomic: read
	// without the owner).
	released atomic.Uint64

	// backend.Completion side.
	reaping  atomicrel.Uint32 // one Poll/reaper cycle at a time
	sleeping atomic.Uint32    // the reaper is (about to be) asleep
	// readyFD: every backend has a ReadyFD and the reaper's sleep watches
	// them all; sleepStale: the backends changed and the reaper rebuilds
	// its sleep (members.go).
	readyFD    atomic.Bool
	sleepStale atomic.Bool
	bw         backend.BatchWaiter // the first backend, when it can be waited on in batches (reap.go)
	// waiterCycles counts completion cycles run by others than the reaper
	// (waiters, Poll); inReaper is true while the reaper runs one (both
	// written under the reaping flag; reap.go).
	waiterCycles atomic.Uint64
	inReaper     bool
	// reapingWaiters counts goroutines in waitFor that reap for themselves
	// (not parked), in reaper mode: while there are any, a reaper that
	// would spin stands back instead of taking completions from them.
	reapingWaiters atomic.Int32
	lazyWake       chan struct{}        // wakes a reaper in sleepLazy (Close)
	wakeFd         int                  // eventfd that wakes the reaper
	batch          []backend.Completion // the cycle's completions (reaper/Poll private)
	// A callback panicked: the rest of its batch, delivered first by the
	// next cycle (reaper/Poll private, as batch). pendBuf is its array.
	pend, pendBuf []backend.Completion
	cbAt          int           // the index in the batch complete is at
	cycling       bool          // complete runs inside cycle (reaping flag held)
	inCallback    atomic.Bool   // complete is running callbacks
	cbSeq         atomic.Uint64 // callbacks started
	stop          atomic.Bool
	done          chan struct{} // closed when the reaper goroutine exits
	waiters       atomic.Int32
	waitMu        sync.Mutex
	waitCh        chan struct{}
	sysc          atomic.Uint64 // syscalls made by the reaper and wake-ups
	queueFull     atomic.Uint64

	closing   atomic.Bool
	closeOnce sync.Once
	closedCh  chan struct{} // closed when Shutdown has released everything
	stuckCh   chan struct{} // closed when Shutdown returned before that (see Shutdown)
	stuckErr  error         // what that Shutdown returned (written before stuckCh closes)
	closeErr  error
	tornEnd   uint64      // the end of the real transfers at Close (owner)
	unmapped  atomic.Bool // the pool is unmapped: Block.Bytes returns nil
	cbPanic   any         // the first panic of a callback Shutdown ran
	fallbacks []error     // under fbMu
	fbMu      sync.Mutex

	// The deferred doorbell (reap.go), at the end: the fields above keep
	// the cache-line layout the device path's latency was measured with.
	// (Put between the completion side's atomics, a sync 4 KiB
	// host→device Submit+Wait measured p50 1.08 and 1.14 µs in two runs;
	// here 0.33–0.70 µs, as before these fields existed: 0.33–0.71.)
	_    [64]byte
	lazy backend.LazyDoorbell // the backend, when its doorbell can be deferred
	// inRound: the holder of the reaping flag is in a completion round
	// whose doorbells are deferred (lazy); it starts what was deferred
	// before it lets the flag go (releaseReaping) or carries it in a
	// batched wait (waitBatch). lazyPending: a doorbell was deferred since
	// (a hint for the holder: wait now, carrying it).
	inRound     atomic.Bool
	lazyPending atomic.Bool
	yieldAt     time.Time // last yield of Poll or waitBatch (under the reaping flag)
	polls       uint64    // Polls that held the reaping flag (under it)
}

var engineSeq atomic.Uint64

// crowdMemory is how many solo drains the group-commit heuristic remembers
// a collision between submitters for.
const crowdMemory = 16

// probeMin and probeMax bound the group-commit heuristic's probe interval
// (drains; see kick).
const (
	probeMin = 64
	probeMax = 4096
)

// Open creates an engine over its backends (Config.Backend and
// Config.Backends): it attaches each, maps the pool and maps it into every
// backend once (DMA-map, register), and starts the reaper unless
// Config.Mode is ModePoll. Open takes ownership of the backends: when it
// fails, they are closed too.
func Open(cfg Config) (_ *Engine, err error) {
	bes := cfg.backends()
	if cfg, err = cfg.withDefaults(); err != nil {
		for _, be := range bes {
			if be != nil {
				_ = be.Close()
			}
		}
		return nil, err
	}
	e := newEngine(cfg)
	var undo []func() error
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				_ = undo[i]()
			}
		}
	}()
	for _, be := range bes {
		undo = append(undo, be.Close)
	}
	if err = e.attach(bes); err != nil {
		return nil, err
	}
	if err = e.openPool(); err != nil {
		return nil, err
	}
	undo = append(undo, e.pool.Close, e.unmapArenas)
	if e.wakeFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("engine: wake eventfd: %w", err)
	}
	undo = append(undo, func() error { return unix.Close(e.wakeFd) })
	e.startCompletions()
	for _, fb := range e.Fallbacks() {
		e.log.Info("engine fallback", "reason", fb.Error())
	}
	return e, nil
}

// newEngine allocates an engine's staging ring and bookkeeping.
func newEngine(cfg Config) *Engine {
	tag := engineSeq.Add(1) & 0xffff
	if tag == 0 {
		tag = engineSeq.Add(1) & 0xffff
	}
	e := &Engine{
		cfg: cfg, log: cfg.Logger, tag: tag, depth: cfg.QueueDepth,
		blocks:    new(blockTable),
		ents:      make([]entry, cfg.QueueDepth),
		slots:     make([]slot, cfg.QueueDepth),
		mask:      uint64(cfg.QueueDepth - 1),
		batch:     make([]backend.Completion, cfg.QueueDepth),
		pendBuf:   make([]backend.Completion, 0, cfg.QueueDepth),
		localDone: make([]uint64, cfg.QueueDepth),
		probe:     probeMin,
		intr:      cfg.Mode == ModeReaper,
		wakeFd:    -1,
		waitCh:    make(chan struct{}),
		lazyWake:  make(chan struct{}, 1),
		closedCh:  make(chan struct{}),
		stuckCh:   make(chan struct{}),
		done:      make(chan struct{}),
	}
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&e.ents[0])), len(e.ents)*int(unsafe.Sizeof(entry{})))
	// Cannot fail: QueueDepth is a validated power of two and an entry is 64 bytes.
	e.stage, _ = ring.NewMPSC(mem, int(unsafe.Sizeof(entry{})))
	return e
}

// attach attaches the backends Open was given (their members are
// published only once every one attached; arenas are mapped after).
func (e *Engine) attach(bes []backend.Backend) error {
	e.memberMu.Lock()
	defer e.memberMu.Unlock()
	for i, be := range bes {
		m, err := e.attachMember(be, i)
		if err != nil {
			return err
		}
		e.members[i].Store(m)
		e.addFallback(m.desc.Fallbacks...)
	}
	e.first = e.members[0].Load()
	e.updateRoutes()
	return nil
}

// openPool maps the pool's first arena and maps it into the backend; the
// pool maps every arena it grows by through the same hook before handing
// out its first block, and unmaps idle ones through the other.
func (e *Engine) openPool() (err error) {
	pc := hugepage.PoolConfig{
		Size: e.cfg.PoolSize, Align: e.cfg.Alignment,
		Arena: hugepage.ArenaConfig{Backings: e.cfg.Backings, Populate: e.cfg.Populate, Lock: e.cfg.Lock},
	}
	if e.cfg.PoolMax > e.cfg.PoolSize {
		pc.MaxSize = e.cfg.PoolMax
		pc.OnGrow = e.mapArena
		pc.OnRelease = e.unmapArena
		if e.cfg.PoolIdle > 0 {
			pc.IdleRelease = e.cfg.PoolIdle
		}
	}
	if e.pool, err = hugepage.NewPool(pc); err != nil {
		return fmt.Errorf("engine: PoolSize %d: %w", e.cfg.PoolSize, err)
	}
	first := e.pool.Arenas()[0]
	e.backing = first.Backing()
	e.addFallback(first.Fallbacks()...)
	if err = e.mapArena(first); err != nil {
		_ = e.pool.Close()
		return err
	}
	return nil
}

// Fallbacks lists what the engine and its backend could not get and what
// they did instead (hugepage backings, io_uring features, ...), so that
// nothing degrades silently.
func (e *Engine) Fallbacks() []error {
	e.fbMu.Lock()
	defer e.fbMu.Unlock()
	return append([]error(nil), e.fallbacks...)
}

func (e *Engine) addFallback(errs ...error) {
	e.fbMu.Lock()
	e.fallbacks = append(e.fallbacks, errs...)
	e.fbMu.Unlock()
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Backend describes the engine's first backend (name, limits, features);
// Targets lists them all.
func (e *Engine) Backend() backend.Description { return e.first.desc }

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

// kick makes sure freshly committed entries reach the backend; own is how
// many entries the caller committed.
func (e *Engine) kick(own int) {
	// In a completion round (a callback submitting, or a submitter beside
	// a reaping waiter) the round's holder drains what is staged — once,
	// before it waits or leaves (roundDrain, releaseReaping) — so the
	// round's submissions are one batch and one doorbell, carried by its
	// wait. dirty tells the holder; if the round ended meanwhile, the
	// protocol below drains (the holder clears inRound before its last
	// look at dirty: one of the two sees the other).
	if e.lazy != nil && e.inRound.Load() {
		e.dirty.Store(1)
		if e.inRound.Load() {
			return
		}
	}
	if e.owner.CompareAndSwap(0, 1) {
		// Group commit: when other submitters were active a moment ago
		// (crowd), give the runnable ones a chance to stage their
		// transfers first, so that one doorbell carries them all. Now and
		// then a drain probes the same way, so that a crowd is noticed
		// even when the scheduler runs submitters one after another and
		// they never collide: every 64th drain, backing off (doubling up
		// to every 4096th) while probes find nobody — a yield wakes an
		// idle P's thread (futex wake and sleep, microseconds), which a
		// lone submitter would pay for nothing. (Plain fields: we hold
		// the owner.)
		e.drains++
		probing := e.crowd == 0 && e.drains >= e.probe
		if e.crowd > 0 || probing {
			runtime.Gosched()
		}
		e.own = own
		e.drainLocked()
		e.own = 0
		if probing {
			e.drains = 0
			if e.crowd == 0 && e.probe < probeMax {
				e.probe *= 2
			}
		}
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
		// Release: everything the owner wrote (backend state, counters,
		// slots) happens before the next owner's CAS.
		e.owner.Store(0)
		if e.dirty.Load() == 0 || !e.owner.CompareAndSwap(0, 1) {
			return
		}
		e.crowd = crowdMemory // someone lost the CAS to us: a crowd
		e.probe = probeMin
		e.drainLocked()
	}
}

// ---------------------------------------------------------------------
// The hot path, owner side.
// ---------------------------------------------------------------------

// drainLocked forwards every published staging entry to the backend and
// publishes them with one doorbell (one Flush), then reports the batch to
// the submit hook. Entries completed by their submitter (Inline, no-ops) go
// straight to the local completion list for the reaper.
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
	// The last entry for each backend asks for an interrupt when it
	// completes: one per batch, which is what wakes a sleeping reaper
	// (or a waiter). In ModePoll nobody sleeps on the backend's signal:
	// no interrupt (one eventfd write per batch saved).
	var lastFwd [MaxBackends]uint64
	if e.intr {
		lastFwd = noLastFwd
		for p := e.fwd; p != end; p++ {
			if ent := &e.ents[p&e.mask]; ent.done == opForward {
				lastFwd[ent.be&(MaxBackends-1)] = p
			}
		}
	}
	var count [backend.NumPaths]uint32
	var bytes [backend.NumPaths]uint64
	local, touched := false, uint32(0) // touched: bit i, backend i was forwarded to
	for e.fwd != end {
		pos := e.fwd
		ent := &e.ents[pos&e.mask]
		op := &ent.op
		done, path, n := ent.done, op.Path&(backend.NumPaths-1), op.Len
		if done == opNoop {
			e.pushLocalLocked(pos)
			local = true
			e.fwd++
			continue
		}
		i := ent.be & (MaxBackends - 1)
		m := e.members[i].Load()
		switch {
		case m == nil:
			// Its backend was removed (RemoveBackend canceled what it
			// held; this one was staged before and reached it after).
			ent.done, ent.res = opDone, packRes(backend.StatusCanceled, 0)
			e.pushLocalLocked(pos)
			local = true
		case done == opForward:
			if !m.be.Forward(pos, op, pos == lastFwd[i]) {
				goto refused // no room now: the rest waits for a later drain
			}
			touched |= 1 << i
		default:
			e.pushLocalLocked(pos)
			local = true
		}
		if m != nil {
			m.transfers++
			m.bytes += uint64(n)
		}
		count[path]++
		bytes[path] += uint64(n)
		e.fwd++
	}
refused:
	// One doorbell per backend touched. In a completion round (a callback
	// submitting, or a submitter beside a waiter that reaps) the first
	// backend's doorbell waits for the round's holder when it can be
	// deferred: its batched wait carries it, or it rings it when it lets
	// the reaping flag go (releaseReaping).
	for t := touched; t != 0; t &= t - 1 {
		m := e.members[bits.TrailingZeros32(t)].Load()
		if m == e.first && e.lazy != nil && e.inRound.Load() {
			e.lazy.FlushDeferred()
			e.lazyPending.Store(true)
		} else {
			m.be.Flush()
		}
	}
	total := uint32(0)
	for p := range count {
		total += count[p]
		if count[p] > 0 {
			e.ctr.batches++
			e.ctr.transfers[p] += uint64(count[p])
			e.ctr.bytes[p] += bytes[p]
			hookSubmitBatch(count[p], bytes[p], uint8(p))
		}
	}
	// A crowd: this drain carried transfers of others (beyond what the
	// kicking submitter committed itself: one SubmitBatch is no crowd).
	if total > uint32(max(e.own, 1)) {
		e.crowd = crowdMemory
		e.probe = probeMin
	} else if e.crowd > 0 {
		e.crowd--
	}
	// Wake a sleeping reaper for completions only it delivers (Inline,
	// no-ops), when the backend refused entries (it may need recovery,
	// which the reaper runs), and when work reaches the backend while the
	// reaper sleeps idle, without the timeout that notices a stall.
	switch {
	case local || e.fwd != end:
		e.wakeReaper(false)
	case touched != 0:
		e.wakeReaper(true)
	}
}

// noLastFwd is drainLocked's "no entry asks for an interrupt", per backend.
var noLastFwd = [MaxBackends]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}

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
		if e.slots[h&e.mask].state.Load()&^stateFailed != (h+1)<<1|1 {
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
// time, then the backend's.
func (e *Engine) collectLocked(out []backend.Completion) int {
	n := 0
	for e.ldLen > 0 && n < len(out) {
		pos := e.localDone[e.ldHead]
		e.ldHead = (e.ldHead + 1) % len(e.localDone)
		e.ldLen--
		res := e.ents[pos&e.mask].res
		out[n] = backend.Completion{Tag: pos, N: uint32(res), Status: backend.Status(res >> 32)}
		n++
	}
	for i := range e.members {
		if n >= len(out) {
			break
		}
		if m := e.members[i].Load(); m != nil {
			n += m.be.Reap(out[n:])
		}
	}
	return n
}

// Reaper sleep states (Engine.sleeping).
const (
	awake     = 0
	sleepBusy = 1 // asleep with a timeout: transfers are outstanding
	// asleep with a timeout, not watching the backend's completion fd: a
	// waiter was reaping (waitFor wakes the reaper when it leaves)
	sleepBlind = 3
	sleepIdle  = 2 // asleep until woken: nothing was outstanding
)

// wakeReaper wakes a sleeping reaper with one eventfd write — only when it
// sleeps (idleOnly: only when it sleeps without a timeout), and only once
// per sleep: the swap to awake lets one waker through. Never on a busy
// engine, whose reaper is awake.
//
// idleOnly wake-ups (work forwarded to the backend while the reaper sleeps
// idle) are skipped when the backend has a ReadyFD: its signal wakes the
// reaper when that work completes, and the idle sleep's timeout bounds how
// late a stall is noticed; a wake-up per synchronous submission would cost
// a system call and a thread hand-off each time. (A reaper asleep without
// watching that signal, sleepBlind, is woken by the waiter that made it
// so, when it leaves with work pending; waking it per submission instead
// tripled the CPU per I/O of a file workload.)
func (e *Engine) wakeReaper(idleOnly bool) {
	if e.cfg.Mode != ModeReaper {
		return
	}
	s := e.sleeping.Load()
	// A reaper in sleepLazy reads no eventfd: it wakes on its timer (and
	// a waiter's cycles collect what it would), so a write would only be
	// a system call in the submitter's path.
	if s == awake || s == sleepLazy || idleOnly && (s != sleepIdle || e.readyFD.Load()) || !e.sleeping.CompareAndSwap(s, awake) {
		return
	}
	var one = [8]byte{1}
	_, _ = unix.Write(e.wakeFd, one[:])
	e.sysc.Add(1)
}

// startCompletions starts the reaper (ModeReaper); in ModePoll the
// application's Poll calls do its work.
func (e *Engine) startCompletions() {
	// Waiters wait in a batch-waited backend in both modes (waitFor).
	// The first backend's batched waits and deferred doorbell (reap.go):
	// the other backends' doorbells ring at once, and a goroutine waits in
	// the first backend only while the others have nothing outstanding.
	be := e.first.be
	e.bw, _ = be.(backend.BatchWaiter)
	if c, ok := be.(backend.BatchWaitChooser); ok && !c.BatchWaits() {
		e.bw = nil
	}
	if e.bw != nil {
		e.lazy, _ = be.(backend.LazyDoorbell)
	}
	if e.cfg.Mode != ModeReaper {
		close(e.done)
		return
	}
	ready := make(chan struct{})
	go e.reaper(ready)
	<-ready
}

// errClosedWhile returns the error for a call on a closed engine.
func errClosedWhile(what string) error {
	return fmt.Errorf("engine: %s: %w", what, ErrClosed)
}
