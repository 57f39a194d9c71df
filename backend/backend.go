package backend

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/errs"
)

// Backend is what an engine moves data with: a device, a file, host memory,
// a remote peer. The engine core owns ordering, backpressure, IDs and
// exactly-once completion; a backend owns its device. The shape follows
// database/sql's drivers and NIXL's agent/backend split: an engine is given
// one Backend explicitly (Config.Backend) and takes ownership of it, and no
// *Engine ever crosses this interface.
//
// # Concurrency
//
// Prepare and Execute run on submitting goroutines, concurrently with each
// other and with everything else: they may read only what Attach and
// MapArena set up before the engine used it (the engine publishes an arena
// to submitters only after MapArena returned). Every other method runs while
// the engine holds its owner flag: one goroutine at a time, never
// concurrently with each other.
//
// # The life of a transfer, as a backend sees it
//
//	Attach            once, at Open
//	MapArena          for the pool's first arena at Open, then for each arena the pool grows by
//	Prepare           on the submitter: check the transfer, fill in an Op (addresses, opcode, path)
//	Execute           on the submitter, for Ops that Prepare marked Inline (CPU copies)
//	Forward ... Flush  on the owner: queue a batch, then publish it with one doorbell / syscall
//	Reap              on the owner: collect finished transfers in batches
//	Check             on the owner, when Reap found nothing: timeouts, recovery
//	Cancel            at Close, when its context ended: stop and collect everything outstanding
//	UnmapArena, Close at release of an idle arena, and at Close
type Backend interface {
	// Describe says what the backend is: its name, limits and features.
	// Called at any time, it must be cheap and must not change after Attach.
	Describe() Description

	// Attach prepares the backend for one engine. env says how deep the
	// engine's queue is (the backend must accept that many outstanding
	// transfers, or fail with an error wrapping ErrBadConfig), where to
	// count doorbells and system calls, and where to log. A backend serves
	// one engine: a second Attach is an error.
	Attach(env Env) error

	// MapArena makes arena a usable for transfers (DMA-map it into an
	// IOMMU, register it as io_uring fixed buffers, register it with a
	// network) and returns the address the backend will use for its first
	// byte (an IOVA, a registered-buffer base, ...). The engine hands that
	// address back in Endpoint.Addr (plus the offset). slot is a small
	// integer in 0..MaxArenas-1 that names the arena until UnmapArena
	// (Endpoint.Arena, Op.HostArena); slots are reused.
	MapArena(slot int, a *hugepage.Arena) (addr uint64, err error)
	// UnmapArena undoes MapArena. The engine calls it only for an arena
	// that holds no live block.
	UnmapArena(slot int) error

	// Prepare checks a transfer of n bytes from src to dst (host ends are
	// already checked by the engine: live block, bounds) and fills in op,
	// which the engine has zeroed: Code, Path, Src, Dst, HostArena, Aux,
	// and Inline for a transfer the submitter should carry out itself with
	// Execute. Errors wrap ErrBadTransfer, ErrOutOfBounds or ErrAlignment
	// and say what was wrong; Prepare must not allocate when it succeeds.
	// op is the transfer's entry of the engine's staging ring (heap
	// memory: handing it to an interface method costs no allocation, and
	// no copy of 64 bytes that were just written field by field); the
	// endpoints come by value for the same reason.
	Prepare(src, dst Endpoint, n uint32, op *Op) error
	// Execute carries out an Inline op on the submitting goroutine and
	// returns its result.
	Execute(op *Op) (n uint32, status Status)

	// Forward queues op (tag identifies it in the completion) without
	// publishing it; last is true for the batch's last op, which should
	// ask for an interrupt (never in ModePoll: nobody sleeps on it). false: no room now (or recovery is needed):
	// the engine stops forwarding and tries again later.
	Forward(tag uint64, op *Op, last bool) bool
	// Flush publishes what Forward queued: one doorbell, one
	// io_uring_enter, one network flush.
	Flush()
	// Reap moves finished transfers into out (as many as fit) and
	// returns how many. It must not block.
	Reap(out []Completion) int
	// Check runs when Reap found nothing while transfers are outstanding
	// in the backend or staged ones were refused by Forward: detect
	// stalls and timeouts, recover from resets. Failed transfers come out
	// of the next Reap. (A backend that must recover refuses Forward, so
	// the next submission after an idle reset brings Check back.)
	Check()
	// Outstanding is how many forwarded transfers have not been reaped.
	Outstanding() int
	// ReadyFD is a file descriptor that becomes readable when completions
	// arrive (an interrupt eventfd, an io_uring fd), so that an idle
	// engine sleeps; eventfd says the engine should read it (8 bytes) to
	// consume the signal, rather than poll it. -1 when there is none (the
	// engine then sleeps with a timeout while transfers are outstanding).
	ReadyFD() (fd int, eventfd bool)
	// Cancel stops the backend's outstanding transfers (Close, once its
	// context ended) and moves every one of them into out, completed or
	// canceled (StatusCanceled). It may block briefly, never for ever; out
	// has room for every outstanding transfer. A transfer it cannot take
	// back (I/O the kernel or a device still holds) stays outstanding:
	// the engine cancels it for the caller, keeps the memory mapped, and
	// calls Cancel again (dropping what it returns) until Outstanding is 0,
	// and only then unmaps the pool and calls Close.
	Cancel(out []Completion) int
	// Close releases the backend's resources (after Cancel, or once
	// nothing is outstanding). The engine calls it once.
	Close() error

	// Err turns a backend-specific status (StatusBackend and up) into the
	// error callers see. It must not allocate: return preformatted errors,
	// each wrapping one of the engine's completion sentinels (ErrDevice,
	// ErrTimeout, ErrCanceled, ErrIO) and the cause.
	Err(s Status) error
}

