package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hcomm-go/hcomm/hugepage"
)

// ErrBusy: Unregister was refused because transfers that use the memory are
// in flight (wait for them, then unregister again).
var ErrBusy = errors.New("engine: registered memory is in use by transfers in flight")

// registry is the engine's memory registered by callers (Register): each
// region is a borrowed arena (hugepage.Borrow) mapped into the backend
// through MapArena in a slot of its own, and one Block spanning it.
//
// Transfers that use a region are counted per slot, from fill (after the
// staging reservation) to complete (before the callback), so that
// Unregister can refuse while one is in flight. Unregister and a submitter
// meet as in Dekker's protocol: Unregister raises leaving[slot] and then
// reads inflight[slot]; a submitter raises inflight[slot] and then reads
// leaving[slot] and the block's generation (sequentially consistent
// atomics: at least one of the two sees the other, and gives up).
type registry struct {
	mu      sync.Mutex // Register, Unregister
	regions map[uint32]*hugepage.Arena
	// mask has bit s set once slot s held a registered region. A bit is
	// never cleared while the engine is open: a submitter that validated
	// a region's block just before Unregister must still find the bit in
	// fill, and refuse. (A pool arena that later reuses the slot pays the
	// count, nothing else.)
	mask     atomic.Uint64
	inflight [MaxArenas]atomic.Int32
	leaving  [MaxArenas]atomic.Bool
}

// Register maps memory the caller owns into the backend, as the pool's
// arenas are (the same Backend.MapArena path: DMA-mapped into the IOMMU,
// registered with io_uring, ...), and returns a Block over all of it. The
// Block is an ordinary host block: Host(b) and HostAt(b, off) name it in
// transfers, which then read and write the caller's memory in place (no
// copy). This is cudaHostRegister, for hcomm.
//
// mem must start on a page boundary, be a whole number of pages long and
// stay mapped until Unregister returned nil (or the engine is closed): it
// is memory the caller mapped (mmap, a NumPy array's or a CPU tensor's
// pages), never Go heap memory. Free refuses a registered block; use
// Unregister. Each registration takes one of the MaxArenas backend slots
// the pool also uses.
func (e *Engine) Register(mem []byte) (Block, error) {
	if e.closing.Load() {
		return Block{}, fmt.Errorf("engine: register %d bytes: %w", len(mem), ErrClosed)
	}
	a, err := hugepage.Borrow(mem)
	if err != nil {
		return Block{}, fmt.Errorf("engine: register: %w", err)
	}
	e.reg.mu.Lock()
	defer e.reg.mu.Unlock()
	if err := e.mapArena(a); err != nil {
		return Block{}, fmt.Errorf("engine: register %d bytes at %#x: %w", len(mem), a.Addr(), err)
	}
	slot, _ := e.arenas.lookup(a)
	idx, gen, err := e.blocks.get()
	if err != nil {
		e.unmapArena(a)
		return Block{}, err
	}
	if e.reg.regions == nil {
		e.reg.regions = map[uint32]*hugepage.Arena{}
	}
	e.reg.regions[idx] = a
	for {
		m := e.reg.mask.Load()
		if e.reg.mask.CompareAndSwap(m, m|1<<slot) {
			break
		}
	}
	return Block{e: e, hb: a.Whole(), idx: idx, gen: gen, arena: uint16(slot)}, nil
}

// Unregister undoes Register: the memory is unmapped from the backend and
// is the caller's alone again (free or unmap it only after Unregister
// returned nil). While a transfer that uses it is in flight it refuses with
// ErrBusy and changes nothing; a transfer submitted while Unregister runs
// either counts as in flight or is refused (ErrFreedBlock). Unregistering a
// block twice, a pool block or a stale copy is ErrFreedBlock or
// ErrForeignBlock. After Close every registration is gone: Unregister
// returns ErrClosed.
func (e *Engine) Unregister(b Block) error {
	if b.e != e {
		return fmt.Errorf("engine: unregister block at %#x: %w", b.Addr(), ErrForeignBlock)
	}
	if e.closing.Load() {
		return fmt.Errorf("engine: unregister block at %#x: %w", b.Addr(), ErrClosed)
	}
	e.reg.mu.Lock()
	defer e.reg.mu.Unlock()
	a := e.reg.regions[b.idx]
	if a == nil || a != b.hb.Arena() || !e.blocks.live(b.idx, b.gen) {
		if !b.hb.IsZero() && !b.hb.Arena().Borrowed() {
			return fmt.Errorf("engine: unregister block at %#x: a pool block (use Free): %w", b.Addr(), ErrForeignBlock)
		}
		return fmt.Errorf("engine: unregister block at %#x: not registered (unregistered twice?): %w", b.Addr(), ErrFreedBlock)
	}
	s := b.arena
	e.reg.leaving[s].Store(true)
	if n := e.reg.inflight[s].Load(); n != 0 {
		e.reg.leaving[s].Store(false)
		return fmt.Errorf("engine: unregister %d bytes at %#x: %d transfers in flight: %w", b.Len(), b.Addr(), n, ErrBusy)
	}
	// From here on every submitter refuses the block: validate by its
	// generation, fill by the generation too (leaving can come down).
	e.blocks.put(b.idx, b.gen)
	e.reg.leaving[s].Store(false)
	delete(e.reg.regions, b.idx)
	e.unmapArena(a)
	return a.Close() // marks the borrowed arena closed; unmaps nothing
}

// holdRegistered counts t in flight on the registered regions it uses and
// records them in s (fill, after the staging reservation). false: a region
// is being unregistered (or was), nothing is held and t must not run.
func (e *Engine) holdRegistered(s *slot, t *Transfer) bool {
	m := e.reg.mask.Load()
	var held uint16
	for i, l := range [2]*Loc{&t.Src, &t.Dst} {
		if l.kind != LocHost || m>>l.b.arena&1 == 0 {
			continue
		}
		a := l.b.arena
		e.reg.inflight[a].Add(1)
		held |= uint16(a+1) << (8 * i)
		if e.reg.leaving[a].Load() || !e.blocks.live(l.b.idx, l.b.gen) {
			e.releaseHeld(held)
			return false
		}
	}
	s.reg = held
	return true
}

// releaseRegistered ends what holdRegistered counted for s (complete,
// before the callback: the backend is done with the memory).
func (e *Engine) releaseRegistered(s *slot) {
	e.releaseHeld(s.reg)
	s.reg = 0
}

func (e *Engine) releaseHeld(held uint16) {
	for ; held != 0; held >>= 8 {
		if a := held & 0xff; a != 0 {
			e.reg.inflight[a-1].Add(-1)
		}
	}
}

// errUnregistering refuses a transfer whose registered memory went away
// between validation and staging.
var errUnregistering = fmt.Errorf("engine: submit: registered memory is being unregistered: %w", ErrFreedBlock)

// isRegistered reports whether b is a registered block (Free refuses it).
func isRegistered(b *Block) bool {
	a := b.hb.Arena()
	return a != nil && a.Borrowed()
}
