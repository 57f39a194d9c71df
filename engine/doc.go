// Package engine is hcomm's public transfer API and its core: a pool of host
// memory, the backends that move it (up to MaxBackends at once: devices,
// files, peers), and batched, zero-allocation submission with exactly-once
// completion callbacks. The core owns ordering,
// backpressure, IDs and completion; a backend (the contract: package
// github.com/hcomm-go/hcomm/backend) owns its device:
// backend/hdmadev (an HDMA device over vfio: kernel VFIO or vfio-mock),
// backend/uringfile (a file through io_uring), backend/memory (host copies),
// or any implementation of the interface. The engine is given its backends
// explicitly and links none itself. With several (Config.Backends,
// AddBackend), every arena of the pool is mapped into each, a transfer goes
// to the backend its endpoints name (Targets), and Copy moves data between
// two of them through pool blocks (a path: file → device → peer).
//
// The hcomm flow, the Go way:
//
//	dev, _ := mock.New(mock.Config{})            // a software HDMA device (vfio.OpenPCI on hardware)
//	be, _ := hdmadev.New(dev, hdmadev.Config{CloseDevice: true})
//	eng, _ := engine.Open(engine.Config{Backend: be}) // 256 MiB pool, depth 64, alignment 64
//	buf, _ := eng.Alloc(n)                       // pool block, already mapped into the backend
//	copy(buf.Bytes(), payload)                   // the only CPU copy
//	id, _ := eng.Submit(engine.Transfer{Src: engine.Host(buf), Dst: engine.DeviceAt(0), Len: n,
//		Callback: func(r engine.Result) { ... }}) // runs exactly once, on the reaper
//	_ = eng.Wait(ctx, id)                        // or SubmitBatch + Drain
//	_ = eng.Free(buf)
//	_ = eng.Shutdown(ctx)                        // or Close(): cancel what is in flight
//
// # The life of a transfer
//
// Submit validates the transfer (block generation, bounds, alignment: no
// lock, no syscall), reserves a slot in a staging ring (a ring.MPSC of
// 64-byte entries, one CAS), fills it and publishes it (one CAS). Then the
// submitter tries to become the engine's owner (one CAS): the owner drains
// every staged entry into the backend (Backend.Forward: descriptors into a
// device's submission ring, SQEs into io_uring) and publishes them with ONE
// doorbell (Backend.Flush: an SQ_TAIL store, or one io_uring_enter). A submitter that
// loses the CAS leaves its entry to the current owner, which drains again
// before letting go: concurrent submitters share doorbells (group commit).
// Transfers a backend marks Inline (the HDMA backend's CPU path into BAR2,
// every memory copy) are carried out by the submitter (Backend.Execute).
//
// The reaper (one goroutine, or the caller of Poll in ModePoll) collects
// completions in batches, runs each callback exactly once — success, device
// error, timeout after a stall, or cancellation at Close — and releases the
// staging slot. When idle it spins for Config.Spin (50µs), then sleeps in
// io_uring on the device's interrupt eventfd (or the file ring) and a wake
// eventfd: an idle engine uses no CPU. Backends recover from device resets
// and stalls (Backend.Check) and every transfer they catch fails once.
//
// Callbacks must be short and must not block. One that panics: in
// ModePoll the panic comes out of the call that ran it (Poll, Wait, Drain,
// SubmitContext, Shutdown), the engine having recorded it as run, and the
// engine stays usable; in ModeReaper the same holds on a goroutine that
// reaped in Wait, Drain or SubmitContext, while on the reaper goroutine it
// crashes the program, as a panic on any goroutine does. Shutdown(ctx) waits for a blocked callback, and for
// file I/O the kernel cannot cancel, only until ctx ends: it then returns
// an error wrapping ctx's and the engine finishes closing by itself.
//
// Block memory lives as long as the engine: after Close (or Free) a slice
// from Block.Bytes is dangling, and touching it faults the process.
// -tags hcommdebug turns Bytes after Free or Close into a panic.
//
// The pool starts at Config.PoolSize and, with Config.PoolMax, grows by whole
// arenas, each mapped into the backend before its first block is handed
// out; idle arenas are unmapped and given back after Config.PoolIdle.
//
// QueueDepth bounds the transfers in flight; beyond it Submit returns
// ErrQueueFull and SubmitContext waits. IDs carry a sequence number, so an
// old ID is ErrStaleID (once a newer transfer in its slot completed; until
// then Wait still answers with the old transfer's own result), never
// another transfer's result. Stats counts
// without a shared atomic per transfer (the owner's plain counters).
//
// Observability: hookSubmitBatch and hookReapBatch are tiny no-inline
// functions called once per batch, with stable symbol names for uprobes
// (see hooks.go and docs/engine.md).
//
// # Errors
//
// Sentinel errors for errors.Is: ErrBadConfig (every invalid Config field,
// named with its allowed range), ErrClosed, ErrNotSupported (wraps
// errors.ErrUnsupported), ErrCloseInBackground (Shutdown's context ended
// before the engine had closed), ErrQueueFull,
// ErrBadTransfer, ErrForeignBlock, ErrFreedBlock, ErrOutOfBounds, ErrBusy
// (Unregister of caller memory that transfers in flight use: Register),
// ErrAlignment, ErrStaleID, ErrUnknownID; completion errors (Result.Err,
// Wait) ErrDevice (wrapping the backend's cause, e.g. hdma.ErrIOMMUFault),
// ErrTimeout, ErrCanceled, ErrIO (wrapping the errno) and ErrShortIO.
// Pool errors from Alloc wrap the hugepage sentinels.
package engine
