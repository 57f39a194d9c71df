package trace

import (
	"errors"
	"fmt"
	"os"

	"github.com/hcomm-go/hcomm/internal/errs"
)

// Sentinel errors (see doc.go).
var (
	// ErrNotPrivileged wraps os.ErrPermission.
	ErrNotPrivileged = fmt.Errorf("trace: insufficient privileges for eBPF tracing (%w)", os.ErrPermission)
	ErrProcessGone   = errors.New("trace: process not found")
	ErrNoCgroup2     = errors.New("trace: no usable cgroup v2 hierarchy")
	ErrEngineAbsent  = errors.New("trace: engine hook symbols absent")
	ErrNotProcess    = errors.New("trace: not a process")
	// ErrNotSupported: this system cannot run the tracer. hcomm's shared
	// sentinel (package internal/errs), the same value as
	// engine.ErrNotSupported; it wraps errors.ErrUnsupported.
	ErrNotSupported = errs.ErrNotSupported
)
