package baseline

import "errors"

// Errors callers can test for with errors.Is.
var (
	ErrBadConfig   = errors.New("baseline: invalid configuration")
	ErrBadTransfer = errors.New("baseline: invalid transfer")
	ErrClosed      = errors.New("baseline: closed")
)
