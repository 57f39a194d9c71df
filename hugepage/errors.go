package hugepage

import (
	"errors"
	"fmt"

	"github.com/hcomm-go/hcomm/internal/errs"
)

// Sentinel errors. Every error this package returns wraps one of them (and,
// where a system call failed, the errno as well), so callers can test with
// errors.Is.
//
// Every error a function or method of this package returns starts with
// "hugepage: " once, followed by the operation and its arguments; the
// sentinels' own texts do not repeat the prefix, so a message reads e.g.
// "hugepage: alloc 64 bytes aligned to 64: pool exhausted: ...".
var (
	// ErrInvalidSize: a size is zero, negative, or too large to represent.
	ErrInvalidSize = errors.New("invalid size")
	// ErrInvalidBacking: a Backing value outside the defined set.
	ErrInvalidBacking = errors.New("invalid backing")
	// ErrNoHugepages: the kernel had not enough free hugetlb pages of the
	// size asked for (mmap returned ENOMEM). The message says how many pages
	// are needed and where to reserve them.
	ErrNoHugepages = errors.New("not enough hugetlb pages reserved")
	// ErrNotSupported: the kernel does not offer the backing (no such page
	// size, THP disabled, memfd hugetlb unsupported). hcomm's shared
	// sentinel (package internal/errs), the same value as
	// engine.ErrNotSupported; it wraps errors.ErrUnsupported.
	ErrNotSupported = errs.ErrNotSupported
	// ErrMemfdSize: a memfd hugetlb arena size that is not a multiple of the
	// page size (the fd is shared with other processes, so its size is not
	// rounded silently).
	ErrMemfdSize = errors.New("memfd hugetlb size is not a multiple of the page size")
	// ErrMemlock: mlock failed, typically because the arena exceeds
	// RLIMIT_MEMLOCK and the process lacks CAP_IPC_LOCK.
	ErrMemlock = errors.New("cannot lock arena memory")
	// ErrClosed: the arena or pool was closed. hcomm's shared sentinel,
	// the same value as engine.ErrClosed.
	ErrClosed = errs.ErrClosed
	// ErrPrivilege: the operation needs root or a capability the process
	// does not have (reserving hugepages, reading physical addresses).
	ErrPrivilege = errors.New("insufficient privilege")
	// ErrReserve: the kernel could not supply the hugepages a Reservation
	// asked for (memory too fragmented, or not enough of it).
	ErrReserve = errors.New("cannot reserve hugepages")
	// ErrNotResident: a page of the arena is not in memory (never touched);
	// it has no physical address yet. Map with Populate.
	ErrNotResident = errors.New("page not resident")
	// ErrOutOfRange: an offset or length outside the arena.
	ErrOutOfRange = errors.New("offset out of range")

	// ErrBadAlign: an alignment that is not a power of two, or below 8.
	ErrBadAlign = errors.New("alignment must be a power of two >= 8")
	// ErrTooLarge: a request larger than the pool can ever satisfy.
	ErrTooLarge = errors.New("request larger than the pool")
	// ErrPoolExhausted: the pool has no room now and may not grow further.
	ErrPoolExhausted = errors.New("pool exhausted")
	// ErrDoubleFree: the block was already freed (or its memory reallocated
	// since: the copy is stale).
	ErrDoubleFree = errors.New("block already freed")
	// ErrForeignBlock: the block does not belong to this pool, or is a zero
	// or forged Block value.
	ErrForeignBlock = errors.New("block not from this pool")
)

// Free's refusals, made once so that a refused Free allocates only the
// message that wraps them.
var (
	errForged = fmt.Errorf("%w: the block does not match any allocation", ErrForeignBlock)
	errStale  = fmt.Errorf("%w (or the copy is stale)", ErrDoubleFree)
	errGone   = fmt.Errorf("%w: its arena was released", ErrDoubleFree)
)

// BackingError is one refusal of a backing: why NewArena did not use it.
// Arena.Fallbacks returns these, and NewArena returns them joined when no
// backing of the policy could be used. Like *os.PathError it describes one
// part of a failure, so its message has no "hugepage: " prefix of its own.
type BackingError struct {
	Backing Backing
	Err     error
}

func (e *BackingError) Error() string {
	return fmt.Sprintf("backing %v refused: %v", e.Backing, e.Err)
}

func (e *BackingError) Unwrap() error { return e.Err }
