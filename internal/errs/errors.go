package errs

import "errors"

var (
	// ErrNotSupported: the kernel, the device or the backend cannot do
	// what was asked (a missing feature, not a failure). It wraps
	// errors.ErrUnsupported, so the standard library's test holds too.
	ErrNotSupported error = &wrapped{msg: "not supported", err: errors.ErrUnsupported}

	// ErrClosed: the object (engine, device, driver, queue, ring, pool)
	// was closed before the call.
	ErrClosed = errors.New("closed")
)

// wrapped is a sentinel whose message is its own but that matches the
// error it wraps too: fmt.Errorf("not supported: %w", errors.ErrUnsupported)
// would read "not supported: unsupported operation".
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }
