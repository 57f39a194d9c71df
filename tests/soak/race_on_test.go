//go:build race

package soak_test

// mapSlack is how many more memory mappings the process may hold at the
// end than at the start: the race detector's shadow memory grows with the
// heap.
const mapSlack = 256
