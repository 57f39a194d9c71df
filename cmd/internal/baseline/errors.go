package baseline

import (
	"errors"

	"github.com/hcomm-go/hcomm/internal/errs"
)

// Errors callers can test for with errors.Is.
var (
	ErrBadConfig   = errors.New("baseline: invalid configuration")
	ErrBadTransfer = errors.New("baseline: invalid transfer")
	// ErrClosed is hcomm's shared sentinel (package internal/errs).
	ErrClosed = errs.ErrClosed
)
