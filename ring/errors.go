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
	// ErrEntrySize: an entry of the wrong length was passed in.
	ErrEntrySize = errors.New("entry has the wrong size")
)
