package hugepage

import "strconv"

// Backing names the kind of memory behind an Arena.
type Backing int

// The backings an Arena can have. The order of this list is not a preference;
// ArenaConfig.Backings sets the preference.
const (
	Backing4K        Backing = iota // plain anonymous 4 KiB pages
	BackingTHP                      // anonymous + MADV_HUGEPAGE (transparent hugepages)
	BackingHugetlb2M                // MAP_HUGETLB (2 MiB)
	BackingHugetlb1G                // MAP_HUGETLB|MAP_HUGE_1GB
	BackingMemfd2M                  // memfd_create(MFD_HUGETLB|MFD_HUGE_2MB) + mmap MAP_SHARED; Fd() valid
	BackingMemfd1G                  // memfd_create(MFD_HUGETLB|MFD_HUGE_1GB) + mmap MAP_SHARED; Fd() valid
)

// DefaultBackings is the preference used when ArenaConfig.Backings is empty:
// reserved 2 MiB hugetlb pages, then transparent hugepages, then 4 KiB pages.
var DefaultBackings = []Backing{BackingHugetlb2M, BackingTHP, Backing4K}

const (
	size4K = 4 << 10
	size2M = 2 << 20
	size1G = 1 << 30
)

// String returns a short name: "4K", "THP", "hugetlb-2M", "hugetlb-1G",
// "memfd-2M", "memfd-1G".
func (b Backing) String() string {
	switch b {
	case Backing4K:
		return "4K"
	case BackingTHP:
		return "THP"
	case BackingHugetlb2M:
		return "hugetlb-2M"
	case BackingHugetlb1G:
		return "hugetlb-1G"
	case BackingMemfd2M:
		return "memfd-2M"
	case BackingMemfd1G:
		return "memfd-1G"
	}
	return "Backing(" + strconv.Itoa(int(b)) + ")"
}

// PageSize is the size of the pages the backing maps, in bytes, and the
// granularity an arena's size is rounded up to. THP arenas are rounded to
// 2 MiB (the size of a transparent hugepage) although the kernel may still
// back parts of them with 4 KiB pages (see Arena.Residency). It returns 0 for
// an unknown backing.
func (b Backing) PageSize() int {
	switch b {
	case Backing4K:
		return size4K
	case BackingTHP, BackingHugetlb2M, BackingMemfd2M:
		return size2M
	case BackingHugetlb1G, BackingMemfd1G:
		return size1G
	}
	return 0
}

// Hugetlb reports whether the backing uses reserved hugetlb pages (and so
// needs a reservation, see Reserve).
func (b Backing) Hugetlb() bool {
	switch b {
	case BackingHugetlb2M, BackingHugetlb1G, BackingMemfd2M, BackingMemfd1G:
		return true
	}
	return false
}

func (b Backing) valid() bool { return b >= Backing4K && b <= BackingMemfd1G }
