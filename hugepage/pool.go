package hugepage

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// The pool's life cycle and entry points. The work is split by concern:
// slab.go (size-class slabs), large.go (large blocks), grow.go (growth and
// idle release), owner.go (which block holds an address), stats.go, and
// block.go (the Block value).

// PoolConfig sizes a Pool and chooses its memory.
type PoolConfig struct {
	// Size of the first arena in bytes (e.g. 256 MiB), > 0. Rounded up
	// like ArenaConfig.Size. The first arena stays until Close.
	Size int64
	// Align is the alignment of Alloc: a power of two >= 8. Default 64 (a
	// cache line); 4096 makes every block legal for O_DIRECT.
	Align int
	// Arena is the backing policy, Populate and Lock for every arena of the
	// pool; its Size is ignored.
	Arena ArenaConfig
	// GrowBy is the size of each arena added when the pool is full
	// (default Size). A block larger than GrowBy gets an arena of its own
	// size.
	GrowBy int64
	// MaxSize caps the total of all arenas. At or below Size the pool never
	// grows (the default).
	MaxSize int64
	// IdleRelease, when > 0, closes an added arena (never the first) once
	// it has held no live block for that long: freeing its last block arms
	// a timer, an allocation from it before the timer fires cancels the
	// release. Zero keeps added arenas until Trim or Close.
	IdleRelease time.Duration
	// OnGrow, if set, is called when the pool has mapped an added arena
	// (not the first, NewPool's), before any block of it is handed out:
	// typically to map the arena for a device. An error closes the arena
	// (the pool is left as it was) and fails the Alloc that needed it with
	// an error wrapping both ErrPoolExhausted and the hook's error.
	//
	// OnGrow and OnRelease run with the pool's lock held, on the goroutine
	// of the Alloc, Trim or idle timer that caused them, possibly
	// while other goroutines wait in Alloc or Free: they must not call any
	// method of the pool (it would deadlock), and should be quick.
	OnGrow func(a *Arena) error
	// OnRelease, if set, is called just before an added arena is closed by
	// IdleRelease or Trim (not by Pool.Close): typically to unmap it from a
	// device. No block of the arena is live then.
	OnRelease func(a *Arena)
	// Debug fills freed blocks with PoisonByte, so that use after free
	// shows up as 0xDB bytes instead of plausible stale data.
	Debug bool
	// Logger receives growth, release and backing-fallback events; nil
	// logs nothing (the same facts are in Stats and Arena.Fallbacks).
	Logger *slog.Logger
}

// PoisonByte fills freed blocks in Debug mode.
const PoisonByte = 0xDB

// Pool is the aligned allocator over one or more arenas. All methods are
// safe for concurrent use. Alloc and Free take one mutex for a few tens of
// nanoseconds and do not allocate on the Go heap once the pool is warm
// (slab metadata for a size class is allocated the first time the class
// needs a slab and recycled afterwards).
type Pool struct {
	cfg      PoolConfig
	align    int
	growBy   int64
	maxBlock int64
	log      *slog.Logger

	timers sync.WaitGroup // idle-release callbacks pending or running

	mu     sync.Mutex
	closed bool
	arenas []*poolArena // the first is NewPool's
	total  int64        // bytes in all arenas
	gen    uint32       // last generation handed out

	// Size-class slabs (slab.go).
	slabs   []*slab   // by slab id; nil = free id
	freeIDs []uint32  // slab ids to reuse
	spare   [][]*slab // per class: recycled slab structs
	partial []*slab   // per class: slabs with free objects (doubly linked)
	empty   []int     // per class: empty slabs kept for reuse (at most 1)

	// Accounting (stats.go).
	classLive   []int64
	classSlabs  []int
	classAllocs []uint64
	inUse, peak int64
	largeLive   int
	largeBytes  int64
	allocs      uint64
	frees       uint64
	failures    uint64
	grows       int
	releases    int
}

