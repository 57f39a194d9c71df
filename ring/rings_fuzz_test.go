package ring

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzRingOps drives SPSC and MPSC rings with a random sequence of
// reserve/commit/peek/release operations (one goroutine) and checks every
// result against a plain slice model: what is published comes out in order,
// full and empty are reported exactly when the model says so, and errors are
// sentinels, never panics.
func FuzzRingOps(f *testing.F) {
	f.Add([]byte{0, 3, 1, 2, 5, 3, 2})
	f.Add([]byte{0, 8, 0, 8, 1, 1, 2, 16, 3, 16, 0, 1})
	f.Add([]byte{0, 200, 3, 7, 2, 0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		for name, r := range newRings(t, 8, 8) {
			var model []uint64 // published, unconsumed
			var pending []Batch
			var next, peeked uint64
			peekedN := 0
			for i := 0; i+1 < len(ops); i += 2 {
				arg := int(ops[i+1])
				switch ops[i] % 4 {
				case 0: // reserve arg%10 (0 and 9 are invalid sizes for 8 slots)
					k := arg % 10
					b, err := r.Reserve(k)
					reserved := 0
					for _, p := range pending {
						reserved += p.Len()
					}
					free := 8 - len(model) - reserved
					switch {
					case k < 1 || k > 8:
						if !errors.Is(err, ErrBatchSize) {
							t.Fatalf("%s: Reserve(%d): %v, want ErrBatchSize", name, k, err)
						}
					case k > free:
						if !errors.Is(err, ErrFull) {
							t.Fatalf("%s: Reserve(%d) with %d free: %v, want ErrFull", name, k, free, err)
						}
					case err != nil:
						t.Fatalf("%s: Reserve(%d) with %d free: %v", name, k, free, err)
					default:
						for j := 0; j < k; j++ {
							binary.LittleEndian.PutUint64(b.Entry(j), next)
							next++
						}
						pending = append(pending, b)
					}
				case 1: // commit the oldest reservation
					if len(pending) == 0 {
						if err := r.Commit(Batch{}); !errors.Is(err, ErrCommit) {
							t.Fatalf("%s: Commit(zero): %v", name, err)
						}
						continue
					}
					b := pending[0]
					pending = pending[1:]
					if err := r.Commit(b); err != nil {
						t.Fatalf("%s: Commit: %v", name, err)
					}
					for j := 0; j < b.Len(); j++ {
						model = append(model, b.Start()+uint64(j))
					}
				case 2: // peek arg%10
					got := r.Peek(arg % 10)
					want := min(arg%10, len(model))
					if got.Len() != want {
						t.Fatalf("%s: Peek(%d): %d entries, model has %d", name, arg%10, got.Len(), len(model))
					}
					for j := 0; j < got.Len(); j++ {
						if v := binary.LittleEndian.Uint64(got.Entry(j)); v != model[j] {
							t.Fatalf("%s: entry %d = %d, model %d", name, j, v, model[j])
						}
					}
					peeked, peekedN = got.Start(), got.Len()
				case 3: // release arg%10
					n := arg % 10
					err := r.Release(n)
					if n > peekedN {
						if !errors.Is(err, ErrRelease) {
							t.Fatalf("%s: Release(%d) after peeking %d: %v, want ErrRelease", name, n, peekedN, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s: Release(%d): %v", name, n, err)
					}
					model = model[n:]
					peeked += uint64(n)
					peekedN -= n
				}
			}
			_ = peeked
		}
	})
}

// FuzzCompletionGeometry: any geometry either is refused with ErrGeometry
// or gives a working writer/consumer pair.
func FuzzCompletionGeometry(f *testing.F) {
	f.Add(256, 16, 10)
	f.Add(64, 64, 0)
	f.Add(3, 16, 9)
	f.Fuzz(func(t *testing.T, memLen, entrySize, phaseOff int) {
		if memLen < 0 || memLen > 1<<16 {
			return
		}
		mem := make([]byte, memLen)
		cr, err1 := NewCompletionRing(mem, entrySize, phaseOff)
		cw, err2 := NewCompletionWriter(mem, entrySize, phaseOff)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("consumer %v, writer %v: the two sides disagree", err1, err2)
		}
		if err1 != nil {
			if !errors.Is(err1, ErrGeometry) {
				t.Fatalf("refusal %v does not wrap ErrGeometry", err1)
			}
			return
		}
		e := make([]byte, entrySize)
		mark := -1 // a byte outside the 32-bit word that holds the phase
		for i := 0; i < entrySize && mark < 0; i++ {
			if i < phaseOff&^3 || i >= phaseOff&^3+4 {
				mark = i
			}
		}
		for round := 0; round < 3*cr.Cap(); round++ {
			if mark >= 0 {
				e[mark] = byte(round)
			}
			werr := cw.Write(e)
			if cr.Cap() == 1 {
				if !errors.Is(werr, ErrFull) {
					t.Fatalf("one-slot ring accepted a write: %v", werr)
				}
				return
			}
			if werr != nil {
				t.Fatalf("round %d: %v", round, werr)
			}
			b := cr.Peek(cr.Cap())
			if b.Len() != 1 || (mark >= 0 && b.Entry(0)[mark] != byte(round)) {
				t.Fatalf("round %d: %d ready", round, b.Len())
			}
			if err := cr.Release(1); err != nil {
				t.Fatal(err)
			}
			if err := cw.SetHead(cr.Head()); err != nil {
				t.Fatal(err)
			}
		}
	})
}
