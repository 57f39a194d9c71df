package hugepage

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ArenaConfig says how big an arena is and what may back it.
type ArenaConfig struct {
	// Size in bytes, > 0. It is rounded up to the page size of the backing
	// obtained (Backing.PageSize; 2 MiB for THP) — except for memfd
	// backings, whose size must already be a multiple of the page size
	// (ErrMemfdSize): their fd is shared with other processes, which must
	// see the size they were told.
	Size int
	// Backings is the ordered preference; the first that the kernel grants
	// is used, and each one refused before it is recorded (Arena.Fallbacks).
	// A single-entry list forbids any fallback. Empty means DefaultBackings.
	Backings []Backing
	// Populate prefaults the whole arena at creation (MAP_POPULATE, or
	// MADV_POPULATE_WRITE for THP), so that first use does not page-fault.
	Populate bool
	// Lock mlocks the arena (never swapped out). Beyond RLIMIT_MEMLOCK this
	// needs CAP_IPC_LOCK (ErrMemlock says so). A lock failure fails
	// NewArena; it is not a reason to fall back to another backing.
	Lock bool
}

// Arena is one contiguous memory mapping off the Go heap, with a known
// backing. It is safe for concurrent use; the memory itself is the caller's
// to synchronise.
type Arena struct {
	base      unsafe.Pointer
	size      int
	backing   Backing
	fd        int
	locked    bool
	fallbacks []error
	borrowed  *poolArena // Borrow: caller memory, never unmapped here (wrap.go)

	mu     sync.Mutex
	closed bool
}

// NewArena maps an arena with the first backing of cfg.Backings that the
// kernel grants. If none is granted, the error joins every refusal (each a
// *BackingError wrapping a sentinel such as ErrNoHugepages).
func NewArena(cfg ArenaConfig) (*Arena, error) {
	a, err := newArena(cfg)
	if err != nil {
		return nil, fmt.Errorf("hugepage: %w", err)
	}
	return a, nil
}

// newArena is NewArena for the pool, whose errors carry their own prefix.
func newArena(cfg ArenaConfig) (*Arena, error) {
	if cfg.Size <= 0 {
		return nil, fmt.Errorf("new arena of %d bytes: %w", cfg.Size, ErrInvalidSize)
	}
	backs := cfg.Backings
	if len(backs) == 0 {
		backs = DefaultBackings
	}
	for _, b := range backs {
		if !b.valid() {
			return nil, fmt.Errorf("new arena: %w: %d", ErrInvalidBacking, int(b))
		}
	}
	var refused []error
	for _, b := range backs {
		a, err := mapArena(b, cfg)
		if err != nil {
			refused = append(refused, &BackingError{Backing: b, Err: err})
			continue
		}
		a.fallbacks = refused
		if cfg.Lock {
			if err := a.lock(); err != nil {
				a.Close()
				return nil, err
			}
		}
		return a, nil
	}
	if len(refused) == 1 {
		return nil, fmt.Errorf("new arena of %s: %w", fmtBytes(int64(cfg.Size)), refused[0])
	}
	return nil, fmt.Errorf("new arena of %s: no backing of %v granted: %w",
		fmtBytes(int64(cfg.Size)), backs, errors.Join(refused...))
}

// Bytes is the whole mapping. It lives off the Go heap and is invalid after
// Close (nil then).
func (a *Arena) Bytes() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	return unsafe.Slice((*byte)(a.base), a.size)
}

// Addr is the virtual address of the first byte.
func (a *Arena) Addr() uintptr { return uintptr(a.base) }

// Len is the arena's size in bytes (the configured size rounded up).
func (a *Arena) Len() int { return a.size }

// Backing is the backing obtained: what memory the arena got (hugetlb 2 MiB,
// THP, 4 KiB...), after any fallback (Fallbacks says why). For BackingTHP it
// is what was asked of the kernel; Residency shows the pages really used.
func (a *Arena) Backing() Backing { return a.backing }

// PageSize is the page size of the backing obtained.
func (a *Arena) PageSize() int { return a.backing.PageSize() }

// Fd is the memfd of a memfd backing (mappable by another process or a
// device emulator), or -1. It is closed by Close.
func (a *Arena) Fd() int { return a.fd }

// Locked reports whether the arena was mlocked.
func (a *Arena) Locked() bool { return a.locked }

