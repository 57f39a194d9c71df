package hugepage

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Reservation is a number of hugetlb pages that Reserve added to the
// kernel's pool; Release gives back exactly those.
type Reservation struct {
	pageSize int
	n        int
	// What the kernel reported under the lock, for tests: nr_hugepages
	// before and after Reserve, and before and after Release.
	before, after, relBefore, relAfter int

	mu       sync.Mutex
	released bool
}

// reserveMu serialises reservations inside the process; an flock on the
// page size's sysfs directory serialises them between processes using hcomm.
// outstanding counts this process's reserved, unreleased pages per page
// size (guarded by reserveMu).
var (
	reserveMu   sync.Mutex
	outstanding = map[int]int{}
)

// outstandingPages returns this process's reserved, unreleased pages by
// page size (the tests check it is empty when they end).
func outstandingPages() map[int]int {
	reserveMu.Lock()
	defer reserveMu.Unlock()
	out := map[int]int{}
	for ps, n := range outstanding {
		if n != 0 {
			out[ps] = n
		}
	}
	return out
}

const procCompact = "/proc/sys/vm/compact_memory"

// Reserve adds n hugetlb pages of pageSize bytes (2 MiB or 1 GiB) to the
// kernel's pool, through /sys/kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages.
// It needs root (ErrPrivilege otherwise). When the kernel cannot find
// enough contiguous memory it compacts memory once and retries; if it still
// falls short, it gives back what it got and returns ErrReserve saying how
// many it could have had. Release undoes exactly this reservation, even if
// others changed the pool in between.
func Reserve(pageSize int, n int) (*Reservation, error) {
	r, err := reservePages(pageSize, n)
	if err != nil {
		return nil, fmt.Errorf("hugepage: reserve %d pages of %s: %w", n, fmtBytes(int64(pageSize)), err)
	}
	return r, nil
}

// reservePages is Reserve without the message prefix.
func reservePages(pageSize int, n int) (*Reservation, error) {
	if n <= 0 {
		return nil, ErrInvalidSize
	}
	if err := hugeSizeSupported(pageSize); err != nil {
		return nil, err
	}
	unlock, err := lockPool(pageSize)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return reserveLocked(pageSize, n)
}

// reserveLocked is Reserve with the pool lock held (lockPool).
func reserveLocked(pageSize, n int) (*Reservation, error) {
	path := nrHugepagesPath(pageSize)
	before, err := readPersistent(path)
	if err != nil {
		return nil, err
	}
	got, err := setNrHugepages(path, before+n)
	if err != nil {
		return nil, err
	}
	if got < before+n {
		// The buddy allocator could not find contiguous free memory of
		// this size; compaction may make some. Best effort.
		_ = os.WriteFile(procCompact, []byte("1"), 0)
		if got, err = setNrHugepages(path, before+n); err != nil {
			return nil, err
		}
	}
	if got < before+n {
		if _, rerr := setNrHugepages(path, before); rerr != nil {
			return nil, fmt.Errorf("giving back a partial reservation: %w", rerr)
		}
		hint := ""
		if pageSize == size1G {
			hint = "; 1 GiB pages need 1 GiB of physically contiguous free memory: reserve them at boot (kernel command line hugepagesz=1G hugepages=N) if run-time allocation fails"
		}
		return nil, fmt.Errorf("%w: asked the kernel for %d more pages (%s %d -> %d), it found only %d even after compacting memory%s",
			ErrReserve, n, path, before, before+n, got-before, hint)
	}
	outstanding[pageSize] += n
	return &Reservation{pageSize: pageSize, n: n, before: before, after: got}, nil
}

// PageSize is the size of the reserved pages.
func (r *Reservation) PageSize() int { return r.pageSize }

// Pages is the number of pages reserved.
func (r *Reservation) Pages() int { return r.n }

// Release lowers the pool by the pages Reserve added. Release after closing
// the arenas that use the pages: the kernel shrinks the pool by its free
// pages first, so releasing while an arena still maps them takes free pages
// that another process may have reserved and not mapped yet; only when no
// page is free do the mapped ones become surplus pages (nr_hugepages still
// counts them) that go back to the system when the arena is closed.
// Release is idempotent.
func (r *Reservation) Release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return nil
	}
	unlock, err := lockPool(r.pageSize)
	if err != nil {
		return fmt.Errorf("hugepage: release %d pages of %s: %w", r.n, fmtBytes(int64(r.pageSize)), err)
	}
	defer unlock()
	if err := r.releaseLocked(); err != nil {
		return fmt.Errorf("hugepage: release %d pages of %s: %w", r.n, fmtBytes(int64(r.pageSize)), err)
	}
	return nil
}

// releaseLocked is Release with r.mu and the pool lock held.
func (r *Reservation) releaseLocked() error {
	path := nrHugepagesPath(r.pageSize)
	cur, err := readPersistent(path)
	if err != nil {
		return err
	}
	target := max(cur-r.n, 0)
	got, err := setNrHugepages(path, target)
	if err != nil {
		return err
	}
	if got != target {
		return fmt.Errorf("%w: the kernel's pool holds %d persistent pages, want %d", ErrReserve, got, target)
	}
	r.relBefore, r.relAfter = cur, got
	r.released = true
	outstanding[r.pageSize] -= r.n
	return nil
}

// setNrHugepages writes n (the persistent pool size) and returns the
// persistent pool size the kernel then reports.
func setNrHugepages(path string, n int) (int, error) {
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0); err != nil {
		if errors.Is(err, os.ErrPermission) {
			return 0, fmt.Errorf("%w: writing %s needs root (euid %d): %w", ErrPrivilege, path, os.Geteuid(), err)
		}
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	return readPersistent(path)
}

// readPersistent reads the persistent pool size: nr_hugepages counts
// surplus pages too (pages still mapped after the pool was lowered, freed
// to the system when unmapped), writing it sets the persistent count.
//
// The two counters are separate files: a surplus page freed by another
// process's munmap between the reads (both counters drop by one) would give
// a persistent count one too high. The surplus count is read before and
// after nr_hugepages, and the reading repeated until both agree.
func readPersistent(path string) (int, error) {
	surplusPath := strings.TrimSuffix(path, "nr_hugepages") + "surplus_hugepages"
	for try := 0; ; try++ {
		s1, err := readInt(surplusPath)
		if err != nil {
			return 0, err
		}
		nr, err := readInt(path)
		if err != nil {
			return 0, err
		}
		s2, err := readInt(surplusPath)
		if err != nil {
			return 0, err
		}
		if s1 == s2 || try == 100 {
			return nr - s2, nil
		}
	}
}

func lockPool(ps int) (func(), error) {
	reserveMu.Lock()
	fd, err := unix.Open(hugeDir(ps), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		reserveMu.Unlock()
		return nil, fmt.Errorf("open %s: %w", hugeDir(ps), err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		reserveMu.Unlock()
		return nil, fmt.Errorf("flock %s: %w", hugeDir(ps), err)
	}
	return func() {
		unix.Flock(fd, unix.LOCK_UN)
		unix.Close(fd)
		reserveMu.Unlock()
	}, nil
}
