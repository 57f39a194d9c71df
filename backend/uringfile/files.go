package uringfile

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/internal/uring"
)

// A file of the backend is named by a 32-bit ID (Endpoint.File, the engine's
// Target.File): its slot in the ring's registered-file table in the low 16
// bits, the slot's generation in the high 16. Removing a file ends its
// generation, so an ID kept after RemoveFile is refused even once the slot
// holds another file; a freed slot is reused last (first in, first out),
// so an ID aliases a later file only after 65536 reuses of its slot. The
// first file added (New's file) is ID 0, what engine.FileAt names.
const (
	slotBits = 16
	slotMask = 1<<slotBits - 1

	// MaxFiles is the most files one backend serves at once (Config.MaxFiles).
	MaxFiles = 1 << slotBits
	// DefaultMaxFiles is Config.MaxFiles' default (lowered to RLIMIT_NOFILE).
	DefaultMaxFiles = 4096
)

// fileSlot is one entry of the file table. state is the slot's generation
// (high 16 bits) and flags, written under Backend.mu and read without a
// lock by Prepare (submitters) and Forward (the owner): a transfer is
// accepted only while its ID's generation is the slot's and the slot is live.
type fileSlot struct {
	state atomic.Uint32
	fd    int // the caller's fd (registration only; the ring holds its own reference)
	// tail: for a removed slot, the SQ position the kernel must pass before
	// the slot may hold another file (drainTail), once hasTail.
	tail    uint32
	hasTail bool
}

const (
	fileLive   = 1 << 0 // transfers are accepted
	fileDirect = 1 << 1 // O_DIRECT: addresses, lengths and offsets aligned to DirectAlign
)

// errFileRemoved is the completion error of a transfer whose file was
// removed after it was accepted and before the kernel took it.
var errFileRemoved = fmt.Errorf("uringfile: the transfer's file was removed before the kernel took the transfer: %w", backend.ErrCanceled)

// statusFileRemoved is errFileRemoved's status (Err).
const statusFileRemoved = backend.StatusBackend + 1

// NewEmpty returns a backend that serves no file yet: AddFile adds them,
// before or after engine.Open.
func NewEmpty(cfg Config) (*Backend, error) {
	n := cfg.MaxFiles
	switch {
	case n == 0:
		n = DefaultMaxFiles
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur < uint64(n) {
			n = max(1, int(rl.Cur))
		}
	case n < 0 || n > MaxFiles:
		return nil, fmt.Errorf("uringfile: MaxFiles %d: want 1..%d (0 = %d): %w", n, MaxFiles, DefaultMaxFiles, backend.ErrBadConfig)
	}
	return &Backend{cfg: cfg, files: make([]fileSlot, n)}, nil
}

// AddFile adds f to the files the backend serves and returns its ID, for
// Target.File(id, off). f must be a regular file or a block device open for
// reading and/or writing, without O_APPEND; an O_DIRECT file needs the
// engine's Alignment ≥ DirectAlign. The ring takes its own reference to the
// file: f stays the caller's, and I/O through the backend keeps working if
// the caller closes it — RemoveFile ends it. Safe for concurrent use with
// the engine's use of the backend and with RemoveFile.
func (b *Backend) AddFile(f *os.File) (uint32, error) {
	fd, direct, err := checkFile(f)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, fmt.Errorf("uringfile: add %s: the backend is closed: %w", f.Name(), backend.ErrBadConfig)
	}
	if direct && b.attached.Load() && b.alignment < DirectAlign {
		return 0, fmt.Errorf("uringfile: add %s: it is O_DIRECT: the engine's Alignment %d must be ≥ %d: %w", f.Name(), b.alignment, DirectAlign, backend.ErrBadConfig)
	}
	if b.u != nil && !b.fileTable {
		return 0, fmt.Errorf("uringfile: add %s: the ring has no table for files added while it runs (%v): %w", f.Name(), b.fileTableErr, errors.ErrUnsupported)
	}
	slot, ok := b.takeSlot()
	if !ok {
		return 0, fmt.Errorf("uringfile: add %s: all %d file slots are in use (%d removed ones wait for the kernel to take their last transfers; Config.MaxFiles raises the limit): %w",
			f.Name(), len(b.files), len(b.draining), backend.ErrBadConfig)
	}
	s := &b.files[slot]
	if b.u != nil {
		if err := b.u.UpdateFiles(int(slot), []int32{int32(fd)}); err != nil {
			b.free = append(b.free, slot) // unchanged: its generation still names nothing
			return 0, fmt.Errorf("uringfile: add %s: register it in the ring: %w", f.Name(), err)
		}
	}
	s.fd, s.hasTail = fd, false
	gen := s.state.Load() >> slotBits
	st := gen<<slotBits | fileLive
	if direct {
		st |= fileDirect
	}
	s.state.Store(st) // publishes fd to Forward's and Attach's readers
	b.nfiles++
	return gen<<slotBits | slot, nil
}

