package engine

import (
	"fmt"
	"log/slog"
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
	memberSet atomic.Uint32       // bit i: members[i] is not nil (setMember)
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
	nextForward       uint64 // next staged position to forward
	head              uint64 // release frontier: every position before it is done and released
	localDone         []uint64
	ldHead            int
	ldLen             int
	tornDown          bool
	crowdLeft         int    // > 0: submitters collided recently (group-commit heuristic)
	drainsSinceProbe  uint64 // drains started by submitters (the heuristic's probe clock)
	probeEvery        uint64 // drains between probes: 64, doubled after each probe that found nobody
	ownEntries        int    // entries the kicking submitter committed itself (kick sets it for its drain)
	interruptPerBatch bool   // ask the backend for an interrupt per batch (ModeReaper: someone may sleep)
	finishAtDrain     bool   // the drain completes quiet Inline transfers itself (ModeReaper; finishInline)
	totals            counters

	// released mirrors head for Drain and blocked submitters (atomic: read
	// without the owner).
	released atomicrel.Uint64

	// backend.Completion side.
	reaping  atomicrel.Uint32 // one Poll/reaper cycle at a time
	sleeping atomic.Uint32    // the reaper is (about to be) asleep
	// readyFD: every backend has a ReadyFD and the reaper's sleep watches
	// them all; sleepStale: the backends changed and the reaper rebuilds
	// its sleep (members.go).
	readyFD     atomic.Bool
	sleepStale  atomic.Bool
	batchWaiter backend.BatchWaiter // the first backend, when it can be waited on in batches (reap.go)
	// waiterCycles counts completion cycles run by others than the reaper
	// (waiters, Poll); inReaper is true while the reaper runs one (both
	// written under the reaping flag; reap.go).
	waiterCycles atomic.Uint64
	inReaper     bool
	// reapingWaiters counts goroutines in waitFor that reap for themselves
	// (not parked), in reaper mode: while there are any, a reaper that
	// would spin stands back instead of taking completions from them.
	reapingWaiters atomic.Int32
	lazyWake       chan struct{} // wakes a reaper in sleepLazy (wakeLazy)
	// tickOverride and lazyOverride, when positive, replace tick and
	// lazyMin (tests: a sleep that ends only at its timeout then shows as
	// a hang, not as a delay).
	tickOverride, lazyOverride atomic.Int64
	wakeFd                     int                  // eventfd that wakes the reaper
	batch                      []backend.Completion // the cycle's completions (reaper/Poll private)
	// A callback panicked: the rest of its batch, delivered first by the
	// next cycle (reaper/Poll private, as batch). pendBuf is its array.
	pend, pendBuf  []backend.Completion
	cbAt           int           // the index in the batch complete is at
	cycling        bool          // complete runs inside cycle (reaping flag held)
	inCallback     atomic.Bool   // complete is running callbacks
	cbSeq          atomic.Uint64 // callbacks started
	stop           atomic.Bool
	done           chan struct{} // closed when the reaper goroutine exits
	waiters        atomic.Int32
	waitMu         sync.Mutex
	waitCh         chan struct{}
	engineSyscalls atomic.Uint64 // syscalls made by the reaper and wake-ups
	queueFull      atomic.Uint64

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
	_          [64]byte
	deferrable backend.LazyDoorbell // the backend, when its doorbell can be deferred
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
		blocks:            new(blockTable),
		ents:              make([]entry, cfg.QueueDepth),
		slots:             make([]slot, cfg.QueueDepth),
		mask:              uint64(cfg.QueueDepth - 1),
		batch:             make([]backend.Completion, cfg.QueueDepth),
		pendBuf:           make([]backend.Completion, 0, cfg.QueueDepth),
		localDone:         make([]uint64, cfg.QueueDepth),
		probeEvery:        probeMin,
		interruptPerBatch: cfg.Mode == ModeReaper,
		finishAtDrain:     cfg.Mode == ModeReaper,
		wakeFd:            -1,
		waitCh:            make(chan struct{}),
		lazyWake:          make(chan struct{}, 1),
		closedCh:          make(chan struct{}),
		stuckCh:           make(chan struct{}),
		done:              make(chan struct{}),
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
		e.setMember(i, m)
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

// errClosedWhile returns the error for a call on a closed engine.
func errClosedWhile(what string) error {
	return fmt.Errorf("engine: %s: %w", what, ErrClosed)
}
