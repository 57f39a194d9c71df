package engine

import (
	"errors"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/hugepage"
)

// counters are the engine's statistics. They are plain integers written only
// by the goroutine holding the owner flag (a draining submitter, the
// reaper, Poll, Close), so counting costs no atomic at all; Stats takes the
// flag to read them. The only atomics are for rare events (queue full,
// reaper sleeps and wake-ups).
type counters struct {
	transfers   [backend.NumPaths]uint64
	bytes       [backend.NumPaths]uint64
	batches     uint64
	completed   uint64
	reapBatches uint64
	errDevice   uint64
	errTimeout  uint64
	errCanceled uint64
	errIO       uint64
}

// countErr counts a failed transfer by the kind of its error (the error
// path only: errors.Is walks the wrapped chain, without allocating).
func (c *counters) countErr(err error) {
	switch {
	case errors.Is(err, ErrTimeout):
		c.errTimeout++
	case errors.Is(err, ErrCanceled):
		c.errCanceled++
	case errors.Is(err, ErrIO), errors.Is(err, ErrShortIO):
		c.errIO++
	default:
		c.errDevice++
	}
}

// PathStats counts the transfers that took one path.
type PathStats struct {
	Transfers, Bytes uint64
}

// Stats is a snapshot of an engine's counters.
type Stats struct {
	// Backend is the first backend's name (backend.Description.Name).
	Backend string
	// Transfers and Bytes handed to the backend (all paths), and by path
	// (index: PathDMA, PathCPU, PathFile, PathMemory, PathNVMe, PathRemote).
	Transfers, Bytes uint64
	Paths            [backend.NumPaths]PathStats
	// Batches handed to the backend (one hookSubmitBatch call per path each).
	Batches uint64
	// Doorbells the backend rang: SQ_TAIL writes (device) or batches
	// published to the io_uring (file; their io_uring_enter may be a
	// completion round's wait, see Submit).
	Doorbells uint64
	// Syscalls made by the engine and its backend: the backend's
	// io_uring_enters, the reaper's sleeps, eventfd reads and wake-ups.
	Syscalls uint64
	// Completed transfers (callbacks run or due), in ReapBatches batches.
	Completed, ReapBatches uint64
	// Errors by kind.
	DeviceErrors, Timeouts, Canceled, IOErrors uint64
	// InFlight: staged and not yet released (submitted, callback pending);
	// 0 once Close has run every callback (submissions it refused are not
	// counted).
	InFlight int
	// QueueFull counts submissions refused with ErrQueueFull.
	QueueFull uint64
	// Recoveries: device resets (or reconnects) the backend recovered from.
	Recoveries uint64
	// CPUThreshold is the backend's CPU-path threshold in bytes (-1: off).
	CPUThreshold int
	// Backing is what memory the pool's first arena got.
	Backing hugepage.Backing
	// Pool is the host memory pool's accounting (growth and release
	// included: Pool.Grows, Pool.Releases, Pool.Arenas).
	Pool hugepage.PoolStats
	// Backends counts per backend, in Targets order (the totals above
	// add them up, with those of backends removed since).
	Backends []BackendStats
}

// BackendStats is one backend's share of an engine's counters.
type BackendStats struct {
	// Name and Device are the backend's (backend.Description).
	Name, Device string
	// Transfers and Bytes the engine handed to it (inline ones included).
	Transfers, Bytes uint64
	// Doorbells, Syscalls and Recoveries it counted (backend.Counters).
	Doorbells, Syscalls, Recoveries uint64
	// Outstanding: forwarded to it and not yet reaped.
	Outstanding int
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	e.lock()
	c := e.totals
	var bs []BackendStats
	var bc backend.Counters
	e.forEach(func(m *member) {
		bs = append(bs, BackendStats{Name: m.desc.Name, Device: m.desc.Device, Transfers: m.transfers, Bytes: m.bytes,
			Doorbells: m.ctr.Doorbells, Syscalls: m.ctr.Syscalls, Recoveries: m.ctr.Recoveries, Outstanding: m.be.Outstanding()})
		bc.Doorbells += m.ctr.Doorbells
		bc.Syscalls += m.ctr.Syscalls
		bc.Recoveries += m.ctr.Recoveries
	})
	for _, r := range e.retired {
		bc.Doorbells += r.ctr.Doorbells
		bc.Syscalls += r.ctr.Syscalls
		bc.Recoveries += r.ctr.Recoveries
	}
	inflight := e.stage.Len()
	if e.tornDown {
		// Closed: submissions refused since then reserved no-op slots
		// that nothing releases any more; they are not in flight. What
		// Close canceled is, until its callback has run.
		inflight = int(e.tornEnd - min(e.released.Load(), e.tornEnd))
	}
	e.unlock()
	s := Stats{
		Backend: e.first.desc.Name, Backends: bs,
		Batches: c.batches, Doorbells: bc.Doorbells, Syscalls: bc.Syscalls + e.engineSyscalls.Load(),
		Completed: c.completed, ReapBatches: c.reapBatches,
		DeviceErrors: c.errDevice, Timeouts: c.errTimeout, Canceled: c.errCanceled, IOErrors: c.errIO,
		InFlight: inflight, QueueFull: e.queueFull.Load(), Recoveries: bc.Recoveries,
		CPUThreshold: e.first.desc.CPUThreshold, Backing: e.backing,
	}
	for p := range s.Paths {
		s.Paths[p] = PathStats{Transfers: c.transfers[p], Bytes: c.bytes[p]}
		s.Transfers += c.transfers[p]
		s.Bytes += c.bytes[p]
	}
	if !e.isClosed() {
		s.Pool = e.pool.Stats()
	}
	return s
}

// Errors is the number of transfers that completed with an error.
func (s Stats) Errors() uint64 { return s.DeviceErrors + s.Timeouts + s.Canceled + s.IOErrors }
