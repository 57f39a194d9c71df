package ring

import (
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/hcomm-go/hcomm/internal/atomicrel"
)

// MPSC is a multi-producer, single-consumer ring of fixed-size entries laid
// over caller memory: the engine's submission side, where many goroutines
// submit and one drains.
//
// A producer reserves k consecutive slots with one compare-and-swap on the
// shared tail, fills them with plain writes, and publishes the whole batch
// with one store: a marker in a side array (one word per slot, on the Go
// heap, so the entries keep the caller's exact layout) at the batch's first
// slot, holding the batch length and the lap it belongs to. Producers finish
// in any order; the consumer walks markers from its head, batch by batch, so
// it sees a prefix of the ring only when every batch in it is published. The
// consumer clears each marker as it takes it over, so a marker is never stale.
//
// A reservation that is never committed stalls the consumer at that batch:
// every successful Reserve must be followed by Commit.
type MPSC struct {
	s        slots
	lapShift uint            // log2(entries): position >> lapShift is the lap
	pub      []atomic.Uint64 // per slot: lap<<32 | batch length, 0 = unpublished
	_        [cacheLine]byte

	// Producers' cache line (contended by design: the CAS on tail).
	tail       atomic.Uint64 // end of all reservations
	cachedHead atomic.Uint64 // producers' shared, possibly stale, copy of head
	_          [cacheLine - 16]byte

	// Consumer's cache line.
	head    atomicrel.Uint64 // consumed end; stored by the consumer only
	ready   uint64           // consumer-private: end of the published run it has found (≥ head)
	peekEnd uint64           // consumer-private: end of what the last Peek returned
	_       [cacheLine - 24]byte
}

// NewMPSC lays a ring over mem: len(mem)/entrySize entries, which must be a
// power of two. It allocates the marker array (8 bytes per entry) once; no
// operation allocates afterwards. The ring does not clear mem.
func NewMPSC(mem []byte, entrySize int) (*MPSC, error) {
	s, err := newSlots(mem, entrySize)
	if err != nil {
		return nil, err
	}
	return &MPSC{
		s:        s,
		lapShift: uint(bits.TrailingZeros64(s.n)),
		pub:      make([]atomic.Uint64, s.n),
	}, nil
}

// Cap is the number of entries the ring holds.
func (r *MPSC) Cap() int { return int(r.s.n) }

// EntrySize is the size of one entry in bytes.
func (r *MPSC) EntrySize() int { return r.s.entrySize }

// Len is the number of reserved-or-published, unconsumed entries (a snapshot).
func (r *MPSC) Len() int {
	h := r.head.Load()
	return int(r.tail.Load() - h)
}

// Head is the free-running position of the oldest unreleased entry
// (slot = Head() % Cap()).
func (r *MPSC) Head() uint64 { return r.head.Load() }

// Tail is the free-running position after the newest reserved entry:
// every position below it has been handed to a producer, committed or not.
// (Head() + Len() is not that: entries released between its two loads
// make the sum overshoot.)
func (r *MPSC) Tail() uint64 { return r.tail.Load() }

// Reserve reserves exactly k consecutive slots, or returns ErrFull (nothing
// reserved) when fewer than k are free, or ErrBatchSize when k is not in
// 1..Cap. Safe for any number of concurrent producers; lock-free (a failed
// CAS means another producer made progress).
func (r *MPSC) Reserve(k int) (Batch, error) {
	if k <= 0 || uint64(k) > r.s.n {
		return Batch{}, fmt.Errorf("ring: reserve %d of %d entries: %w", k, r.s.n, ErrBatchSize)
	}
	n := int64(r.s.n)
	for {
		// cachedHead before tail: then h ≤ head ≤ t, and t+k-h is the
		// true fill level or an overestimate (never an underestimate).
		// Acquire on cachedHead: it was stored by a producer that loaded
		// head, so the consumer's reads of slots before h happened before.
		h := r.cachedHead.Load()
		t := r.tail.Load()
		if int64(t+uint64(k)-h) > n {
			// Acquire: as for SPSC, seeing head = h means the consumer is
			// done with every slot before h.
			h = r.head.Load()
			if int64(t+uint64(k)-h) > n {
				return Batch{}, ErrFull
			}
			// A racing producer may store an older head here; that only
			// makes the cache more conservative (head is monotonic).
			r.cachedHead.Store(h)
		}
		// The CAS claims [t, t+k) for this producer alone. It orders
		// nothing else: the entries are published by Commit's marker.
		if r.tail.CompareAndSwap(t, t+uint64(k)) {
			return Batch{s: &r.s, start: t, n: k}, nil
		}
	}
}

