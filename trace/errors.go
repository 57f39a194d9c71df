package trace

import (
	"errors"
	"fmt"
)

// Sentinel errors (see doc.go).
var (
	ErrNotPrivileged = errors.New("trace: insufficient privileges for eBPF tracing")
	ErrProcessGone   = errors.New("trace: process not found")
	ErrNoCgroup2     = errors.New("trace: no usable cgroup v2 hierarchy")
	ErrEngineAbsent  = errors.New("trace: engine hook symbols absent")
	ErrNotProcess    = errors.New("trace: not a process")
	// ErrUnsupported wraps errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("trace: tracing not supported on this system: %w", errors.ErrUnsupported)
)
