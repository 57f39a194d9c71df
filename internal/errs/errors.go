package errs

import (
	"errors"
	"strings"
)

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

// Nested returns err for use as the cause in another message of the
// package whose prefix is prefix ("vfio: "): its text without that prefix,
// so that the whole message names the package once ("vfio: open
// 0000:00:04.0: IOMMU group of ...", not "vfio: open ...: vfio: IOMMU
// group ..."). errors.Is and errors.As see through it. nil stays nil.
func Nested(prefix string, err error) error {
	if err == nil {
		return nil
	}
	return &nested{prefix: prefix, err: err}
}

type nested struct {
	prefix string
	err    error
}

func (e *nested) Error() string { return strings.TrimPrefix(e.err.Error(), e.prefix) }
func (e *nested) Unwrap() error { return e.err }
