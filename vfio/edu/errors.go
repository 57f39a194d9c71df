package edu

import "errors"

// Errors callers can test for with errors.Is (listed in doc.go).
var (
	// ErrNotEdu is returned by New when BAR0 does not identify as edu.
	ErrNotEdu = errors.New("edu: not an edu device")
	// ErrBadTransfer is returned for a transfer edu cannot do (length,
	// buffer bounds, DMA mask).
	ErrBadTransfer = errors.New("edu: invalid DMA transfer")
	// ErrBusy is returned when a DMA is started while one is running.
	ErrBusy = errors.New("edu: DMA engine busy")
	// ErrTimeout is returned when a DMA does not complete in time.
	ErrTimeout = errors.New("edu: DMA did not complete")
)
