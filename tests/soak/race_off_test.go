//go:build !race

package soak_test

// mapSlack is how many more memory mappings the process may hold at the
// end than at the start (the Go runtime maps more heap as it grows; a
// leaked pool or ring adds one per engine, and a soak opens hundreds).
const mapSlack = 32
