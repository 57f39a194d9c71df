package hugepage

import (
	"encoding/binary"
	"fmt"
	"os"
)

// PhysRun is a physically contiguous piece of an arena.
type PhysRun struct {
	Offset int    // offset in the arena
	Phys   uint64 // physical address of the first byte
	Len    int    // bytes
}

const (
	pagemapPresent = 1 << 63
	pagemapPFNMask = (1 << 55) - 1
)

// PhysAddr is the physical address of the byte at off, from
// /proc/self/pagemap. It needs CAP_SYS_ADMIN (root): without it the kernel
// hides frame numbers, and PhysAddr returns ErrPrivilege rather than a zero
// taken for an address. A page never touched returns ErrNotResident.
func (a *Arena) PhysAddr(off int) (uint64, error) {
	if off < 0 || off >= a.size {
		return 0, fmt.Errorf("hugepage: physical address of offset %d in a %d-byte arena: %w", off, a.size, ErrOutOfRange)
	}
	runs, err := a.physRange(off&^(size4K-1), size4K)
	if err != nil {
		return 0, fmt.Errorf("hugepage: physical address of offset %#x: %w", off, err)
	}
	return runs[0].Phys + uint64(off&(size4K-1)), nil
}

// PhysRuns translates the whole arena and merges physically contiguous
// pages into runs: a 2 MiB hugetlb arena is one run per hugepage at least
// (neighbouring hugepages may merge), a 1 GiB page is one run. The arena
// must be resident (Populate).
func (a *Arena) PhysRuns() ([]PhysRun, error) {
	runs, err := a.physRange(0, a.size)
	if err != nil {
		return nil, fmt.Errorf("hugepage: physical runs of arena %#x+%d: %w", a.Addr(), a.size, err)
	}
	return runs, nil
}

func (a *Arena) physRange(off, n int) ([]PhysRun, error) {
	if a.isClosed() {
		return nil, ErrClosed
	}
	if !hasCapability(capSysAdmin) {
		return nil, fmt.Errorf("%w: physical addresses from /proc/self/pagemap need CAP_SYS_ADMIN (run as root); without it the kernel reports frame 0 for every page", ErrPrivilege)
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, fmt.Errorf("open pagemap: %w", err)
	}
	defer f.Close()

	const chunk = 1 << 16 // pages per read (512 KiB of entries)
	buf := make([]byte, 8*chunk)
	var runs []PhysRun
	base := uintptr(a.base)
	for done := 0; done < n; {
		pages := min((n-done)/size4K, chunk)
		vpn := (base + uintptr(off+done)) / size4K
		b := buf[:8*pages]
		if _, err := f.ReadAt(b, int64(vpn)*8); err != nil {
			return nil, fmt.Errorf("read pagemap at page %#x: %w", vpn, err)
		}
		for i := range pages {
			e := binary.LittleEndian.Uint64(b[8*i:])
			o := off + done + i*size4K
			if e&pagemapPresent == 0 {
				return nil, fmt.Errorf("%w: offset %#x of the arena (populate it first)", ErrNotResident, o)
			}
			pfn := e & pagemapPFNMask
			if pfn == 0 {
				return nil, fmt.Errorf("%w: pagemap reported frame 0 at offset %#x: the kernel hides frame numbers from this process", ErrPrivilege, o)
			}
			phys := pfn * size4K
			if k := len(runs) - 1; k >= 0 && runs[k].Phys+uint64(runs[k].Len) == phys {
				runs[k].Len += size4K
			} else {
				runs = append(runs, PhysRun{Offset: o, Phys: phys, Len: size4K})
			}
		}
		done += pages * size4K
	}
	return runs, nil
}
