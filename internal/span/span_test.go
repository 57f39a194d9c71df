package span

import (
	"math/rand/v2"
	"testing"
)

func TestAllocFreeContains(t *testing.T) {
	s := New(1<<20, 64)
	a, ok := s.Alloc(100)
	if !ok || a.Off != 0 || a.Len != 128 {
		t.Fatalf("first alloc: %+v %v", a, ok)
	}
	b, _ := s.Alloc(64)
	cases := []struct {
		off, n uint64
		want   bool
	}{
		{0, 128, true}, {0, 129, false}, {127, 1, true}, {128, 64, true}, {100, 64, false}, {192, 1, false}, {1 << 30, 1, false},
	}
	for _, c := range cases {
		if got := s.Contains(c.off, c.n); got != c.want {
			t.Errorf("Contains(%d, %d) = %v, want %v", c.off, c.n, got, c.want)
		}
	}
	if s.Free(a.Off+1) || !s.Free(a.Off) || s.Free(a.Off) {
		t.Error("Free: only the exact start frees, once")
	}
	if c, _ := s.Alloc(64); c.Off != 0 {
		t.Errorf("first fit reuses the gap: got %+v", c)
	}
	if _, ok := s.Alloc(2 << 20); ok {
		t.Error("an allocation larger than the space succeeded")
	}
	_ = b
}

// TestRandom: random allocations stay disjoint, aligned and inside the
// space, and a full space refuses.
func TestRandom(t *testing.T) {
	s := New(1<<16, 64)
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint64]uint64{}
	for range 5000 {
		if rng.IntN(2) == 0 || len(live) == 0 {
			if r, ok := s.Alloc(uint64(rng.IntN(4096) + 1)); ok {
				if r.Off%64 != 0 || r.Off+r.Len > s.Size() {
					t.Fatalf("range %+v misaligned or outside", r)
				}
				for o, n := range live {
					if r.Off < o+n && o < r.Off+r.Len {
						t.Fatalf("range %+v overlaps [%d,+%d)", r, o, n)
					}
				}
				live[r.Off] = r.Len
			}
			continue
		}
		for o := range live {
			if !s.Contains(o, live[o]) || !s.Free(o) {
				t.Fatalf("live range %d lost", o)
			}
			delete(live, o)
			break
		}
	}
}

// TestHoles: first fit never places a request in a hole too small for it.
func TestHoles(t *testing.T) {
	s := New(1<<20, 64)
	var rs []Range
	for range 16 {
		r, ok := s.Alloc(65536)
		if !ok {
			t.Fatal("alloc failed before the space was full")
		}
		rs = append(rs, r)
	}
	if _, ok := s.Alloc(1); ok {
		t.Fatal("alloc succeeded in a full space")
	}
	for i := 0; i < 16; i += 2 {
		if !s.Free(rs[i].Off) {
			t.Fatalf("free %#x", rs[i].Off)
		}
	}
	if _, ok := s.Alloc(65537); ok {
		t.Fatal("a 65537-byte request fit in 64 KiB holes")
	}
}