// Env is what an engine tells its backend at Attach.
type Env struct {
	// QueueDepth is the most transfers the engine has in flight at once.
	QueueDepth int
	// Alignment of every pool block (address and length).
	Alignment int
	// Counters are the engine's backend counters: plain integers, written
	// only under the owner flag (Forward, Flush, Reap, Check, Cancel).
	Counters *Counters
	// Logger receives rare events (recovery, fallbacks).
	Logger *slog.Logger
}

// Counters are what a backend counts for the engine's Stats.
type Counters struct {
	Doorbells  uint64 // doorbell writes, or submitting system calls
	Syscalls   uint64 // every system call the backend made
	Recoveries uint64 // device resets or reconnects recovered from
}

// MaxArenas is the most arenas an engine's pool holds at once (the first
// plus those it grows by).
const MaxArenas = 64

// Description is what a backend says about itself, for Stats, tools and
// validation messages.
type Description struct {
	// Name is short and stable: "hdma", "file", "memory", "nvme", "ucx".
	Name string
	// Device names the device or file ("vfio-mock", "0000:00:04.0",
	// "/var/tmp/x").
	Device string
	// Locs is the set of Loc kinds the backend accepts besides host
	// blocks (bit 1<<LocDevice, 1<<LocFile, 1<<LocRemote), and bit
	// 1<<LocHost when it moves host memory to host memory: an engine
	// routes a Loc that names no backend to the one backend whose Locs
	// has its kind (host → host: the one with LocHost, or the engine's
	// only backend).
	Locs uint32
	// MaxTransfer is the largest transfer in bytes (0: 4 GiB - 1).
	MaxTransfer uint32
	// DeviceMemory is the size of the device memory that DeviceAt
	// offsets address (0: none). AllocDevice hands out ranges of it.
	DeviceMemory uint64
	// Align is the alignment the backend needs of host addresses, lengths
	// and offsets (1: none; 4096 for O_DIRECT files).
	Align int
	// CPUThreshold is the largest host→device transfer carried out by the
	// CPU (Inline) rather than DMA; -1 when there is no CPU path.
	CPUThreshold int
	// Timeout is how long a transfer may stay outstanding before the
	// backend counts it as stalled (0: never).
	Timeout time.Duration
	// Features lists what the backend uses ("fixed-buffers",
	// "msi-eventfd", "cpu-path", ...).
	Features []string
	// Fallbacks lists what the backend could not get and what it did
	// instead, so that nothing degrades silently.
	Fallbacks []error
}

