package ring

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// phaseLayout locates the phase bit: bit 0 of the little-endian uint16 at
// phaseOffset in each entry. The bit is read and written through the aligned
// 32-bit word that contains it (Go has no 16-bit atomics; on little-endian
// machines the uint16 at offset o is bits 8*(o%4)... of the word at o&^3).
type phaseLayout struct {
	s          slots
	wordOff    int    // offset of the aligned uint32 holding the phase, within an entry
	phaseShift uint   // bit position of the phase bit within that word
	n32, mask  uint32 // entry count and count-1 as uint32 (head/tail values)
}

func newPhaseLayout(mem []byte, entrySize, phaseOffset int) (phaseLayout, error) {
	s, err := newSlots(mem, entrySize)
	if err != nil {
		return phaseLayout{}, err
	}
	if entrySize%4 != 0 {
		return phaseLayout{}, fmt.Errorf("ring: completion entry size %d: must be a multiple of 4: %w", entrySize, ErrGeometry)
	}
	if phaseOffset < 0 || phaseOffset%2 != 0 || phaseOffset+2 > entrySize {
		return phaseLayout{}, fmt.Errorf("ring: phase offset %d in %d-byte entries: must be even and leave room for a uint16: %w",
			phaseOffset, entrySize, ErrGeometry)
	}
	if uintptr(unsafe.Pointer(&mem[0]))%4 != 0 {
		return phaseLayout{}, fmt.Errorf("ring: completion memory at %p is not 4-byte aligned: %w", &mem[0], ErrGeometry)
	}
	return phaseLayout{
		s:          s,
		wordOff:    phaseOffset &^ 3,
		phaseShift: uint(phaseOffset&3) * 8,
		n32:        uint32(s.n),
		mask:       uint32(s.mask),
	}, nil
}

// word returns the aligned 32-bit word holding the phase bit of slot i.
func (p *phaseLayout) word(i uint32) *uint32 {
	off := int(i)*p.s.entrySize + p.wordOff
	return (*uint32)(unsafe.Pointer(&p.s.mem[off]))
}

// CompletionRing is the consumer side of an NVMe-style completion ring: a
// producer (a device) writes entries in ring order, each
// stamped with the phase of its pass over the ring (1 on the first pass, then
// inverted at each wrap); the consumer takes the entries whose phase equals
// the one it expects. No shared index is read: the phase bit in the entry is
// the publication. The consumer tells the producer which entries it has
// consumed through Head (the value a driver writes to a CQ_HEAD doorbell).
//
// One goroutine at a time may call the methods of a CompletionRing.
type CompletionRing struct {
	p       phaseLayout
	head    uint32 // slot index of the oldest unconsumed entry, in [0, Cap)
	phase   uint32 // phase expected at head: 1 on the first pass
	scanned uint32 // entries from head already seen ready (Peek's cache)
	peeked  uint32 // entries the last Peek returned (what Release may consume)
}

// NewCompletionRing lays a completion ring over mem: len(mem)/entrySize
// entries (a power of two), entrySize a multiple of 4, the phase bit being
// bit 0 of the little-endian uint16 at phaseOffset (even) in each entry, mem
// 4-byte aligned. For HDMA: entrySize 16, phaseOffset 10. The ring starts
// empty: NewCompletionRing zeroes mem, so create it before the producer
// starts writing.
func NewCompletionRing(mem []byte, entrySize int, phaseOffset int) (*CompletionRing, error) {
	p, err := newPhaseLayout(mem, entrySize, phaseOffset)
	if err != nil {
		return nil, err
	}
	clear(mem)
	return &CompletionRing{p: p, phase: 1}, nil
}

// Cap is the number of entries in the ring.
func (r *CompletionRing) Cap() int { return int(r.p.n32) }

// Head is the slot index, in [0, Cap), of the oldest entry not yet released:
// the value to write to the producer's head doorbell after Release.
func (r *CompletionRing) Head() uint32 { return r.head }

// Phase is the phase bit the consumer expects at Head (1 on the first pass).
func (r *CompletionRing) Phase() uint32 { return r.phase }

// Peek returns up to max ready entries from Head, oldest first, without
// consuming them; Len 0 when none is ready. The batch may wrap the end of
// the memory (Entry handles it). Peek never blocks and never allocates.
func (r *CompletionRing) Peek(max int) Batch {
	if max > int(r.p.n32) {
		max = int(r.p.n32)
	}
	for int(r.scanned) < max {
		i := r.head + r.scanned
		expect := r.phase
		if i >= r.p.n32 { // past the end: the producer's next pass
			i -= r.p.n32
			expect ^= 1
		}
		// Acquire: pairs with the producer's store of the phase word,
		// which follows its writes of the rest of the entry; seeing the
		// expected phase means the whole entry is visible.
		w := atomic.LoadUint32(r.p.word(i))
		if (w>>r.p.phaseShift)&1 != expect {
			break
		}
		r.scanned++
	}
	n := int(r.scanned)
	if n > max {
		n = max
	}
	if n < 0 {
		n = 0
	}
	r.peeked = uint32(n)
	return Batch{s: &r.p.s, start: uint64(r.head), n: n}
}

// Release consumes the n oldest ready entries (n ≤ what Peek returned),
// flipping the expected phase when the head wraps. Then write Head to the
// producer's doorbell so it can reuse the slots.
func (r *CompletionRing) Release(n int) error {
	if n < 0 || n > int(r.peeked) {
		return fmt.Errorf("ring: release %d completions, %d were peeked: %w", n, r.peeked, ErrRelease)
	}
	r.peeked -= uint32(n)
	r.scanned -= uint32(n)
	h := r.head + uint32(n)
	if h >= r.p.n32 {
		h -= r.p.n32
		r.phase ^= 1
	}
	r.head = h
	return nil
}

// Reset zeroes the ring memory and returns the consumer to its initial state
// (head 0, expected phase 1), as after a device reset. The producer must be
// stopped and reset too.
func (r *CompletionRing) Reset() {
	clear(r.p.s.mem)
	r.head, r.phase, r.scanned, r.peeked = 0, 1, 0, 0
}