// Fallbacks says why each backing preferred over the one obtained was
// refused, in preference order (each a *BackingError). Empty when the first
// choice was granted.
func (a *Arena) Fallbacks() []error { return append([]error(nil), a.fallbacks...) }

// Close unmaps the arena and closes its memfd. It is idempotent.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var errs []error
	if a.borrowed != nil {
		a.borrowed.dead.Store(true) // the caller's memory: not ours to unmap
	} else if err := unix.MunmapPtr(a.base, uintptr(a.size)); err != nil {
		errs = append(errs, fmt.Errorf("hugepage: munmap arena %#x+%d: %w", uintptr(a.base), a.size, err))
	}
	if a.fd >= 0 {
		if err := unix.Close(a.fd); err != nil {
			errs = append(errs, fmt.Errorf("hugepage: close memfd %d: %w", a.fd, err))
		}
	}
	return errors.Join(errs...)
}

func (a *Arena) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// mapArena maps one backing, or says why it cannot.
func mapArena(b Backing, cfg ArenaConfig) (*Arena, error) {
	ps := b.PageSize()
	if cfg.Size > maxInt-ps {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalidSize, cfg.Size)
	}
	size := roundUp(cfg.Size, ps)
	switch b {
	case Backing4K:
		return mapAnon(size, cfg.Populate, unix.MADV_NOHUGEPAGE, size4K)
	case BackingTHP:
		if err := thpAvailable(); err != nil {
			return nil, err
		}
		return mapAnon(size, cfg.Populate, unix.MADV_HUGEPAGE, size2M)
	case BackingHugetlb2M, BackingHugetlb1G:
		return mapHugetlb(b, size, cfg.Populate)
	case BackingMemfd2M, BackingMemfd1G:
		if cfg.Size%ps != 0 {
			return nil, fmt.Errorf("%w: %d bytes is not a multiple of %s; ask for %d",
				ErrMemfdSize, cfg.Size, fmtBytes(int64(ps)), size)
		}
		return mapMemfd(b, size, cfg.Populate)
	}
	return nil, ErrInvalidBacking
}

// mapAnon maps private anonymous memory aligned to align (over-mapping and
// trimming, so that a THP arena starts on a 2 MiB boundary), applies advice
// and, if asked, prefaults it.
func mapAnon(size int, populate bool, advice int, align int) (*Arena, error) {
	b := BackingTHP
	if advice == unix.MADV_NOHUGEPAGE {
		b = Backing4K
	}
	mapLen := size
	if align > size4K {
		mapLen += align
	}
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if populate && b == Backing4K {
		flags |= unix.MAP_POPULATE
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(mapLen), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("mmap %s anonymous: %w", fmtBytes(int64(mapLen)), err)
	}
	if mapLen > size {
		start := roundUp(int(uintptr(p)), align)
		head := start - int(uintptr(p))
		tail := mapLen - head - size
		if head > 0 {
			_ = unix.MunmapPtr(p, uintptr(head))
		}
		if tail > 0 {
			_ = unix.MunmapPtr(unsafe.Add(p, head+size), uintptr(tail))
		}
		p = unsafe.Add(p, head)
	}
	a := &Arena{base: p, size: size, backing: b, fd: -1}
	if err := unix.Madvise(unsafe.Slice((*byte)(p), size), advice); err != nil {
		a.Close()
		if b == BackingTHP {
			return nil, fmt.Errorf("%w: madvise(MADV_HUGEPAGE): %w", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("madvise(MADV_NOHUGEPAGE): %w", err)
	}
	if populate && b == BackingTHP {
		prefault(unsafe.Slice((*byte)(p), size))
	}
	return a, nil
}

// prefault faults every page of mem in for writing: MADV_POPULATE_WRITE
// (Linux 5.14) or, failing that, one store per 4 KiB page.
func prefault(mem []byte) {
	if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err == nil {
		return
	}
	for i := 0; i < len(mem); i += size4K {
		mem[i] = 0
	}
}

func hugeFlag(ps int) int {
	return (bits.Len(uint(ps)) - 1) << unix.MAP_HUGE_SHIFT
}

func mapHugetlb(b Backing, size int, populate bool) (*Arena, error) {
	ps := b.PageSize()
	if err := hugeSizeSupported(ps); err != nil {
		return nil, err
	}
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_HUGETLB | hugeFlag(ps)
	if populate {
		flags |= unix.MAP_POPULATE
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, hugetlbMmapError(b, size, err)
	}
	return &Arena{base: p, size: size, backing: b, fd: -1}, nil
}

func mapMemfd(b Backing, size int, populate bool) (*Arena, error) {
	ps := b.PageSize()
	if err := hugeSizeSupported(ps); err != nil {
		return nil, err
	}
	mfd := unix.MFD_CLOEXEC | unix.MFD_HUGETLB | unix.MFD_HUGE_2MB
	if ps == size1G {
		mfd = unix.MFD_CLOEXEC | unix.MFD_HUGETLB | unix.MFD_HUGE_1GB
	}
	fd, err := unix.MemfdCreate("hcomm-arena", mfd)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("%w: memfd_create(MFD_HUGETLB) for %s pages: %w", ErrNotSupported, fmtBytes(int64(ps)), err)
		}
		return nil, fmt.Errorf("memfd_create(MFD_HUGETLB): %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ftruncate memfd to %d: %w", size, err)
	}
	flags := unix.MAP_SHARED
	if populate {
		flags |= unix.MAP_POPULATE
	}
	p, err := unix.MmapPtr(fd, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		unix.Close(fd)
		return nil, hugetlbMmapError(b, size, err)
	}
	return &Arena{base: p, size: size, backing: b, fd: fd}, nil
}

