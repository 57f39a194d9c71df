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

// PoolConfig sizes a Pool and chooses its memory.
type PoolConfig struct {
	// Size of the first arena in bytes (the seed's mem_pool_size, e.g.
	// 256 MiB), > 0. Rounded up like ArenaConfig.Size.
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

	mu      sync.Mutex
	closed  bool
	arenas  []*poolArena
	total   int64 // bytes in all arenas
	slabs   []*slab
	freeIDs []uint32
	spare   [][]*slab // per class: recycled slab structs
	partial []*slab   // per class: slabs with free objects (doubly linked)
	empty   []int     // per class: empty slabs kept for reuse (at most 1)
	gen     uint32

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

type poolArena struct {
	a    *Arena
	pool *Pool
	t    *tlsf
	own  []uint32 // per unit: slab id|slabBit, or the head unit of a large block
	live int      // live blocks
	dead atomic.Bool

	idle   *time.Timer // IdleRelease timer, created the first time the arena becomes idle
	idleAt time.Time   // when the last block was freed
}

const slabBit = 1 << 31

type slab struct {
	ar       *poolArena
	class    int
	id       uint32
	unit     uint32
	off      int
	objs     []objMeta
	live     uint32
	carved   uint32 // objects handed out at least once; the rest are virgin
	freeHead uint32 // free list: object index + 1, 0 = empty
	next     *slab
	prev     *slab
	listed   bool
}

// objMeta is a slab object's state: gen != 0 while live, with x its length
// in bytes; gen == 0 while free, with x the next free object + 1.
type objMeta struct {
	gen uint32
	x   uint32
}

// Block is a piece of a pool's arena: a small value (no heap allocation)
// that knows its arena and offset. The zero Block is invalid. A Block is
// valid until freed; its memory is not zeroed by Alloc.
type Block struct {
	ar  *poolArena
	off int
	n   int
	gen uint32
}

// Bytes is the block's memory, Len bytes at Addr; nil for the zero Block or
// once its arena is gone.
func (b Block) Bytes() []byte {
	if b.ar == nil || b.ar.dead.Load() {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(b.ar.a.base, b.off)), b.n)
}

// Len is the length asked for, rounded up to the alignment.
func (b Block) Len() int { return b.n }

// Addr is the virtual address of the first byte (0 for the zero Block).
func (b Block) Addr() uintptr {
	if b.ar == nil {
		return 0
	}
	return uintptr(b.ar.a.base) + uintptr(b.off)
}

// Arena is the arena holding the block (nil for the zero Block).
func (b Block) Arena() *Arena {
	if b.ar == nil {
		return nil
	}
	return b.ar.a
}

// Offset is the block's offset in its arena: a device address is the
// arena's IOVA plus Offset.
func (b Block) Offset() int { return b.off }

// IsZero reports whether b is the zero Block.
func (b Block) IsZero() bool { return b.ar == nil }

// Block2D is a block of Rows rows of Width bytes, Stride bytes apart; the
// stride is Width rounded up to the alignment, so every row starts aligned.
type Block2D struct {
	Block
	Rows, Width, Stride int
}

// Row is row i (Width bytes), or nil when i is out of range.
func (b Block2D) Row(i int) []byte {
	mem := b.Bytes()
	if i < 0 || i >= b.Rows || mem == nil {
		return nil
	}
	return mem[i*b.Stride : i*b.Stride+b.Width]
}

// NewPool maps the first arena and returns the pool over it.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Size <= 0 || cfg.Size > int64(maxInt) || cfg.GrowBy < 0 || cfg.MaxSize < 0 {
		return nil, fmt.Errorf("new pool: size %d, grow by %d, max %d: %w", cfg.Size, cfg.GrowBy, cfg.MaxSize, ErrInvalidSize)
	}
	align := cfg.Align
	if align == 0 {
		align = 64
	}
	if !validAlign(align) {
		return nil, fmt.Errorf("new pool: align %d: %w", align, ErrBadAlign)
	}
	ac := cfg.Arena
	ac.Size = int(cfg.Size)
	a, err := NewArena(ac)
	if err != nil {
		return nil, fmt.Errorf("new pool: %w", err)
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
	p.addArena(a)
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

func (p *Pool) addArena(a *Arena) *poolArena {
	units := uint32(a.Len() >> unitShift)
	ar := &poolArena{a: a, pool: p, t: newTLSF(a.Addr(), units), own: make([]uint32, units)}
	p.arenas = append(p.arenas, ar)
	p.total += int64(a.Len())
	return ar
}

// Alloc returns a block of at least n bytes aligned to the pool's Align
// (address and length).
func (p *Pool) Alloc(n int) (Block, error) { return p.AllocAligned(n, p.align) }

// AllocAligned returns a block of n bytes rounded up to align, starting on
// an align boundary. align is a power of two >= 8.
func (p *Pool) AllocAligned(n, align int) (Block, error) {
	if n <= 0 {
		return Block{}, fmt.Errorf("alloc %d bytes: %w", n, ErrInvalidSize)
	}
	if !validAlign(align) {
		return Block{}, fmt.Errorf("alloc %d bytes aligned to %d: %w", n, align, ErrBadAlign)
	}
	slack := int64(max(align-unitSize, 0))
	if int64(n) > p.maxBlock || int64(roundUp(n, align))+slack > p.maxBlock {
		return Block{}, fmt.Errorf("alloc %d bytes aligned to %d: %w (at most %d bytes fit one arena)", n, align, ErrTooLarge, p.maxBlock)
	}
	size := roundUp(n, align)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return Block{}, fmt.Errorf("alloc %d bytes: %w", n, ErrClosed)
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
		return Block{}, fmt.Errorf("alloc %d bytes aligned to %d: %w", n, align, err)
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
		return Block2D{}, fmt.Errorf("alloc %dx%d bytes: %w", rows, width, ErrInvalidSize)
	}
	if !validAlign(align) {
		return Block2D{}, fmt.Errorf("alloc %dx%d bytes aligned to %d: %w", rows, width, align, ErrBadAlign)
	}
	stride := roundUp(width, align)
	if stride < width || rows > maxInt/stride {
		return Block2D{}, fmt.Errorf("alloc %dx%d bytes: %w", rows, width, ErrTooLarge)
	}
	b, err := p.AllocAligned(rows*stride, align)
	if err != nil {
		return Block2D{}, err
	}
	return Block2D{Block: b, Rows: rows, Width: width, Stride: stride}, nil
}

func (p *Pool) nextGen() uint32 {
	p.gen++
	if p.gen == 0 {
		p.gen = 1
	}
	return p.gen
}

func (p *Pool) allocSmall(c, size int) (Block, error) {
	s := p.partial[c]
	if s == nil {
		var err error
		if s, err = p.newSlab(c); err != nil {
			return Block{}, err
		}
	}
	var idx uint32
	if s.freeHead != 0 {
		idx = s.freeHead - 1
		s.freeHead = s.objs[idx].x
	} else {
		idx = s.carved
		s.carved++
	}
	if s.live == 0 {
		p.empty[c]--
	}
	s.live++
	if s.live == slabObjs[c] {
		p.unlink(s)
	}
	g := p.nextGen()
	s.objs[idx] = objMeta{gen: g, x: uint32(size)}
	if s.ar.live == 0 {
		p.cancelIdle(s.ar)
	}
	s.ar.live++
	p.classLive[c]++
	p.classAllocs[c]++
	return Block{ar: s.ar, off: s.off + int(idx)*classSizes[c], n: size, gen: g}, nil
}

func (p *Pool) allocLarge(size, align int) (Block, error) {
	units := uint32((size + unitSize - 1) >> unitShift)
	ar, u, err := p.allocUnits(units, max(align, unitSize), fUsed)
	if err != nil {
		return Block{}, err
	}
	g := p.nextGen()
	m := &ar.t.meta[u]
	m.gen, m.n = g, size
	own := ar.own[u : u+units]
	for i := range own {
		own[i] = u
	}
	if ar.live == 0 {
		p.cancelIdle(ar)
	}
	ar.live++
	p.largeLive++
	p.largeBytes += int64(size)
	return Block{ar: ar, off: int(u) << unitShift, n: size, gen: g}, nil
}

// allocUnits takes units from the first arena that has them, growing the
// pool by an arena when none has and growth is allowed.
func (p *Pool) allocUnits(units uint32, align int, flags uint8) (*poolArena, uint32, error) {
	for _, ar := range p.arenas {
		if u, ok := ar.t.alloc(units, align, flags); ok {
			return ar, u, nil
		}
	}
	ar, err := p.grow(int64(units)<<unitShift + int64(align-unitSize))
	if err != nil {
		return nil, 0, err
	}
	u, ok := ar.t.alloc(units, align, flags)
	if !ok {
		return nil, 0, fmt.Errorf("%w: a new arena of %d bytes cannot hold %d units aligned to %d", ErrPoolExhausted, ar.a.Len(), units, align)
	}
	return ar, u, nil
}

