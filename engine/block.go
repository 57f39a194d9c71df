package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hcomm-go/hcomm/hugepage"
)

// Block is host memory from the engine's pool: aligned, off the Go heap,
// already mapped into the backend (DMA-mapped, registered with io_uring),
// so a transfer never maps, pins or registers anything. It is a
// small value; copies name the same memory. Free it with Engine.Free; a
// freed block's copies are refused by Submit (ErrFreedBlock).
type Block struct {
	e     *Engine
	hb    hugepage.Block
	idx   uint32 // handle in the engine's block table
	gen   uint32 // generation of that handle when allocated
	arena uint16 // the arena's backend slot
}

// Bytes is the block's memory (nil for the zero Block).
//
// The memory lives only as long as the engine: Close (and Shutdown)
// unmaps the pool. After that, Bytes returns nil, and a slice that Bytes
// returned before is a dangling pointer: touching it faults the process
// (SIGSEGV, not a recoverable panic) or, once the addresses are reused,
// reads or writes unrelated memory. The same holds after Free, where the
// memory goes to the next Alloc. Keep no slice of a block beyond Free or
// Close. Built with -tags hcommdebug, Bytes panics with a message instead
// of returning memory of a freed block or a closed engine.
func (b Block) Bytes() []byte {
	if b.e == nil {
		return nil
	}
	if b.e.unmapped.Load() {
		if debug {
			panic(fmt.Sprintf("engine: Block.Bytes of a block at %#x after its engine was closed: the pool is unmapped", b.hb.Addr()))
		}
		return nil
	}
	if debug && !b.e.blocks.live(b.idx, b.gen) && b.hb.Bytes() != nil {
		// A freed pool block (an unregistered one already says nil).
		panic(fmt.Sprintf("engine: Block.Bytes of a freed block at %#x: the memory belongs to the pool (or the next Alloc)", b.hb.Addr()))
	}
	return b.hb.Bytes()
}

// Len is the block's length: the size asked for, rounded up to the
// alignment.
func (b Block) Len() int { return b.hb.Len() }

// Addr is the virtual address of the first byte.
func (b Block) Addr() uintptr { return b.hb.Addr() }

// IOVA is the address the engine's first backend uses for the first byte:
// an IOVA for a DMA device, an offset in a registered buffer for io_uring
// (0 for the zero Block). IOVAOf gives another backend's.
func (b Block) IOVA() uint64 {
	if b.e == nil {
		return 0
	}
	return b.e.first.addr[b.arena].Load() + uint64(b.hb.Offset())
}

// IOVAOf is the address backend t uses for the block's first byte (0 for
// a Target of another engine, or a removed one).
func (b Block) IOVAOf(t Target) uint64 {
	m := t.member()
	if b.e == nil || t.e != b.e || m == nil {
		return 0
	}
	return m.addr[b.arena].Load() + uint64(b.hb.Offset())
}

// IsZero reports whether b is the zero Block.
func (b Block) IsZero() bool { return b.e == nil }

// blockTable gives every live block a handle whose generation Submit checks
// with one atomic load: no lock and no pool lookup on the submit path. It is
// a two-level table (chunks allocated on demand, never freed until Close) so
// that lookups need no lock while Alloc grows it.
type blockTable struct {
	mu     sync.Mutex // Alloc/Free only
	free   []uint32   // free handles
	next   uint32     // first never-used handle
	chunks [maxBlockChunks]atomic.Pointer[blockChunk]
}

const (
	blockChunkBits = 10
	blockChunkSize = 1 << blockChunkBits
	maxBlockChunks = 4096 // 4 Mi live blocks
)

type blockChunk [blockChunkSize]atomic.Uint32 // generation per handle; odd = live

// get allocates a handle and returns it with its (odd, live) generation.
func (t *blockTable) get() (idx, gen uint32, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if t.next >= maxBlockChunks*blockChunkSize {
			return 0, 0, fmt.Errorf("engine: alloc: %d blocks live, at most %d: %w", t.next, maxBlockChunks*blockChunkSize, hugepage.ErrPoolExhausted)
		}
		idx = t.next
		t.next++
		if c := idx >> blockChunkBits; t.chunks[c].Load() == nil {
			t.chunks[c].Store(new(blockChunk))
		}
	}
	g := t.slot(idx)
	// Even → odd: live. The store publishes nothing else; Submit compares
	// generations only.
	gen = g.Load() + 1
	g.Store(gen)
	return idx, gen, nil
}

// put retires handle idx if gen is its live generation.
func (t *blockTable) put(idx, gen uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.slot(idx)
	if g == nil || g.Load() != gen {
		return false
	}
	g.Store(gen + 1) // odd → even: freed; every copy of the Block is now stale
	t.free = append(t.free, idx)
	return true
}

func (t *blockTable) slot(idx uint32) *atomic.Uint32 {
	c := t.chunks[idx>>blockChunkBits&(maxBlockChunks-1)].Load()
	if c == nil {
		return nil
	}
	return &c[idx&(blockChunkSize-1)]
}

// live reports whether (idx, gen) is a live block. One atomic load: it pairs
// with get/put's stores, so a Free that returned before Submit started is
// always seen.
func (t *blockTable) live(idx, gen uint32) bool {
	g := t.slot(idx)
	return g != nil && g.Load() == gen
}

// Alloc returns a block of at least n bytes from the pool, aligned to
// Config.Alignment (address and length).
func (e *Engine) Alloc(n int) (Block, error) {
	if e.closing.Load() {
		return Block{}, fmt.Errorf("engine: alloc %d bytes: %w", n, ErrClosed)
	}
	hb, err := e.pool.Alloc(n)
	if err != nil {
		return Block{}, fmt.Errorf("engine: alloc %d bytes: %w", n, err)
	}
	idx, gen, err := e.blocks.get()
	if err != nil {
		_ = e.pool.Free(hb)
		return Block{}, err
	}
	slot, ok := e.arenas.lookup(hb.Arena())
	if !ok {
		// Cannot happen: the pool maps every arena before handing out
		// its blocks. Refuse rather than hand out an unmapped block.
		e.blocks.put(idx, gen)
		_ = e.pool.Free(hb)
		return Block{}, fmt.Errorf("engine: alloc %d bytes: the block's arena is not mapped into the backends: %w", n, ErrNotSupported)
	}
	return Block{e: e, hb: hb, idx: idx, gen: gen, arena: uint16(slot)}, nil
}

// Free returns b to the pool. Freeing a block twice, a stale copy, a block
// of another engine or the zero Block is an error (ErrFreedBlock,
// ErrForeignBlock) that changes nothing. Do not free a block while a
// transfer that uses it is in flight: the device may still be reading or
// writing it.
func (e *Engine) Free(b Block) error {
	if b.e != e {
		return fmt.Errorf("engine: free block at %#x: %w", b.Addr(), ErrForeignBlock)
	}
	if e.closing.Load() {
		return fmt.Errorf("engine: free block at %#x: %w", b.Addr(), ErrClosed)
	}
	if isRegistered(&b) {
		return fmt.Errorf("engine: free block at %#x: registered memory (use Unregister): %w", b.Addr(), ErrForeignBlock)
	}
	if !e.blocks.put(b.idx, b.gen) {
		return fmt.Errorf("engine: free block at %#x: %w", b.Addr(), ErrFreedBlock)
	}
	if err := e.pool.Free(b.hb); err != nil {
		return fmt.Errorf("engine: free block at %#x: %w", b.Addr(), err)
	}
	return nil
}