// Commit publishes a filled reservation with one atomic operation. Batches
// may be committed in any order and from any goroutine. Committing a batch
// that did not come from this ring's Reserve, or twice, returns ErrCommit
// (a second commit is detected while the consumer has not yet taken the
// batch; one after that leaves a marker of a past lap, which publishes
// nothing and which the slot's next producer replaces).
func (r *MPSC) Commit(b Batch) error {
	if b.s != &r.s || b.n <= 0 {
		return fmt.Errorf("ring: commit of %d entries at %d: not a reservation of this ring: %w", b.n, b.start, ErrCommit)
	}
	lap := uint32(b.start >> r.lapShift)
	marker := uint64(lap)<<32 | uint64(b.n)
	slot := &r.pub[b.start&r.s.mask]
	// Release: the producer's plain writes into the entries happen before
	// this CAS; the consumer's Load of the marker (acquire) then sees them.
	// CAS rather than Store (same cost on amd64) so that a double commit is
	// refused instead of publishing garbage.
	if slot.CompareAndSwap(0, marker) {
		return nil
	}
	// Not zero: this batch committed before (same lap), or the stale
	// marker of a past lap's batch committed again after the consumer took
	// it, which the consumer never accepts and which only this producer,
	// the slot's owner now, replaces.
	for {
		old := slot.Load()
		if old != 0 && uint32(old>>32) == lap {
			return fmt.Errorf("ring: commit of %d entries at %d: already committed: %w", b.n, b.start, ErrCommit)
		}
		if slot.CompareAndSwap(old, marker) {
			return nil
		}
	}
}

// Peek returns up to max published entries, oldest first, without consuming
// them (Len 0 when none is published at the head). Consumer side only.
func (r *MPSC) Peek(max int) Batch {
	h := r.head.Load() // consumer's own variable
	for r.ready-h < uint64(max) {
		slot := &r.pub[r.ready&r.s.mask]
		// Acquire: pairs with Commit's CAS; a matching marker means the
		// batch's entries are fully written.
		m := slot.Load()
		if m == 0 || uint32(m>>32) != uint32(r.ready>>r.lapShift) {
			break
		}
		// The consumer owns the marker from here on. Clearing it happens
		// before the Release that frees this slot, so the next producer to
		// start a batch here (it must first see that head) finds it zero.
		slot.Store(0)
		r.ready += m & 0xffffffff
	}
	n := r.ready - h
	if n > uint64(max) {
		n = uint64(max)
	}
	if max <= 0 {
		n = 0
	}
	r.peekEnd = h + n
	return Batch{s: &r.s, start: h, n: int(n)}
}

// Release consumes the n oldest entries with one store. n must not exceed
// what Peek returned. Consumer side only.
func (r *MPSC) Release(n int) error {
	h := r.head.Load()
	if n < 0 || uint64(n) > r.peekEnd-h {
		return fmt.Errorf("ring: release %d entries, %d were peeked: %w", n, r.peekEnd-h, ErrRelease)
	}
	// Release: the consumer's reads of the entries happen before this
	// store; a producer that loads the new head may then overwrite them.
	// Release ordering is all that takes (a plain store on amd64, not a
	// locked exchange).
	r.head.StoreRelease(h + uint64(n))
	return nil
}

// Push reserves one slot, copies entry into it and commits it. Any producer.
func (r *MPSC) Push(entry []byte) error {
	if len(entry) != r.s.entrySize {
		return fmt.Errorf("ring: push %d bytes into %d-byte entries: %w", len(entry), r.s.entrySize, ErrEntrySize)
	}
	b, err := r.Reserve(1)
	if err != nil {
		return err
	}
	copy(b.Entry(0), entry)
	return r.Commit(b)
}

// Pop copies the oldest published entry into dst and consumes it, or returns
// ErrEmpty. Consumer side only.
func (r *MPSC) Pop(dst []byte) error {
	if len(dst) != r.s.entrySize {
		return fmt.Errorf("ring: pop into %d bytes from %d-byte entries: %w", len(dst), r.s.entrySize, ErrEntrySize)
	}
	b := r.Peek(1)
	if b.n == 0 {
		return ErrEmpty
	}
	copy(dst, b.Entry(0))
	return r.Release(1)
}
