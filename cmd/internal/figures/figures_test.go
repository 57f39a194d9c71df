package figures

import (
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := slices.Clone(tc.v)
		if got := Median(tc.v); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.v, got, tc.want)
		}
		if !slices.Equal(in, tc.v) {
			t.Errorf("Median reordered its input: %v", tc.v)
		}
	}
}

func TestQuantile(t *testing.T) {
	s := make([]float64, 100)
	for i := range s {
		s[i] = float64(i + 1)
	}
	for _, tc := range []struct{ q, want float64 }{{0, 1}, {0.5, 51}, {0.99, 100}, {0.999, 100}, {1, 100}} {
		if got := Quantile(s, tc.q); got != tc.want {
			t.Errorf("Quantile(1..100, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile of nothing is not 0")
	}
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 B"}, {100, "100 B"}, {4096, "4 KiB"}, {6144, "6 KiB"}, {1 << 20, "1 MiB"}, {3 << 19, "1536 KiB"}, {16 << 20, "16 MiB"}, {1 << 30, "1 GiB"}} {
		if got := Size(tc.n); got != tc.want {
			t.Errorf("Size(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
