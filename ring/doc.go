// Package ring holds hcomm's lock-free rings: descriptor rings laid over
// caller memory (so a ring can live in a hugepage arena that a device reads
// and writes), and hcomm's own io_uring layer.
//
// # Descriptor rings
//
// Every ring cuts the caller's memory into a power-of-two number of
// fixed-size entries (64-byte descriptors, 16-byte completions, ...). The
// ring keeps its indexes in its own Go struct, producer and consumer fields
// on separate cache lines, each side holding a cached copy of the other's
// index that it refreshes only when the ring looks full (producer) or empty
// (consumer). Work moves in batches: a producer reserves k slots, fills them
// and publishes them with one store; a consumer peeks at up to max entries
// and releases them with one store. Full and empty are reported (ErrFull, a
// zero-length Batch, ErrEmpty), never waited on. No operation allocates.
//
//   - SPSC: one producer goroutine, one consumer goroutine.
//   - MPSC: any number of producers (a CAS on the tail reserves a batch; a
//     per-slot marker publishes it), one consumer — the engine's submission
//     side.
//   - CompletionRing / CompletionWriter: the two sides of an NVMe-style
//     completion ring whose entries carry a phase bit (bit 0 of the
//     little-endian uint16 at a given offset; HDMA: 16-byte entries, offset
//     10). The phase written flips on every pass, so the consumer tells new
//     entries from old without a shared index; it hands consumed slots back
//     through Head, the value of a CQ_HEAD doorbell.
//
// Memory ordering. Go's sync/atomic operations are sequentially consistent,
// which is stronger than needed; the comments beside each atomic say which
// acquire/release pairing the algorithm relies on: a producer's plain writes
// into entries happen before the atomic store that publishes them (tail,
// marker, or phase word), and a consumer reads them only after the atomic
// load that observes that store; a consumer's reads happen before the store
// of its head, and a producer overwrites a slot only after loading a head
// past it. Memory shared with a real device adds the device's own ordering
// (DMA, MMIO doorbells) on top; these rings only cover CPU-to-CPU ordering.
// The phase bit is read and written through the aligned 32-bit word that
// contains it, which assumes a little-endian machine (amd64, arm64).
//
// # io_uring
//
// Uring is hcomm's own io_uring layer over golang.org/x/sys/unix (no cgo,
// no linkname): NewUring(UringConfig) sets every io_uring_setup parameter,
// maps the rings (one mapping with IORING_FEAT_SINGLE_MMAP), tries the
// modern flags (NO_SQARRAY, DEFER_TASKRUN, SINGLE_ISSUER, COOP_TASKRUN,
// CQSIZE) and drops them newest-first on EINVAL, recording each refusal
// (Fallbacks), registers the ring fd and probes the opcodes (Probe). GetSQE
// hands out a kernel-shared entry, the SQE Prep methods fill it (NOP,
// READ/WRITE, READ_FIXED/WRITE_FIXED, READV/WRITEV, FSYNC, SEND/RECV,
// SEND_ZC, POLL_ADD, an eventfd READ; Uring.PrepTimeout and
// Uring.PrepLinkTimeout own their timespec memory), Submit publishes a batch
// with at most one io_uring_enter, PeekCQEs reaps completions in batches,
// SubmitAndWait(Timeout) sleeps for them. Stats counts submissions,
// completions and every io_uring_enter. RegisterBuffers (hugepage arenas) and
// RegisterFiles register fixed resources.
//
// Threading: by default the ring is bound to the OS thread of the goroutine
// that called NewUring (it calls runtime.LockOSThread): SINGLE_ISSUER,
// DEFER_TASKRUN and the registered ring fd are per thread, so only that
// goroutine may use the ring, and it must Close it. Other callers get
// ErrWrongThread. UringConfig.Unbound gives up those features for a ring any
// one goroutine at a time may use. A Uring is never safe for concurrent use.
//
// System calls: a submit-only enter (and one that only runs deferred task
// work) uses RawSyscall6, which skips the Go scheduler's bookkeeping because
// it cannot sleep; an enter that waits for completions uses Syscall6, so the
// scheduler can run other goroutines meanwhile. EINTR is retried.
//
// Sentinel errors, for errors.Is — descriptor rings: ErrGeometry, ErrFull,
// ErrEmpty, ErrBatchSize, ErrCommit, ErrRelease, ErrHead, ErrEntrySize;
// io_uring: ErrConfig, ErrClosed, ErrWrongThread, ErrSQFull, ErrBusy, ErrNotFromRing,
// ErrUnsupported, ErrTimeout, ErrMemlock. Kernel errors are wrapped as
// unix.Errno values, and a failed operation's CQE.Err is a syscall.Errno.
package ring