// poolArena is an arena under the pool's allocators.
type poolArena struct {
	a     *Arena
	pool  *Pool
	t     *tlsf    // the large allocator, which also hands out slab spans
	own   []uint32 // the ownership map, one entry per unit (owner.go)
	live  int      // live blocks
	first bool     // NewPool's arena: never released before Close
	dead  atomic.Bool

	idle   *time.Timer // IdleRelease timer, created the first time the arena becomes idle
	idleAt time.Time   // when the last block was freed
}

// NewPool maps the first arena and returns the pool over it.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Size <= 0 || cfg.Size > int64(maxInt) || cfg.GrowBy < 0 || cfg.MaxSize < 0 {
		return nil, fmt.Errorf("hugepage: new pool: size %d, grow by %d, max %d: %w", cfg.Size, cfg.GrowBy, cfg.MaxSize, ErrInvalidSize)
	}
	align := cfg.Align
	if align == 0 {
		align = 64
	}
	if !validAlign(align) {
		return nil, fmt.Errorf("hugepage: new pool: align %d: %w", align, ErrBadAlign)
	}
	ac := cfg.Arena
	ac.Size = int(cfg.Size)
	a, err := newArena(ac)
	if err != nil {
		return nil, fmt.Errorf("hugepage: new pool: %w", err)
	}
	nc := len(classSizes)
	p := &Pool{
		cfg: cfg, align: align, growBy: cfg.GrowBy, log: cfg.Logger,
		spare: make([][]*slab, nc), partial: make([]*slab, nc), empty: make([]int, nc),
		classLive: make([]int64, nc), classSlabs: make([]int, nc), classAllocs: make([]uint64, nc),
	}
	if p.growBy == 0 {
		p.growBy = cfg.Size
	}
	p.addArena(a).first = true
	p.maxBlock = int64(a.Len())
	if cfg.MaxSize > int64(a.Len()) {
		p.maxBlock = max(p.maxBlock, cfg.MaxSize-int64(a.Len()))
	}
	p.logArena("pool arena mapped", a)
	return p, nil
}

func validAlign(a int) bool { return a >= 8 && a&(a-1) == 0 }

func (p *Pool) logArena(msg string, a *Arena) {
	if p.log == nil {
		return
	}
	p.log.Info(msg, "bytes", a.Len(), "backing", a.Backing().String(), "addr", fmt.Sprintf("%#x", a.Addr()))
	for _, fb := range a.Fallbacks() {
		p.log.Warn("pool arena backing fallback", "reason", fb.Error())
	}
}

// Alloc returns a block of at least n bytes aligned to the pool's Align
// (address and length).
func (p *Pool) Alloc(n int) (Block, error) { return p.AllocAligned(n, p.align) }

// AllocAligned returns a block of n bytes rounded up to align, starting on
// an align boundary. align is a power of two >= 8.
func (p *Pool) AllocAligned(n, align int) (Block, error) {
	if n <= 0 {
		return Block{}, fmt.Errorf("hugepage: alloc %d bytes: %w", n, ErrInvalidSize)
	}
	if !validAlign(align) {
		return Block{}, fmt.Errorf("hugepage: alloc %d bytes aligned to %d: %w", n, align, ErrBadAlign)
	}
	slack := int64(max(align-unitSize, 0))
	if int64(n) > p.maxBlock || int64(roundUp(n, align))+slack > p.maxBlock {
		return Block{}, fmt.Errorf("hugepage: alloc %d bytes aligned to %d: %w (at most %d bytes fit one arena)", n, align, ErrTooLarge, p.maxBlock)
	}
	size := roundUp(n, align)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return Block{}, fmt.Errorf("hugepage: alloc %d bytes: %w", n, ErrClosed)
	}
	var b Block
	var err error
	if c := classFor(size, align); c >= 0 {
		b, err = p.allocSmall(c, size)
	} else {
		b, err = p.allocLarge(size, align)
	}
	if err != nil {
		p.failures++
		p.mu.Unlock()
		return Block{}, fmt.Errorf("hugepage: alloc %d bytes aligned to %d: %w", n, align, err)
	}
	p.allocs++
	p.inUse += int64(size)
	p.peak = max(p.peak, p.inUse)
	p.mu.Unlock()
	return b, nil
}