// Endpoint is one end of a transfer as a backend sees it: a host block
// resolved by the engine, or a device, file or remote location as the
// caller wrote it.
type Endpoint struct {
	Kind LocKind
	// Off: for LocDevice, LocFile and LocRemote, the offset the caller
	// gave. For LocHost, the offset of the first byte within its arena.
	Off uint64
	// Host ends only. Arenas start on a page boundary (at least 4096), so
	// Off's alignment is the virtual address's alignment up to that.
	Addr  uint64 // the backend address of the first byte: MapArena's address + Off
	Arena int    // the arena slot
	// Peer is the remote peer (LocRemote).
	Peer uint32
	// File is the file (LocFile) of a backend that serves several: 0 is
	// its first (engine.FileAt); the index is the backend's own.
	File uint32
}

// Op is one staged transfer, as the backend filled it in Prepare. It lives
// in the engine's staging ring (32 bytes, plain integers only) from Submit
// until its completion is reaped.
type Op struct {
	// Code is the backend's own opcode.
	Code uint8
	// Path is how the transfer is carried out (PathDMA, PathCPU, ...): the
	// engine's statistics and hooks count by it.
	Path Path
	// Inline: the submitter carries it out with Execute; it is never
	// forwarded.
	Inline bool
	_      uint8
	// Len is the number of bytes.
	Len uint32
	// Src and Dst are backend addresses (Endpoint.Addr for host ends,
	// offsets or remote addresses for the others).
	Src, Dst uint64
	// HostArena is the arena slot of the host end, for backends that
	// address memory by arena (registered buffers); Aux is the backend's
	// own (a peer index, a queue).
	HostArena uint16
	Aux       uint16
	_         uint32
}

// Completion is one finished transfer, as Reap and Cancel report it.
type Completion struct {
	Tag    uint64 // Forward's tag
	N      uint32 // bytes moved
	Status Status
}

// Status is the outcome of a transfer: StatusOK, one of the engine's own
// statuses, StatusErrno+errno, or a backend-specific status at
// StatusBackend and above (the backend's Err says what it means).
type Status uint32

const (
	StatusOK Status = iota
	// StatusCanceled: stopped by Close (ErrCanceled).
	StatusCanceled
	// StatusTimeout: the backend gave up waiting (ErrTimeout).
	StatusTimeout
	// StatusShort: fewer bytes than asked (ErrShortIO). The engine also
	// reports a StatusOK completion with N < Len as short.
	StatusShort
	// NumCoreStatus bounds the engine's own statuses: values from it up
	// to StatusBackend are the engine's, never a backend's.
	NumCoreStatus

	// StatusBackend is the first backend-specific status.
	StatusBackend Status = 0x100
	// StatusErrno + errno: an operation failed with errno (ErrIO).
	StatusErrno Status = 0x10000
)

// LocKind says what a Loc names.
type LocKind uint8

const (
	LocNone LocKind = iota
	LocHost
	LocDevice
	LocFile
	LocRemote
)

func (k LocKind) String() string {
	switch k {
	case LocHost:
		return "host"
	case LocDevice:
		return "device"
	case LocFile:
		return "file"
	case LocRemote:
		return "remote"
	}
	return "none"
}

// Path is how a transfer was carried out; backends set it in Prepare, and
// the engine's Stats and hook functions report by it. The numbers are part
// of the hook interface (docs/engine.md): new paths are appended, never
// renumbered.
type Path uint8

const (
	PathDMA    Path = 0 // a device's DMA engine (HDMA)
	PathCPU    Path = 1 // the CPU, straight into device memory (BAR2)
	PathFile   Path = 2 // io_uring to a file
	PathMemory Path = 3 // host→host copy
	PathNVMe   Path = 4 // an NVMe controller's queues
	PathRemote Path = 5 // another host's pool (put/get)
	// NumPaths bounds Path values (Stats has one entry per value).
	NumPaths = 8
)

var pathNames = [NumPaths]string{"dma", "cpu", "file", "memory", "nvme", "remote"}

func (p Path) String() string {
	if int(p) < len(pathNames) && pathNames[p] != "" {
		return pathNames[p]
	}
	return fmt.Sprintf("path(%d)", uint8(p))
}

