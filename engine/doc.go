// Package engine is hcomm's public transfer API: a pool of host memory, one
// target to move it to and from — an HDMA device over vfio (vfio-mock by
// default), a file through io_uring, or host memory — and batched,
// zero-allocation submission with exactly-once completion callbacks.
//
// The seed's flow, the Go way:
//
//	eng, _ := engine.Open(engine.Config{})      // 256 MiB pool, depth 64, alignment 64, vfio-mock
//	buf, _ := eng.Alloc(n)                       // pool block, already DMA-mapped
//	copy(buf.Bytes(), payload)                   // the only CPU copy
//	id, _ := eng.Submit(engine.Transfer{Src: engine.Host(buf), Dst: engine.DeviceAt(0), Len: n,
//		Callback: func(r engine.Result) { ... }}) // runs exactly once, on the reaper
//	_ = eng.Wait(ctx, id)                        // or SubmitBatch + Drain
//	_ = eng.Free(buf)
//	_ = eng.Close(ctx)
//
// # The life of a transfer
//
// Submit validates the transfer (block generation, bounds, alignment: no
// lock, no syscall), reserves a slot in a staging ring (a ring.MPSC of
// 64-byte entries, one CAS), fills it and publishes it (one CAS). Then the
// submitter tries to become the engine's owner (one CAS): the owner drains
// every staged entry into the target — descriptors into the device's
// submission ring, SQEs into io_uring — and publishes them with ONE
// doorbell (an SQ_TAIL store, or one io_uring_enter). A submitter that
// loses the CAS leaves its entry to the current owner, which drains again
// before letting go: concurrent submitters share doorbells (group commit).
// Transfers of at most Config.CPUThreshold bytes host→device are copied by
// the submitter straight into device memory (BAR2) instead (the CPU path);
// the memory target always copies on the submitter.
//
// The reaper (one goroutine, or the caller of Poll in ModePoll) collects
// completions in batches, runs each callback exactly once — success, device
// error, timeout after a stall, or cancellation at Close — and releases the
// staging slot. When idle it spins for Config.Spin (50µs), then sleeps in
// io_uring on the device's interrupt eventfd (or the file ring) and a wake
// eventfd: an idle engine uses no CPU. Device resets and stalls are
// recovered (hdma.Driver.Recover) and every transfer they catch fails once.
//
// QueueDepth bounds the transfers in flight; beyond it Submit returns
// ErrQueueFull and SubmitContext waits. IDs carry a sequence number, so an
// old ID is ErrStaleID, never another transfer's result. Stats counts
// without a shared atomic per transfer (the owner's plain counters).
//
// Observability: hookSubmitBatch and hookReapBatch are tiny no-inline
// functions called once per batch, with stable symbol names for uprobes
// (see hooks.go and docs/engine.md).
//
// # Errors
//
// Sentinel errors for errors.Is: ErrBadConfig (every invalid Config field,
// named with its allowed range), ErrClosed, ErrUnsupported, ErrQueueFull,
// ErrBadTransfer, ErrForeignBlock, ErrFreedBlock, ErrOutOfBounds,
// ErrAlignment, ErrStaleID, ErrUnknownID; completion errors (Result.Err,
// Wait) ErrDevice (wrapping hdma.ErrIOMMUFault, ErrDevMemBounds,
// ErrBadDescriptor, ErrDeviceReset, ErrDeviceError), ErrTimeout (wrapping
// hdma.ErrTimeout), ErrCanceled, ErrIO (wrapping the errno) and ErrShortIO.
// Pool errors from Alloc wrap the hugepage sentinels.
package engine
