package engine

import "fmt"

// Loc is one end of a transfer: bytes of a host block, of device memory, of
// a file, or of a remote peer's pool. Build it with Host, HostAt, DeviceAt,
// FileAt or Remote — which name the one backend of the engine that serves
// that kind — or with a Target's DeviceAt, FileAt, File or Remote, which
// name that backend (needed when several serve the kind). Which kinds a
// backend accepts is its backend.Description.Locs.
type Loc struct {
	kind LocKind
	be   uint8  // the backend it names (index+1; 0: the one that serves kind, see Target)
	bgen uint16 // that backend's generation
	obj  uint32 // the peer (LocRemote) or file (LocFile)
	b    Block
	off  uint64
}

// Host names block b from its first byte.
func Host(b Block) Loc { return Loc{kind: LocHost, b: b} }

// HostAt names block b from byte off.
func HostAt(b Block, off int) Loc {
	if off < 0 {
		return Loc{kind: LocHost, b: b, off: ^uint64(0)} // refused by validation
	}
	return Loc{kind: LocHost, b: b, off: uint64(off)}
}

// DeviceAt names device memory from offset off: an HDMA device's BAR2, an
// NVMe namespace's bytes.
func DeviceAt(off uint64) Loc { return Loc{kind: LocDevice, off: off} }

// FileAt names the backend's file from byte offset off.
func FileAt(off int64) Loc {
	if off < 0 {
		return Loc{kind: LocFile, off: ^uint64(0)}
	}
	return Loc{kind: LocFile, off: uint64(off)}
}

// Remote names byte off of the pool that remote peer exported (a backend
// that reaches other hosts gives out peer numbers).
func Remote(peer uint32, off uint64) Loc { return Loc{kind: LocRemote, obj: peer, off: off} }

// Kind is what l names.
func (l Loc) Kind() LocKind { return l.kind }

func (l Loc) String() string {
	var s string
	switch l.kind {
	case LocHost:
		return fmt.Sprintf("host block %#x+%d", l.b.Addr(), l.off)
	case LocDevice:
		s = fmt.Sprintf("device memory %#x", l.off)
	case LocFile:
		s = fmt.Sprintf("file offset %d", int64(l.off))
		if l.obj != 0 {
			s = fmt.Sprintf("file %d offset %d", l.obj, int64(l.off))
		}
	case LocRemote:
		s = fmt.Sprintf("peer %d offset %#x", l.obj, l.off)
	default:
		return "nowhere"
	}
	if l.be != 0 {
		s += fmt.Sprintf(" of backend %d", l.be-1)
	}
	return s
}

// Transfer is one copy of Len bytes from Src to Dst.
type Transfer struct {
	Src, Dst Loc
	// Len is the number of bytes, > 0.
	Len int
	// Callback, when not nil, runs exactly once when the transfer ends —
	// success, device error, timeout or cancellation — on the reaper
	// goroutine (ModeReaper) or in Poll (ModePoll). It must not block: it
	// delays every other completion. It may Submit: what the callbacks of
	// one batch of completions submit starts when they have all run, with
	// one doorbell per backend.
	Callback func(Result)
	// User is any value the caller wants back in the Result (a
	// non-capturing Callback plus User avoids allocating a closure per
	// transfer).
	User uint64
}

// Result is the outcome of a transfer, handed to its Callback.
type Result struct {
	ID   ID
	User uint64
	// N is the number of bytes moved.
	N int
	// Err is nil, or wraps ErrDevice, ErrTimeout, ErrCanceled, ErrIO or
	// ErrShortIO (and the backend's cause, e.g. hdma.ErrIOMMUFault or an
	// errno).
	Err error
}

// ID names a submitted transfer. It carries the engine's tag and the
// transfer's sequence number, so an ID whose slot has been reused is
// reported as stale (ErrStaleID), never answered with another transfer's
// result. The zero ID is never issued.
type ID uint64

const idPosBits = 48

func (e *Engine) makeID(pos uint64) ID {
	return ID(e.tag<<idPosBits | (pos+1)&(1<<idPosBits-1))
}