func (p *Pool) grow(need int64) (*poolArena, error) {
	if p.cfg.MaxSize <= p.total {
		return nil, fmt.Errorf("%w: %d bytes in use of %d and the pool may not grow (MaxSize %d)", ErrPoolExhausted, p.inUse, p.total, p.cfg.MaxSize)
	}
	size := max(p.growBy, need)
	if p.total+size > p.cfg.MaxSize {
		return nil, fmt.Errorf("%w: growing by %d bytes would exceed MaxSize %d (%d mapped)", ErrPoolExhausted, size, p.cfg.MaxSize, p.total)
	}
	ac := p.cfg.Arena
	ac.Size = int(size)
	a, err := NewArena(ac)
	if err != nil {
		return nil, fmt.Errorf("grow pool by %d bytes: %w", size, err)
	}
	if p.total+int64(a.Len()) > p.cfg.MaxSize {
		a.Close()
		return nil, fmt.Errorf("%w: an arena of %d bytes (rounded to its pages) would exceed MaxSize %d", ErrPoolExhausted, a.Len(), p.cfg.MaxSize)
	}
	if p.cfg.OnGrow != nil {
		if err := p.cfg.OnGrow(a); err != nil {
			a.Close()
			return nil, fmt.Errorf("%w: OnGrow refused a new %s arena of %d bytes: %w", ErrPoolExhausted, a.Backing(), a.Len(), err)
		}
	}
	p.grows++
	p.logArena("pool grew by an arena", a)
	return p.addArena(a), nil
}

func (p *Pool) newSlab(c int) (*slab, error) {
	units := slabUnits[c]
	ar, u, err := p.allocUnits(units, slabAlign(c), fUsed|fSlab)
	if err != nil {
		return nil, err
	}
	var s *slab
	if k := len(p.spare[c]); k > 0 {
		s = p.spare[c][k-1]
		p.spare[c] = p.spare[c][:k-1]
	} else {
		s = &slab{class: c, objs: make([]objMeta, slabObjs[c])}
	}
	var id uint32
	if k := len(p.freeIDs); k > 0 {
		id = p.freeIDs[k-1]
		p.freeIDs = p.freeIDs[:k-1]
	} else {
		id = uint32(len(p.slabs))
		p.slabs = append(p.slabs, nil)
	}
	p.slabs[id] = s
	s.ar, s.id, s.unit, s.off = ar, id, u, int(u)<<unitShift
	own := ar.own[u : u+units]
	for i := range own {
		own[i] = id | slabBit
	}
	p.link(s)
	p.empty[c]++
	p.classSlabs[c]++
	return s, nil
}

// releaseSlab gives an empty slab's units back to its arena and keeps the
// struct for the next slab of its class.
func (p *Pool) releaseSlab(s *slab) {
	p.unlink(s)
	s.ar.t.free(s.unit)
	p.slabs[s.id] = nil
	p.freeIDs = append(p.freeIDs, s.id)
	p.classSlabs[s.class]--
	s.ar, s.live, s.carved, s.freeHead = nil, 0, 0, 0
	p.spare[s.class] = append(p.spare[s.class], s)
}

func (p *Pool) link(s *slab) {
	s.prev, s.next = nil, p.partial[s.class]
	if s.next != nil {
		s.next.prev = s
	}
	p.partial[s.class] = s
	s.listed = true
}

func (p *Pool) unlink(s *slab) {
	if !s.listed {
		return
	}
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		p.partial[s.class] = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
	s.next, s.prev, s.listed = nil, nil, false
}

// Free returns a block to the pool. A block freed twice, a stale copy of a
// freed block, a block of another pool or a forged one is refused with
// ErrDoubleFree or ErrForeignBlock; the pool is never corrupted by it.
func (p *Pool) Free(b Block) error {
	if b.ar == nil || b.ar.pool != p {
		return fmt.Errorf("free block %#x+%d: %w", b.Addr(), b.n, ErrForeignBlock)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("free block %#x+%d: %w", b.Addr(), b.n, ErrClosed)
	}
	err := p.free(b)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("free block at offset %#x (%d bytes) of arena %#x: %w", b.off, b.n, b.ar.a.Addr(), err)
	}
	return nil
}

var (
	errForged = fmt.Errorf("%w: the block does not match any allocation", ErrForeignBlock)
	errStale  = fmt.Errorf("%w (or the copy is stale)", ErrDoubleFree)
	errGone   = fmt.Errorf("%w: its arena was released", ErrDoubleFree)
)

