package hugepage

import "math/bits"

// Size classes for small and medium blocks. Each class lives in slabs: spans
// of whole 4 KiB units cut into equal objects. Between powers of two there
// are four classes (quarter steps), which bounds the internal waste of a
// block to 25% (12.5% on average), and each class is aligned to the largest
// power of two dividing its size (its slabs start on such a boundary).
// Requests above maxClassSize, or aligned beyond what the fitting class
// offers, go to the large allocator (tlsf.go).

const (
	unitShift    = 12
	unitSize     = 1 << unitShift // the large allocator's granule
	maxClassSize = 32 << 10
	minSlabBytes = 64 << 10
	minSlabObjs  = 8
	classStep    = 16 // classSizeIdx granularity
)

var (
	classSizes  []int
	classAlign  []int
	slabUnits   []uint32 // slab length in units, per class
	slabObjs    []uint32 // objects per slab
	classBySize [maxClassSize / classStep]uint8
)

func init() {
	for s := 16; s <= 128; s += 16 {
		classSizes = append(classSizes, s)
	}
	for p := 128; p < maxClassSize; p *= 2 {
		for q := 5; q <= 8; q++ {
			classSizes = append(classSizes, p*q/4)
		}
	}
	for _, s := range classSizes {
		align := 1 << bits.TrailingZeros(uint(s))
		classAlign = append(classAlign, align)
		sb := max(minSlabBytes, roundUp(minSlabObjs*s, unitSize))
		slabUnits = append(slabUnits, uint32(sb/unitSize))
		slabObjs = append(slabObjs, uint32(sb/s))
	}
	c := 0
	for i := range classBySize {
		size := (i + 1) * classStep
		for classSizes[c] < size {
			c++
		}
		classBySize[i] = uint8(c)
	}
}

// classFor returns the class for a block of size bytes (a multiple of
// align) aligned to align, or -1 when the large allocator must serve it. The
// loop runs at most a few steps: every fourth class is a power of two.
func classFor(size, align int) int {
	if size > maxClassSize {
		return -1
	}
	for c := int(classBySize[(size-1)/classStep]); c < len(classSizes); c++ {
		if classAlign[c] >= align {
			return c
		}
	}
	return -1
}

// slabAlign is the alignment a class's slabs start on, in bytes.
func slabAlign(c int) int { return max(classAlign[c], unitSize) }
