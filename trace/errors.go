package trace

import (
	"errors"
	"fmt"
	"os"
)

// Sentinel errors (see doc.go).
var (
	// ErrNotPrivileged wraps os.ErrPermission.
	ErrNotPrivileged = fmt.Errorf("trace: insufficient privileges for eBPF tracing (%w)", os.ErrPermission)
	ErrProcessGone   = errors.New("trace: process not found")
	ErrNoCgroup2     = errors.New("trace: no usable cgroup v2 hierarchy")
	ErrEngineAbsent  = errors.New("trace: engine hook symbols absent")
	ErrNotProcess    = errors.New("trace: not a process")
	// ErrUnsupported wraps errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("trace: tracing not supported on this system: %w", errors.ErrUnsupported)
)