func (p *Pool) free(b Block) error {
	ar := b.ar
	if ar.dead.Load() {
		return errGone
	}
	if b.off < 0 || b.off >= ar.a.size || b.n <= 0 || b.gen == 0 {
		return errForged
	}
	u := uint32(b.off >> unitShift)
	if o := ar.own[u]; o&slabBit != 0 {
		id := o &^ slabBit
		if int(id) >= len(p.slabs) {
			return errForged
		}
		s := p.slabs[id]
		if s == nil || s.ar != ar {
			return errStale
		}
		cs := classSizes[s.class]
		rel := b.off - s.off
		if rel < 0 || rel%cs != 0 || rel/cs >= int(slabObjs[s.class]) {
			return errForged
		}
		idx := uint32(rel / cs)
		om := s.objs[idx]
		if om.gen != b.gen {
			return errStale
		}
		if int(om.x) != b.n {
			return errForged
		}
		p.poison(b)
		p.freeSmall(s, idx)
	} else {
		if b.off&(unitSize-1) != 0 {
			return errForged
		}
		m := &ar.t.meta[u]
		if m.flags != fUsed || m.gen != b.gen {
			return errStale
		}
		if m.n != b.n {
			return errForged
		}
		p.poison(b)
		ar.t.free(u)
		p.largeLive--
		p.largeBytes -= int64(b.n)
	}
	p.frees++
	p.inUse -= int64(b.n)
	ar.live--
	if ar.live == 0 && p.cfg.IdleRelease > 0 && ar != p.arenas[0] {
		p.armIdle(ar)
	}
	return nil
}

