// Package ring holds hcomm's lock-free descriptor rings, laid over caller
// memory so that a ring can live in a hugepage arena that a device reads and
// writes. (hcomm's io_uring layer, whose rings the kernel owns, is the
// internal package internal/uring.)
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
//   - CompletionRing: the consumer (driver) side of an NVMe-style
//     completion ring whose entries a device writes with a phase bit (bit 0
//     of the little-endian uint16 at a given offset; HDMA: 16-byte entries,
//     offset 10). The phase written flips on every pass, so the consumer
//     tells new entries from old without a shared index; it hands consumed
//     slots back through Head, the value of a CQ_HEAD doorbell. The
//     device's side is the device's (vfio-mock writes its own entries).
//
// Memory ordering. Go's sync/atomic operations are sequentially consistent,
// which is stronger than needed; the comments beside each atomic say which
// acquire/release pairing the algorithm relies on: a producer's plain writes
// into entries happen before the atomic store that publishes them (tail,
// marker, or phase word), and a consumer reads them only after the atomic
// load that observes that store; a consumer's reads happen before the store
// of its head, and a producer overwrites a slot only after loading a head
// past it. The argument rests on the Go memory model only, never on x86's
// store order: on arm64, whose memory model lets plain accesses pass each
// other, sync/atomic's loads are LDAR and its stores STLR, which give
// exactly these acquire/release pairings (the ring stress tests run there
// too, in the aarch64 guest). Memory shared with a real device adds the
// device's own ordering on top (the driver's DMA read barrier after a
// phase load, the barrier inside each MMIO doorbell store: see package
// vfio); these rings only cover CPU-to-CPU ordering.
// The phase bit is read and written through the aligned 32-bit word that
// contains it, which assumes a little-endian machine (amd64, arm64).
//
// Sentinel errors, for errors.Is: ErrGeometry, ErrFull, ErrEmpty,
// ErrBatchSize, ErrCommit, ErrRelease, ErrEntrySize.
package ring
