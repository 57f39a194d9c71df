package hugepage

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// sysfs and procfs paths this package reads (and, for Reserve, writes).
const (
	sysHugepages = "/sys/kernel/mm/hugepages"
	procNrHuge   = "/proc/sys/vm/nr_hugepages"
	sysTHP       = "/sys/kernel/mm/transparent_hugepage/enabled"
	procMeminfo  = "/proc/meminfo"
)

func hugeDir(ps int) string { return fmt.Sprintf("%s/hugepages-%dkB", sysHugepages, ps>>10) }

func nrHugepagesPath(ps int) string { return hugeDir(ps) + "/nr_hugepages" }

// HugeCounts is the kernel's hugetlb pool for one page size, from
// /sys/kernel/mm/hugepages/hugepages-<size>kB.
type HugeCounts struct {
	PageSize int // bytes
	Total    int // nr_hugepages: pages in the pool
	Free     int // free_hugepages: not faulted into any mapping
	Resv     int // resv_hugepages: free but promised to existing mappings
	Surplus  int // surplus_hugepages
}

// Available is the number of pages a new mapping can still get.
func (c HugeCounts) Available() int { return max(c.Free-c.Resv, 0) }

// ReadHugeCounts reads the hugetlb pool counters for page size ps (bytes).
func ReadHugeCounts(ps int) (HugeCounts, error) {
	c, err := readHugeCounts(ps)
	if err != nil {
		return c, fmt.Errorf("hugepage: hugetlb counts for %s pages: %w", fmtBytes(int64(ps)), err)
	}
	return c, nil
}

func readHugeCounts(ps int) (HugeCounts, error) {
	c := HugeCounts{PageSize: ps}
	for _, f := range []struct {
		name string
		v    *int
	}{{"nr_hugepages", &c.Total}, {"free_hugepages", &c.Free}, {"resv_hugepages", &c.Resv}, {"surplus_hugepages", &c.Surplus}} {
		n, err := readInt(hugeDir(ps) + "/" + f.name)
		if err != nil {
			return c, err
		}
		*f.v = n
	}
	return c, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

// hugeSizeSupported says whether the kernel offers hugetlb pages of size ps.
func hugeSizeSupported(ps int) error {
	if _, err := os.Stat(hugeDir(ps)); err != nil {
		return fmt.Errorf("%w: no hugetlb pages of %s (%s missing)", ErrNotSupported, fmtBytes(int64(ps)), hugeDir(ps))
	}
	return nil
}

// defaultHugepageSize is the Hugepagesize of /proc/meminfo (the size
// /proc/sys/vm/nr_hugepages counts), or 0.
func defaultHugepageSize() int {
	b, err := os.ReadFile(procMeminfo)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Hugepagesize:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.Atoi(f[0])
				return kb << 10
			}
		}
	}
	return 0
}

// thpAvailable says whether madvise(MADV_HUGEPAGE) can give transparent
// hugepages: THP must be built in and not set to "never".
func thpAvailable() error {
	b, err := os.ReadFile(sysTHP)
	if err != nil {
		return fmt.Errorf("%w: transparent hugepages not built into this kernel: %w", ErrNotSupported, err)
	}
	if strings.Contains(string(b), "[never]") {
		return fmt.Errorf("%w: transparent hugepages disabled (%s is %q)", ErrNotSupported, sysTHP, strings.TrimSpace(string(b)))
	}
	return nil
}

const (
	capIPCLock  = 14
	capSysAdmin = 21
)

// hasCapability reports whether capability bit c is in the effective set.
func hasCapability(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "CapEff:"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			return err == nil && v&(1<<c) != 0
		}
	}
	return false
}

// Residency is what /proc/self/smaps says about an arena's mapping: proof
// of the page size the kernel really uses and of how much is in memory.
type Residency struct {
	KernelPageSize int      // bytes; 2097152 / 1073741824 for hugetlb arenas
	Rss            int64    // bytes resident (anonymous and THP; hugetlb shows 0 here)
	AnonHugePages  int64    // bytes backed by transparent hugepages
	Hugetlb        int64    // bytes of hugetlb pages mapped (Private_Hugetlb + Shared_Hugetlb)
	Locked         int64    // bytes mlocked
	VMAs           int      // number of kernel VMAs the arena spans
	VmFlags        []string // VmFlags of the first VMA ("hg": MADV_HUGEPAGE, "nh": MADV_NOHUGEPAGE, "ht": hugetlb, "lo": locked)
}

// Residency reads /proc/self/smaps for the arena's address range.
func (a *Arena) Residency() (Residency, error) {
	if a.isClosed() {
		return Residency{}, fmt.Errorf("hugepage: residency: %w", ErrClosed)
	}
	r, err := readResidency(uintptr(a.base), uintptr(a.base)+uintptr(a.size))
	if err != nil {
		return r, fmt.Errorf("hugepage: residency of arena %#x+%d: %w", a.Addr(), a.size, err)
	}
	return r, nil
}

func readResidency(lo, hi uintptr) (Residency, error) {
	var r Residency
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return r, fmt.Errorf("read smaps: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	in := false
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a VMA header: start-end perms ...
			s, e, ok := strings.Cut(f[0], "-")
			if !ok {
				in = false
				continue
			}
			start, err1 := strconv.ParseUint(s, 16, 64)
			end, err2 := strconv.ParseUint(e, 16, 64)
			in = err1 == nil && err2 == nil && uintptr(start) < hi && uintptr(end) > lo
			if in {
				r.VMAs++
			}
			continue
		}
		if !in || len(f) < 2 {
			continue
		}
		if f[0] == "VmFlags:" {
			if r.VmFlags == nil {
				r.VmFlags = f[1:]
			}
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		kb := v << 10
		switch f[0] {
		case "KernelPageSize:":
			r.KernelPageSize = int(kb)
		case "Rss:":
			r.Rss += kb
		case "AnonHugePages:":
			r.AnonHugePages += kb
		case "Private_Hugetlb:", "Shared_Hugetlb:":
			r.Hugetlb += kb
		case "Locked:":
			r.Locked += kb
		}
	}
	if r.VMAs == 0 {
		return r, fmt.Errorf("smaps: no mapping at %#x-%#x", lo, hi)
	}
	return r, sc.Err()
}
