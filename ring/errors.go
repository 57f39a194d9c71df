package ring

import "errors"

// Sentinel errors of the descriptor rings (see doc.go for the full list).
var (
	// ErrGeometry: the memory, entry size or phase offset cannot form a ring.
	ErrGeometry = errors.New("invalid ring geometry")
	// ErrFull: the ring has no room for the requested entries right now.
	ErrFull = errors.New("ring full")
	// ErrEmpty: the ring holds no entry ready to consume.
	ErrEmpty = errors.New("ring empty")
	// ErrBatchSize: a batch size outside 1..capacity was asked for.
	ErrBatchSize = errors.New("invalid batch size")
	// ErrCommit: a commit did not match an outstanding reservation.
	ErrCommit = errors.New("commit does not match a reservation")
	// ErrRelease: more entries were released than were peeked as ready.
	ErrRelease = errors.New("release exceeds ready entries")
	// ErrHead: a consumer head value that the producer cannot accept
	// (out of range, or beyond what was produced).
	ErrHead = errors.New("invalid consumer head")
	// ErrEntrySize: an entry of the wrong length was passed in.
	ErrEntrySize = errors.New("entry has the wrong size")
)

// Sentinel errors of the io_uring layer (see doc.go).
var (
	// ErrClosed: the Uring was closed.
	ErrClosed = errors.New("io_uring closed")
	// ErrWrongThread: a call came from a thread other than the ring's owner
	// (the kernel refuses it: EEXIST for SINGLE_ISSUER, EBADF for a
	// registered ring fd, which is per thread).
	ErrWrongThread = errors.New("io_uring used from a thread other than its owner")
	// ErrSQFull: no submission entry is free even after submitting.
	ErrSQFull = errors.New("io_uring submission queue full")
	// ErrBusy: the kernel refused to take more work now (EBUSY/EAGAIN:
	// completion queue overflow backlog); reap completions and retry.
	ErrBusy = errors.New("io_uring busy: reap completions first")
	// ErrNotFromRing: an SQE that this ring did not hand out.
	ErrNotFromRing = errors.New("SQE does not belong to this ring")
	// ErrUnsupported: the kernel lacks an io_uring feature or opcode.
	ErrUnsupported = errors.New("io_uring feature unsupported by the kernel")
	// ErrConfig: a UringConfig that cannot work (checked before the kernel
	// is asked).
	ErrConfig = errors.New("invalid io_uring config")
	// ErrTimeout: SubmitAndWaitTimeout's timeout expired first (ETIME).
	ErrTimeout = errors.New("io_uring wait timed out")
	// ErrMemlock: registering buffers exceeded RLIMIT_MEMLOCK without
	// CAP_IPC_LOCK.
	ErrMemlock = errors.New("registered buffers exceed RLIMIT_MEMLOCK")
)
