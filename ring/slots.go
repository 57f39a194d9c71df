package ring

import (
	"fmt"
	"math/bits"
)

// cacheLine is the padding unit that keeps the producer's and the consumer's
// fields apart. 128 bytes rather than 64: x86's adjacent-line prefetcher pulls
// cache lines in pairs, so two hot fields 64 bytes apart still bounce.
const cacheLine = 128

// MaxEntries is the largest entry count a descriptor ring accepts (2^31), so
// that counts fit an int32 and index arithmetic never overflows.
const MaxEntries = 1 << 31

// slots is the read-only geometry shared by every ring: the caller's memory
// cut into a power-of-two number of fixed-size entries.
type slots struct {
	mem       []byte
	entrySize int
	n         uint64 // entry count, a power of two
	mask      uint64 // n-1
}

// newSlots validates mem and entrySize: entrySize > 0, len(mem) a multiple of
// entrySize, and the entry count a power of two between 1 and MaxEntries.
func newSlots(mem []byte, entrySize int) (slots, error) {
	if entrySize <= 0 {
		return slots{}, fmt.Errorf("ring: entry size %d: must be positive: %w", entrySize, ErrGeometry)
	}
	if len(mem) == 0 || len(mem)%entrySize != 0 {
		return slots{}, fmt.Errorf("ring: memory of %d bytes is not a non-zero multiple of the %d-byte entry: %w",
			len(mem), entrySize, ErrGeometry)
	}
	n := len(mem) / entrySize
	if n > MaxEntries || bits.OnesCount(uint(n)) != 1 {
		return slots{}, fmt.Errorf("ring: %d entries (%d bytes / %d): count must be a power of two ≤ %d: %w",
			n, len(mem), entrySize, MaxEntries, ErrGeometry)
	}
	return slots{mem: mem, entrySize: entrySize, n: uint64(n), mask: uint64(n - 1)}, nil
}

// entry returns the entry at free-running position pos, capacity-limited so
// that an append cannot spill into the next entry.
func (s *slots) entry(pos uint64) []byte {
	off := int(pos&s.mask) * s.entrySize
	return s.mem[off : off+s.entrySize : off+s.entrySize]
}

// Batch is a run of consecutive ring entries: slots a producer reserved and
// must fill, or entries a consumer may read. It is a small value (no heap
// allocation) and stays valid until it is committed (producer) or released
// (consumer).
type Batch struct {
	s     *slots
	start uint64 // free-running position of the first entry
	n     int
}

// Len is the number of entries in the batch.
func (b Batch) Len() int { return b.n }

// Start is the free-running position of the batch's first entry: positions
// count every entry ever produced, so they tell batches apart across wraps.
func (b Batch) Start() uint64 { return b.start }

// Entry returns the i-th entry of the batch (0 ≤ i < Len) as a slice of the
// ring's memory, entrySize bytes long. It returns nil when i is out of range.
func (b Batch) Entry(i int) []byte {
	if uint(i) >= uint(b.n) {
		return nil
	}
	return b.s.entry(b.start + uint64(i))
}
