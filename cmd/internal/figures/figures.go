// Package figures is the arithmetic and the formatting that the tools'
// reports share (hcomm-bench, hcomm-demo): medians, quantiles, byte sizes.
// One definition each, so that two tables never mean different things by
// "median" or print the same size two ways.
package figures

import (
	"fmt"
	"slices"
)

// Median is the middle value of v, the mean of the two middle ones when
// len(v) is even; 0 for no values. v is not modified.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return m
}

// Quantile is the q-quantile (0 ≤ q ≤ 1) of sorted, an ascending slice:
// the value at rank ⌊q·n⌋ (the largest for q = 1); 0 for no values.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// Size formats a byte count in the largest binary unit that divides it:
// "4 KiB", "2 MiB", "1 GiB", "100 B".
func Size(n int) string {
	const kib, mib, gib = 1 << 10, 1 << 20, 1 << 30
	switch {
	case n >= gib && n%gib == 0:
		return fmt.Sprintf("%d GiB", n/gib)
	case n >= mib && n%mib == 0:
		return fmt.Sprintf("%d MiB", n/mib)
	case n >= kib && n%kib == 0:
		return fmt.Sprintf("%d KiB", n/kib)
	}
	return fmt.Sprintf("%d B", n)
}