func (p *Pool) freeSmall(s *slab, idx uint32) {
	c := s.class
	s.objs[idx] = objMeta{x: s.freeHead}
	s.freeHead = idx + 1
	if !s.listed {
		p.link(s)
	}
	s.live--
	p.classLive[c]--
	if s.live == 0 {
		if p.empty[c] >= 1 {
			p.releaseSlab(s)
		} else {
			p.empty[c]++
		}
	}
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

// armIdle starts (or restarts) the idle-release timer of an added arena
// whose last block was just freed. p.timers counts every callback that is
// scheduled or running, so that Close can wait for them.
func (p *Pool) armIdle(ar *poolArena) {
	ar.idleAt = time.Now()
	if ar.idle == nil {
		p.timers.Add(1)
		ar.idle = time.AfterFunc(p.cfg.IdleRelease, func() { p.idleExpired(ar) })
		return
	}
	if !ar.idle.Reset(p.cfg.IdleRelease) { // the previous callback had started: a new one is scheduled
		p.timers.Add(1)
	}
}

// cancelIdle stops the idle-release timer of an arena that gets a block
// again. A callback already started finds the arena busy and does nothing.
func (p *Pool) cancelIdle(ar *poolArena) {
	if ar.idle != nil && ar.idle.Stop() {
		p.timers.Done()
	}
}

// idleExpired is the idle-release timer's callback: it re-checks, under the
// lock, that the arena is still idle and has been for IdleRelease.
func (p *Pool) idleExpired(ar *poolArena) {
	defer p.timers.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || ar.dead.Load() || ar.live != 0 {
		return
	}
	if rest := p.cfg.IdleRelease - time.Since(ar.idleAt); rest > 0 {
		if !ar.idle.Reset(rest) {
			p.timers.Add(1)
		}
		return
	}
	p.releaseArena(ar)
}

// releaseArena closes an added arena that holds no live block.
func (p *Pool) releaseArena(ar *poolArena) {
	p.cancelIdle(ar)
	for _, s := range p.slabs {
		if s != nil && s.ar == ar {
			p.empty[s.class]--
			p.releaseSlab(s)
		}
	}
	if p.cfg.OnRelease != nil {
		p.cfg.OnRelease(ar.a)
	}
	ar.dead.Store(true)
	if err := ar.a.Close(); err != nil && p.log != nil {
		p.log.Warn("closing idle pool arena", "err", err)
	}
	for i, x := range p.arenas {
		if x == ar {
			p.arenas = append(p.arenas[:i], p.arenas[i+1:]...)
			break
		}
	}
	p.total -= int64(ar.a.Len())
	p.releases++
	if p.log != nil {
		p.log.Info("pool released an idle arena", "bytes", ar.a.Len())
	}
}

// Trim closes every added arena (never the first) that holds no live block,
// calling OnRelease for each, and returns how many it closed.
func (p *Pool) Trim() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	if p.closed {
		return 0
	}
	for _, ar := range append([]*poolArena(nil), p.arenas[1:]...) {
		if ar.live == 0 {
			p.releaseArena(ar)
			n++
		}
	}
	return n
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

// Contains resolves the range [addr, addr+n) to the live block holding it
// (how a C caller's pointer or a transfer's range is validated).
func (p *Pool) Contains(addr uintptr, n int) (Block, bool) {
	if n < 0 {
		return Block{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ar := range p.arenas {
		base := ar.a.Addr()
		if addr >= base && addr < base+uintptr(ar.a.size) {
			return p.resolve(ar, int(addr-base), n)
		}
	}
	return Block{}, false
}

func (p *Pool) resolve(ar *poolArena, off, n int) (Block, bool) {
	u := uint32(off >> unitShift)
	o := ar.own[u]
	var b Block
	if o&slabBit != 0 {
		id := o &^ slabBit
		if int(id) >= len(p.slabs) || p.slabs[id] == nil || p.slabs[id].ar != ar {
			return Block{}, false
		}
		s := p.slabs[id]
		cs := classSizes[s.class]
		idx := (off - s.off) / cs
		if off < s.off || idx >= len(s.objs) {
			return Block{}, false
		}
		om := s.objs[idx]
		if om.gen == 0 {
			return Block{}, false
		}
		b = Block{ar: ar, off: s.off + idx*cs, n: int(om.x), gen: om.gen}
	} else {
		m := &ar.t.meta[o]
		if o > u || m.flags != fUsed || m.gen == 0 {
			return Block{}, false
		}
		b = Block{ar: ar, off: int(o) << unitShift, n: m.n, gen: m.gen}
	}
	// off ≥ b.off here; compare lengths, not ends: off+n overflows int for
	// a hostile n (a C caller's length), and the wrapped sum would pass.
	if off < b.off || n > b.n-(off-b.off) {
		return Block{}, false
	}
	return b, true
}

// PoolStats is a snapshot of a pool's accounting.
type PoolStats struct {
	Arenas        int     // arenas mapped now
	Mapped        int64   // bytes mapped in all arenas
	InUse         int64   // bytes in live blocks (sum of their Len)
	Peak          int64   // highest InUse seen
	Held          int64   // bytes taken from the arenas by slabs and large blocks
	Free          int64   // Mapped - Held
	LargestFree   int64   // longest free span of any arena
	Fragmentation float64 // external: 1 - LargestFree/Free (0 when nothing is free)
	Waste         float64 // internal: 1 - InUse/Held (class rounding, empty slab space)
	Allocs        uint64
	Frees         uint64
	Failures      uint64 // Alloc calls that returned an error past argument checks
	LargeBlocks   int
	LargeBytes    int64
	Grows         int // arenas added
	Releases      int // arenas released
	Classes       []ClassStats
}

// ClassStats counts one size class (only classes that were used appear).
type ClassStats struct {
	Size   int    // object size in bytes
	Live   int64  // live blocks
	Slabs  int    // slabs held
	Allocs uint64 // blocks ever allocated
}

// Stats returns the pool's accounting now.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PoolStats{
		Arenas: len(p.arenas), Mapped: p.total, InUse: p.inUse, Peak: p.peak,
		Allocs: p.allocs, Frees: p.frees, Failures: p.failures,
		LargeBlocks: p.largeLive, LargeBytes: p.largeBytes, Grows: p.grows, Releases: p.releases,
	}
	for _, ar := range p.arenas {
		st.Free += int64(ar.t.freeU) << unitShift
		st.LargestFree = max(st.LargestFree, int64(ar.t.largestFree())<<unitShift)
	}
	st.Held = st.Mapped - st.Free
	if st.Free > 0 {
		st.Fragmentation = 1 - float64(st.LargestFree)/float64(st.Free)
	}
	if st.Held > 0 {
		st.Waste = 1 - float64(st.InUse)/float64(st.Held)
	}
	for c := range classSizes {
		if p.classAllocs[c] > 0 || p.classSlabs[c] > 0 {
			st.Classes = append(st.Classes, ClassStats{Size: classSizes[c], Live: p.classLive[c], Slabs: p.classSlabs[c], Allocs: p.classAllocs[c]})
		}
	}
	return st
}

// Close unmaps every arena (without calling OnRelease) and stops the
// idle-release timers: no callback runs after Close returns. Blocks still
// held become invalid (Bytes returns nil). Close is idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
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