// hugetlbMmapError turns a failed hugetlb mmap into an error that says what
// to do: for ENOMEM, how many pages of which size are missing and where to
// reserve them.
func hugetlbMmapError(b Backing, size int, err error) error {
	ps := b.PageSize()
	if !errors.Is(err, unix.ENOMEM) {
		return fmt.Errorf("mmap %s of %s hugetlb pages: %w", fmtBytes(int64(size)), fmtBytes(int64(ps)), err)
	}
	need := size / ps
	c, cerr := readHugeCounts(ps)
	path := nrHugepagesPath(ps)
	if cerr != nil {
		return fmt.Errorf("%w: %s needs %d pages of %s; reserve them as root in %s (or hugepage.Reserve): mmap: %w",
			ErrNoHugepages, fmtBytes(int64(size)), need, fmtBytes(int64(ps)), path, err)
	}
	avail := c.Free - c.Resv
	target := c.Total + (need - avail)
	hint := ""
	if ps == size1G {
		hint = "; if the kernel cannot find 1 GiB of contiguous memory at run time, reserve at boot (kernel command line hugepagesz=1G hugepages=N)"
	} else if ps == defaultHugepageSize() {
		hint = " (the same count is /proc/sys/vm/nr_hugepages)"
	}
	return fmt.Errorf("%w: %s needs %d pages of %s but only %d are available (pool: %d pages, %d free, %d of them promised to other mappings); as root: echo %d > %s, or use hugepage.Reserve%s: mmap: %w",
		ErrNoHugepages, fmtBytes(int64(size)), need, fmtBytes(int64(ps)), max(avail, 0), c.Total, c.Free, c.Resv,
		target, path, hint, err)
}

func (a *Arena) lock() error {
	mem := unsafe.Slice((*byte)(a.base), a.size)
	if err := unix.Mlock(mem); err != nil {
		return memlockError(a.size, err)
	}
	a.locked = true
	return nil
}

func memlockError(size int, err error) error {
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
	capHeld := hasCapability(capIPCLock)
	if !capHeld && (errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM)) {
		return fmt.Errorf("%w: mlock %s exceeds RLIMIT_MEMLOCK (%s) and the process lacks CAP_IPC_LOCK; run as root, grant CAP_IPC_LOCK, or raise the limit (ulimit -l, limits.conf, systemd LimitMEMLOCK=) — or do not set Lock: %w",
			ErrMemlock, fmtBytes(int64(size)), fmtRlimit(lim.Cur), err)
	}
	held := "held"
	if !capHeld {
		held = "not held"
	}
	return fmt.Errorf("%w: mlock %s (RLIMIT_MEMLOCK %s, CAP_IPC_LOCK %s): %w",
		ErrMemlock, fmtBytes(int64(size)), fmtRlimit(lim.Cur), held, err)
}

const maxInt = int(^uint(0) >> 1)

func roundUp(n, to int) int { return (n + to - 1) &^ (to - 1) }

func fmtRlimit(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmtBytes(int64(v))
}

// fmtBytes prints a byte count in the largest binary unit that divides it.
func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
