package engine

import "fmt"

// locKind says what a Loc names.
type locKind uint8

const (
	locNone locKind = iota
	locHost
	locDevice
	locFile
)

// Loc is one end of a transfer: bytes of a host block, of device memory, or
// of the engine's file. Build it with Host, HostAt, DeviceAt or FileAt.
type Loc struct {
	kind locKind
	b    Block
	off  uint64
}

// Host names block b from its first byte.
func Host(b Block) Loc { return Loc{kind: locHost, b: b} }

// HostAt names block b from byte off.
func HostAt(b Block, off int) Loc {
	if off < 0 {
		return Loc{kind: locHost, b: b, off: ^uint64(0)} // refused by validation
	}
	return Loc{kind: locHost, b: b, off: uint64(off)}
}

// DeviceAt names device memory (the HDMA device's BAR2) from offset off.
func DeviceAt(off uint64) Loc { return Loc{kind: locDevice, off: off} }

// FileAt names the engine's file from byte offset off.
func FileAt(off int64) Loc {
	if off < 0 {
		return Loc{kind: locFile, off: ^uint64(0)}
	}
	return Loc{kind: locFile, off: uint64(off)}
}

func (l Loc) String() string {
	switch l.kind {
	case locHost:
		return fmt.Sprintf("host block %#x+%d", l.b.Addr(), l.off)
	case locDevice:
		return fmt.Sprintf("device memory %#x", l.off)
	case locFile:
		return fmt.Sprintf("file offset %d", l.off)
	}
	return "nowhere"
}

// Transfer is one copy of Len bytes from Src to Dst.
type Transfer struct {
	Src, Dst Loc
	// Len is the number of bytes, > 0.
	Len int
	// Callback, when not nil, runs exactly once when the transfer ends —
	// success, device error, timeout or cancellation — on the reaper
	// goroutine (ModeReaper) or in Poll (ModePoll). It must not block: it
	// delays every other completion. It may Submit.
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
	// ErrShortIO (and the cause, e.g. hdma.ErrIOMMUFault or an errno).
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

// Path is how a transfer was carried out; the hook functions report it.
type Path uint8

const (
	PathDMA    Path = 0 // the device's DMA engine
	PathCPU    Path = 1 // the CPU, straight into device memory (BAR2)
	PathFile   Path = 2 // io_uring to a file
	PathMemory Path = 3 // host→host copy
	nPaths          = 4
)

func (p Path) String() string {
	switch p {
	case PathDMA:
		return "dma"
	case PathCPU:
		return "cpu"
	case PathFile:
		return "file"
	case PathMemory:
		return "memory"
	}
	return fmt.Sprintf("Path(%d)", uint8(p))
}