// Errors a backend wraps, which callers of the engine test for with
// errors.Is (package engine re-exports the same values).
var (
	// ErrBadConfig: a configuration (the engine's, or a backend's) is
	// invalid, or a backend cannot serve the engine as configured.
	ErrBadConfig = errors.New("engine: invalid configuration")
	// ErrBadTransfer: a transfer the backend cannot carry out as asked.
	ErrBadTransfer = errors.New("engine: invalid transfer")
	// ErrOutOfBounds: a transfer beyond its block, the device memory or
	// the backend's limit.
	ErrOutOfBounds = errors.New("engine: transfer exceeds its block, the device memory or the backend's limit")
	// ErrAlignment: not aligned as the backend needs.
	ErrAlignment = errors.New("engine: transfer is not aligned as the backend needs (O_DIRECT: 4096-byte address, length and offset)")

	// Completion errors (engine.Result.Err); Backend.Err's errors wrap
	// one of them and the cause.
	ErrDevice   = errors.New("engine: device reported an error")
	ErrTimeout  = errors.New("engine: transfer timed out")
	ErrCanceled = errors.New("engine: transfer canceled by Close")
	ErrIO       = errors.New("engine: I/O failed")
	ErrShortIO  = errors.New("engine: short transfer (fewer bytes than asked)")

	// ErrNotSupported and ErrClosed are hcomm's shared sentinels (the same
	// values as engine.ErrNotSupported, vfio.ErrClosed, ...).
	ErrNotSupported = errs.ErrNotSupported
	ErrClosed       = errs.ErrClosed
)

// The optional interfaces. A backend implements them beside Backend when
// it can; the engine finds them with a type assertion once, when the
// backend is added.

// BatchWaiter is a backend that can be waited on in batches: block until
// want completions are ready (or minWait passed with some ready, or
// timeout), without the owner flag and without reaping, and return the
// system calls made. backend/uringfile has it (io_uring_enter with
// min_complete and min_wait_usec). With it, a goroutine that waits for a
// transfer blocks in the kernel rather than spinning, and the engine's
// reaper stands back while such a waiter reaps.
type BatchWaiter interface {
	WaitCompletions(want int, minWait, timeout time.Duration) (syscalls int)
}

// BatchWaitChooser is an optional method beside WaitCompletions for a
// backend whose instances differ: BatchWaits reports, once when the
// backend is added, whether this instance wants batched waits. A backend
// that completes everything in Flush (backend/ucx over shared memory) says
// no, and the engine treats it as one without WaitCompletions.
type BatchWaitChooser interface {
	BatchWaits() bool
}

// InterruptGate is a backend whose completion signal (the interrupt
// eventfd of ReadyFD) can be switched off while nothing sleeps on it: a
// device interrupt that nobody waits for still costs the device its
// signal and the host its interrupt work. The engine's reaper — the one
// sleeper on ReadyFD — turns it off when it wakes, and on before it sleeps
// on ReadyFD again, then looks at the completions once more: what completed
// while it was off raised nothing and is not owed. Off, completions still
// arrive (Reap finds them). Called by the reaper goroutine only, beside the
// owner's calls; an error leaves the signal as it was (the engine then
// keeps it on for good). backend/hdmadev has it (the queue's IRQ register).
type InterruptGate interface {
	GateInterrupts(on bool) error
}

// LazyDoorbell is a BatchWaiter whose doorbell (its system call) can be
// deferred to the next batched wait (backend/uringfile). FlushDeferred is
// Flush without the system call: the batch is published to the backend but
// not started; SubmitDeferred starts what is published and not yet started
// (nothing when there is none); WaitCompletions starts it in the same
// system call as it waits. Owner only, except WaitCompletions.
//
// The engine defers a doorbell only while a goroutine holds its reaping
// flag in a completion round (a callback that submits, or a submitter
// beside a reaping waiter); that goroutine starts it — its batched wait
// carries it, or it calls SubmitDeferred before it ends the round — so a
// deferred transfer starts within the round it was submitted in
// (docs/engine.md, "The deferred doorbell").
type LazyDoorbell interface {
	FlushDeferred()
	SubmitDeferred()
}
