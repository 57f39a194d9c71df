package engine

import "github.com/hcomm-go/hcomm/backend"

// What applications see of the backend contract (package backend): the
// kinds of Loc, the paths Stats counts by, and the arena bound. The values
// are the contract's; these names are for callers of the engine.

// LocKind says what a Loc names.
type LocKind = backend.LocKind

// The kinds of Loc.
const (
	LocNone   = backend.LocNone
	LocHost   = backend.LocHost
	LocDevice = backend.LocDevice
	LocFile   = backend.LocFile
	LocRemote = backend.LocRemote
)

// Path is how a transfer was carried out (Stats.Paths, the hook functions).
type Path = backend.Path

// The paths.
const (
	PathDMA    = backend.PathDMA
	PathCPU    = backend.PathCPU
	PathFile   = backend.PathFile
	PathMemory = backend.PathMemory
	PathNVMe   = backend.PathNVMe
	PathRemote = backend.PathRemote
)

// MaxArenas is the most arenas (pool arenas and Register'ed regions) an
// engine holds at once.
const MaxArenas = backend.MaxArenas

// The engine's own completion statuses, after the contract's.
const (
	statusNoop  = backend.NumCoreStatus // a reservation made after Close began: completes silently
	nCoreStatus = statusNoop + 1
)

// entry is one staging-ring entry: the backend's Op and what the engine
// keeps beside it, 64 bytes (one cache line).
type entry struct {
	op   backend.Op
	done uint8 // opForward, opDone (completed at submit time: res holds the result), opNoop
	be   uint8 // the backend: its index in Engine.members
	_    [6]byte
	res  uint64 // opDone: the result (status<<32 | bytes)
	_    [16]byte
}