// RemoveFile stops serving file id: transfers naming it are refused from
// now on (ErrBadTransfer at submit), those already in the kernel complete
// with their results, and one accepted but not yet taken by the kernel
// completes with an error wrapping ErrCanceled. The ring lets go of the
// file once its last request completed. A stale or unknown id is an error
// wrapping ErrBadTransfer. Safe for concurrent use, like AddFile.
func (b *Backend) RemoveFile(id uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	slot, gen := id&slotMask, id>>slotBits
	if int(slot) >= len(b.files) {
		return fmt.Errorf("uringfile: remove file %#x: no slot %d (the table has %d): %w", id, slot, len(b.files), backend.ErrBadTransfer)
	}
	s := &b.files[slot]
	st := s.state.Load()
	if st>>slotBits != gen || st&fileLive == 0 {
		return fmt.Errorf("uringfile: remove file %#x: not a file of this backend (removed, or never added): %w", id, backend.ErrBadTransfer)
	}
	// A new generation, not live: Prepare refuses the ID from here on,
	// and Forward turns what it still finds staged into errFileRemoved.
	s.state.Store((gen + 1) & slotMask << slotBits)
	b.nfiles--
	if b.u == nil || b.closed {
		b.free = append(b.free, slot) // no ring: no request can name it
		return nil
	}
	// The kernel drops its reference once the requests that took the
	// file complete; an SQE it has not taken yet fails with EBADF
	// (reported as errFileRemoved).
	err := b.u.UpdateFiles(int(slot), []int32{-1})
	b.draining = append(b.draining, slot)
	if err != nil && !errors.Is(err, uring.ErrClosed) {
		return fmt.Errorf("uringfile: remove file %#x: clear its slot in the ring (it is refused all the same): %w", id, err)
	}
	return nil
}

// Files is how many files the backend serves now.
func (b *Backend) Files() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nfiles
}

// takeSlot picks a slot for a new file (under mu): a never used one first,
// then the longest free, then a removed one whose last SQEs the kernel has
// taken.
func (b *Backend) takeSlot() (uint32, bool) {
	if b.fresh < len(b.files) {
		b.fresh++
		return uint32(b.fresh - 1), true
	}
	if len(b.free) == 0 {
		b.drainTail()
	}
	if len(b.free) == 0 {
		return 0, false
	}
	slot := b.free[0]
	b.free = b.free[1:]
	return slot, true
}

// drainTail moves removed slots whose SQEs the kernel has all taken to the
// free list (under mu). An SQE naming a slot can only have been prepared
// by a Forward that read the slot live, before RemoveFile; the owner sets
// fwdBusy before it reads a slot and clears it after it published the
// batch. Once fwdBusy is seen clear after the removal, every such SQE is
// at an SQ position below the shared tail read then; once the kernel's
// head has passed that position, none is left for the slot to misroute.
func (b *Backend) drainTail() {
	if b.u == nil {
		return
	}
	busy := b.fwdBusy.Load() // first: a tail read after it covers every SQE of a Forward before it
	tail, head := b.u.SQShared()
	kept := b.draining[:0]
	for _, slot := range b.draining {
		s := &b.files[slot]
		if !s.hasTail && !busy {
			s.tail, s.hasTail = tail, true
		}
		if s.hasTail && int32(head-s.tail) >= 0 {
			b.free = append(b.free, slot)
			continue
		}
		kept = append(kept, slot)
	}
	b.draining = kept
}

// checkFile checks that f can be served: open, a regular file or a block
// device, no O_APPEND. It returns f's fd and whether it is O_DIRECT.
func checkFile(f *os.File) (fd int, direct bool, err error) {
	if f == nil {
		return 0, false, fmt.Errorf("uringfile: file is nil: give an open *os.File: %w", backend.ErrBadConfig)
	}
	fd = int(f.Fd())
	if fd < 0 {
		return 0, false, fmt.Errorf("uringfile: %s is closed: %w", f.Name(), backend.ErrBadConfig)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, false, fmt.Errorf("uringfile: %s: fstat: %w", f.Name(), err)
	}
	if mode := st.Mode & unix.S_IFMT; mode != unix.S_IFREG && mode != unix.S_IFBLK {
		return 0, false, fmt.Errorf("uringfile: %s is not a regular file or block device (mode %#o): I/O on it may never complete: %w", f.Name(), mode, backend.ErrBadConfig)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return 0, false, fmt.Errorf("uringfile: %s: fcntl(F_GETFL): %w", f.Name(), err)
	}
	if fl&unix.O_APPEND != 0 {
		return 0, false, fmt.Errorf("uringfile: %s is open with O_APPEND: every write would land at the end, not at its offset: %w", f.Name(), backend.ErrBadConfig)
	}
	return fd, fl&unix.O_DIRECT != 0, nil
}
