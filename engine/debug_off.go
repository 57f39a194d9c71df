//go:build !hcommdebug

package engine

// debug: see debug_on.go (-tags hcommdebug).
const debug = false