// Alloc2D returns rows rows of width bytes, each starting aligned to align:
// the stride is width rounded up to align.
func (p *Pool) Alloc2D(rows, width, align int) (Block2D, error) {
	if rows <= 0 || width <= 0 {
		return Block2D{}, fmt.Errorf("hugepage: alloc %dx%d bytes: %w", rows, width, ErrInvalidSize)
	}
	if !validAlign(align) {
		return Block2D{}, fmt.Errorf("hugepage: alloc %dx%d bytes aligned to %d: %w", rows, width, align, ErrBadAlign)
	}
	stride := roundUp(width, align)
	if stride < width || rows > maxInt/stride {
		return Block2D{}, fmt.Errorf("hugepage: alloc %dx%d bytes: %w", rows, width, ErrTooLarge)
	}
	b, err := p.AllocAligned(rows*stride, align)
	if err != nil {
		return Block2D{}, err
	}
	return Block2D{Block: b, Rows: rows, Width: width, Stride: stride}, nil
}

// nextGen returns the generation of a new block (never 0, which marks a
// free object).
func (p *Pool) nextGen() uint32 {
	p.gen++
	if p.gen == 0 {
		p.gen = 1
	}
	return p.gen
}

// Free returns a block to the pool. A block freed twice, a stale copy of a
// freed block, a block of another pool or a forged one is refused with
// ErrDoubleFree or ErrForeignBlock; the pool is never corrupted by it.
func (p *Pool) Free(b Block) error {
	if b.ar == nil || b.ar.pool != p {
		return fmt.Errorf("hugepage: free block %#x+%d: %w", b.Addr(), b.n, ErrForeignBlock)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("hugepage: free block %#x+%d: %w", b.Addr(), b.n, ErrClosed)
	}
	err := p.free(b)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("hugepage: free block at offset %#x (%d bytes) of arena %#x: %w", b.off, b.n, b.ar.a.Addr(), err)
	}
	return nil
}

// free checks b against the live block at its offset and frees it.
func (p *Pool) free(b Block) error {
	ar := b.ar
	if ar.dead.Load() {
		return errGone
	}
	if b.off < 0 || b.off >= ar.a.size || b.n <= 0 || b.gen == 0 {
		return errForged
	}
	start, n, gen, s, idx := p.lookup(ar, b.off)
	switch {
	case gen != b.gen: // b.gen != 0, so this includes "no live block here"
		return errStale
	case start != b.off || n != b.n:
		return errForged
	}
	p.poison(b)
	if s != nil {
		p.freeSmall(s, idx)
	} else {
		p.freeLarge(b)
	}
	p.frees++
	p.inUse -= int64(b.n)
	p.blockFreed(ar)
	return nil
}

func (p *Pool) poison(b Block) {
	if !p.cfg.Debug {
		return
	}
	mem := unsafe.Slice((*byte)(unsafe.Add(b.ar.a.base, b.off)), b.n)
	for i := range mem {
		mem[i] = PoisonByte
	}
}

// Arenas returns the pool's arenas, first the one NewPool mapped.
func (p *Pool) Arenas() []*Arena {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Arena, len(p.arenas))
	for i, ar := range p.arenas {
		out[i] = ar.a
	}
	return out
}

// Close unmaps every arena (without calling OnRelease) and stops the
// idle-release timers: no callback runs after Close returns. Blocks still
// held become invalid (Bytes returns nil). Close is idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.timers.Wait() // a concurrent first Close may still be waiting
		return nil
	}
	p.closed = true
	var errs []error
	for _, ar := range p.arenas {
		p.cancelIdle(ar)
		ar.dead.Store(true)
		if err := ar.a.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	p.mu.Unlock()
	p.timers.Wait() // callbacks already started see p.closed and return
	return errors.Join(errs...)
}
