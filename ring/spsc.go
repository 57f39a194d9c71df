package ring

import (
	"fmt"
	"sync/atomic"
)

// SPSC is a single-producer, single-consumer ring of fixed-size entries laid
// over caller memory. One goroutine at a time produces (Reserve/Commit/Push)
// and one at a time consumes (Peek/Release/Pop); the two may run concurrently.
//
// Indexes are free-running uint64 positions (they never wrap in practice:
// 2^64 entries); the slot of position p is p mod Cap. Entries [head, tail)
// are published and readable; [tail, reserved) are reserved by the producer
// and being filled.
type SPSC struct {
	s slots
	_ [cacheLine]byte

	// Producer's cache line.
	tail       atomic.Uint64 // published end; stored by the producer only
	reserved   uint64        // producer-private: end of all reservations (≥ tail)
	cachedHead uint64        // producer-private copy of head, refreshed when the ring looks full
	_          [cacheLine - 24]byte

	// Consumer's cache line.
	head       atomic.Uint64 // consumed end; stored by the consumer only
	cachedTail uint64        // consumer-private copy of tail, refreshed when the ring looks empty
	peekEnd    uint64        // consumer-private: end of what the last Peek returned
	_          [cacheLine - 24]byte
}

// NewSPSC lays a ring over mem: len(mem)/entrySize entries, which must be a
// power of two. The ring does not clear mem and never allocates after this call.
func NewSPSC(mem []byte, entrySize int) (*SPSC, error) {
	s, err := newSlots(mem, entrySize)
	if err != nil {
		return nil, err
	}
	return &SPSC{s: s}, nil
}

// Cap is the number of entries the ring holds.
func (r *SPSC) Cap() int { return int(r.s.n) }

// EntrySize is the size of one entry in bytes.
func (r *SPSC) EntrySize() int { return r.s.entrySize }

// Len is the number of published, unconsumed entries. Called concurrently
// with both sides it is a snapshot that may be stale at once.
func (r *SPSC) Len() int {
	// head first: head ≤ tail holds for any head loaded before tail.
	h := r.head.Load()
	return int(r.tail.Load() - h)
}

// Tail is the free-running position one past the last published entry
// (slot = Tail() % Cap()): what a driver writes to a device's SQ tail
// doorbell after Commit, when the device consumes this ring's memory.
func (r *SPSC) Tail() uint64 { return r.tail.Load() }

// Head is the free-running position of the oldest unreleased entry.
func (r *SPSC) Head() uint64 { return r.head.Load() }

// Reserve reserves exactly k consecutive slots for the producer to fill, or
// returns ErrFull (nothing reserved) when fewer than k are free, or
// ErrBatchSize when k is not in 1..Cap. Reservations are published, in the
// order they were made, by Commit. Producer side only.
func (r *SPSC) Reserve(k int) (Batch, error) {
	if k <= 0 || uint64(k) > r.s.n {
		return Batch{}, fmt.Errorf("ring: reserve %d of %d entries: %w", k, r.s.n, ErrBatchSize)
	}
	end := r.reserved + uint64(k)
	if end-r.cachedHead > r.s.n {
		// Acquire: seeing head = h means the consumer finished reading every
		// entry before h (its reads happen before its Store of h), so the
		// producer may overwrite those slots.
		r.cachedHead = r.head.Load()
		if end-r.cachedHead > r.s.n {
			return Batch{}, ErrFull
		}
	}
	b := Batch{s: &r.s, start: r.reserved, n: k}
	r.reserved = end
	return b, nil
}

// Commit publishes a filled reservation with one store. Reservations must be
// committed in the order they were made; anything else returns ErrCommit and
// publishes nothing. Producer side only.
func (r *SPSC) Commit(b Batch) error {
	t := r.tail.Load() // producer's own variable: no ordering needed here
	if b.s != &r.s || b.n <= 0 || b.start != t || b.start+uint64(b.n) > r.reserved {
		return fmt.Errorf("ring: commit of %d entries at %d (published end %d, reserved end %d): %w",
			b.n, b.start, t, r.reserved, ErrCommit)
	}
	// Release: the producer's plain writes into the batch's entries happen
	// before this store; a consumer that loads the new tail sees them.
	r.tail.Store(t + uint64(b.n))
	return nil
}

// Push copies one entry (exactly EntrySize bytes) into the ring and publishes
// it: Reserve(1), copy, Commit. It returns ErrFull when there is no room.
func (r *SPSC) Push(entry []byte) error {
	if len(entry) != r.s.entrySize {
		return fmt.Errorf("ring: push %d bytes into %d-byte entries: %w", len(entry), r.s.entrySize, ErrEntrySize)
	}
	if r.reserved != r.tail.Load() {
		return fmt.Errorf("ring: push while a reservation is outstanding: %w", ErrCommit)
	}
	b, err := r.Reserve(1)
	if err != nil {
		return err
	}
	copy(b.Entry(0), entry)
	return r.Commit(b)
}

// Peek returns up to max published entries, oldest first, without consuming
// them (Len 0 when the ring is empty). Calling Peek again before Release
// returns the same entries, possibly more. Consumer side only.
func (r *SPSC) Peek(max int) Batch {
	h := r.head.Load() // consumer's own variable
	avail := r.cachedTail - h
	if avail < uint64(max) {
		// Acquire: seeing tail = t means every entry before t was fully
		// written (the producer's writes happen before its Store of t).
		r.cachedTail = r.tail.Load()
		avail = r.cachedTail - h
	}
	if avail > uint64(max) {
		avail = uint64(max)
	}
	if max <= 0 {
		avail = 0
	}
	r.peekEnd = h + avail
	return Batch{s: &r.s, start: h, n: int(avail)}
}

// Release consumes the n oldest entries, handing their slots back to the
// producer with one store. n must not exceed what Peek returned. Consumer side only.
func (r *SPSC) Release(n int) error {
	h := r.head.Load()
	if n < 0 || uint64(n) > r.peekEnd-h {
		return fmt.Errorf("ring: release %d entries, %d were peeked: %w", n, r.peekEnd-h, ErrRelease)
	}
	// Release: the consumer's reads of the entries happen before this store;
	// a producer that loads the new head may then overwrite them.
	r.head.Store(h + uint64(n))
	return nil
}

// Pop copies the oldest entry into dst (exactly EntrySize bytes) and consumes
// it, or returns ErrEmpty. Consumer side only.
func (r *SPSC) Pop(dst []byte) error {
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
