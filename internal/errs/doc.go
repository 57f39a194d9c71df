// Package errs defines the sentinel errors that several hcomm packages
// share, once, so that one errors.Is test holds whichever layer failed: a
// closed vfio device under an engine, a kernel without an io_uring opcode
// under the file backend.
//
// Callers never import it. Each package re-exports the sentinels it
// returns under the same name (var ErrNotSupported = errs.ErrNotSupported)
// and lists them in its doc.go, so errors.Is(err, engine.ErrClosed) and
// errors.Is(err, vfio.ErrClosed) are the same test. cilium/ebpf keeps its
// ErrNotSupported the same way.
//
// A shared sentinel's text carries no package prefix; the package that
// returns it wraps it with its own prefix and context, e.g.
// "vfio: 0000:00:04.0: reset: not supported". Nested keeps that prefix to
// one when a package's error becomes the cause of another of its own.
package errs
