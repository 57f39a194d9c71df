package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
)

// errHead: a consumer head value that the writer cannot accept (out of
// range, or beyond what was produced).
var errHead = errors.New("ring: invalid consumer head")

// CompletionWriter is the producer side of the completion ring layout, the
// device's half, used by the tests as the device (vfio-mock has its own): it writes entries in ring order with the current phase, inverts the
// phase at each wrap, and never overwrites an entry the consumer has not
// released (it reports ErrFull instead). As in NVMe, head and tail are slot
// indexes, so one slot always stays empty: the ring holds Cap-1 entries.
//
// Write, Free and Reset belong to one producer goroutine; SetHead (the head
// doorbell) may be called from another goroutine, one caller at a time.
type CompletionWriter struct {
	p     phaseLayout
	tail  atomic.Uint32 // next slot to write; read by SetHead to validate
	phase uint32        // phase of the current pass, starting at 1
	head  atomic.Uint32 // consumer's released head, as written to the doorbell
}

// NewCompletionWriter lays the producer over mem with the same geometry rules
// as NewCompletionRing. It does not touch mem: the ring must start zeroed (the
// consumer's NewCompletionRing zeroes it).
func NewCompletionWriter(mem []byte, entrySize, phaseOffset int) (*CompletionWriter, error) {
	p, err := newPhaseLayout(mem, entrySize, phaseOffset)
	if err != nil {
		return nil, err
	}
	return &CompletionWriter{p: p, phase: 1}, nil
}

// Cap is the number of slots; at most Cap-1 entries are outstanding.
func (w *CompletionWriter) Cap() int { return int(w.p.n32) }

// Tail is the slot the next entry goes to.
func (w *CompletionWriter) Tail() uint32 { return w.tail.Load() }

// Phase is the phase the next entry is written with.
func (w *CompletionWriter) Phase() uint32 { return w.phase }

// SetHead records the consumer's head (a CQ_HEAD doorbell write). It must be
// a slot index in [0, Cap) between the previous head and the tail, inclusive;
// anything else returns errHead and changes nothing.
func (w *CompletionWriter) SetHead(head uint32) error {
	old := w.head.Load()
	// Acquire on tail: only entries written so far can have been consumed.
	tail := w.tail.Load()
	if head >= w.p.n32 || (head-old)&w.p.mask > (tail-old)&w.p.mask {
		return fmt.Errorf("ring: completion head %d (previous %d, tail %d, %d slots): %w", head, old, tail, w.p.n32, errHead)
	}
	// Release: the consumer read the entries before head before telling
	// us; the writer's Load of head (acquire) orders its overwrites after.
	w.head.Store(head)
	return nil
}

// Free is the number of entries that can be written before the ring is full.
func (w *CompletionWriter) Free() int {
	t := w.tail.Load()
	return int((w.head.Load() - t - 1) & w.p.mask)
}

// Write copies entry (exactly the entry size) into the next slot with the
// current phase in its phase bit (whatever entry held there is replaced), or
// returns ErrFull when that slot has not been released by the consumer.
func (w *CompletionWriter) Write(entry []byte) error {
	if len(entry) != w.p.s.entrySize {
		return fmt.Errorf("ring: completion of %d bytes into %d-byte entries: %w", len(entry), w.p.s.entrySize, ErrEntrySize)
	}
	t := w.tail.Load()
	next := (t + 1) & w.p.mask
	// Acquire: pairs with SetHead's store; the consumer is done with slot t.
	if next == w.head.Load() {
		return ErrFull
	}
	dst := w.p.s.entry(uint64(t))
	wo := w.p.wordOff
	// Everything but the phase word, with plain writes...
	copy(dst[:wo], entry[:wo])
	copy(dst[wo+4:], entry[wo+4:])
	word := binary.LittleEndian.Uint32(entry[wo:])
	word = word&^(1<<w.p.phaseShift) | w.phase<<w.p.phaseShift
	// The tail moves before the entry is published, so that a consumer who
	// sees the entry and rings the doorbell at once never gets its head
	// refused by SetHead as being beyond the tail.
	w.tail.Store(next)
	// ...then the phase word with one atomic store. Release: the plain
	// writes above happen before it, so a consumer that loads the new
	// phase sees the whole entry.
	atomic.StoreUint32(w.p.word(t), word)
	if next == 0 {
		w.phase ^= 1
	}
	return nil
}

// Reset returns the writer to its initial state (tail 0, head 0, phase 1).
// It does not touch the memory; the consumer's Reset zeroes it.
func (w *CompletionWriter) Reset() {
	w.tail.Store(0)
	w.head.Store(0)
	w.phase = 1
}
