package hugepage

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"golang.org/x/sys/unix"
)

// reserve reserves n pages of ps bytes for the test and releases them at
// cleanup. For 1 GiB pages, a kernel that cannot find one at run time
// (fragmented memory, even after compaction) is a missing feature: the test
// skips with the reason, or fails when privileged tests are required.
func reserve(t *testing.T, ps, n int) *Reservation {
	t.Helper()
	testutil.RequirePrivileged(t, "reserve "+fmtBytes(int64(ps))+" hugetlb pages")
	if err := hugeSizeSupported(ps); err != nil {
		if ps == size1G && os.Getenv("HCOMM_IN_VM") != "1" && !cpuHas("pdpe1gb") {
			// Hardware, not privilege: this CPU cannot map 1 GiB pages at
			// all. The VM tests (make test-vm, -cpu max) run this test in
			// a guest whose CPU can, and fail there if it does not pass.
			testutil.SkipAllowed(t, "1 GiB hugetlb pages: this CPU has no pdpe1gb flag ("+err.Error()+"); make test-vm runs it in a guest that has them")
		}
		testutil.RequireFeature(t, fmtBytes(int64(ps))+" hugetlb pages", err)
	}
	r, err := Reserve(ps, n)
	if errors.Is(err, ErrReserve) {
		testutil.MissingPrivilege(t, strconv.Itoa(n)+" hugetlb pages of "+fmtBytes(int64(ps))+" at run time: "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Release(); err != nil {
			t.Errorf("release: %v", err)
		}
	})
	return r
}

// checkHugeArena proves an arena is what it claims: smaps shows the page
// size and the hugetlb bytes, pagemap shows runs that are whole, aligned
// hugepages, and the memory reads back what was written.
func checkHugeArena(t *testing.T, a *Arena, ps int) {
	t.Helper()
	r, err := a.Residency()
	if err != nil {
		t.Fatal(err)
	}
	if r.KernelPageSize != ps {
		t.Fatalf("smaps KernelPageSize %d kB, want %d kB", r.KernelPageSize>>10, ps>>10)
	}
	if r.Hugetlb != int64(a.Len()) {
		t.Fatalf("smaps hugetlb bytes %d, want %d (populated)", r.Hugetlb, a.Len())
	}
	runs, err := a.PhysRuns()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, run := range runs {
		if run.Phys%uint64(ps) != 0 || run.Len%ps != 0 || run.Offset%ps != 0 {
			t.Fatalf("physical run %+v is not made of whole %s pages", run, fmtBytes(int64(ps)))
		}
		total += run.Len
	}
	if total != a.Len() {
		t.Fatalf("physical runs cover %d bytes, arena has %d", total, a.Len())
	}
	t.Logf("%v arena of %s: %d physically contiguous run(s), first at %#x", a.Backing(), fmtBytes(int64(a.Len())), len(runs), runs[0].Phys)
	phys, err := a.PhysAddr(ps + 123)
	if a.Len() > ps && (err != nil || phys != runOf(runs, ps).Phys+uint64(ps-runOf(runs, ps).Offset)+123) {
		t.Fatalf("PhysAddr(%d) = %#x, %v; runs %+v", ps+123, phys, err, runs)
	}
	mem := a.Bytes()
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = byte(i >> 12)
	}
	for i := 0; i < len(mem); i += 4096 {
		if mem[i] != byte(i>>12) {
			t.Fatalf("byte %d reads %d", i, mem[i])
		}
	}
}

func runOf(runs []PhysRun, off int) PhysRun {
	for _, r := range runs {
		if off >= r.Offset && off < r.Offset+r.Len {
			return r
		}
	}
	return PhysRun{}
}

func TestHugetlb2M(t *testing.T) {
	r := reserve(t, size2M, 4)
	if r.after != r.before+4 {
		t.Fatalf("nr_hugepages %d -> %d, want 4 more", r.before, r.after)
	}
	a, err := NewArena(ArenaConfig{Size: 7 << 20, Backings: []Backing{BackingHugetlb2M}, Populate: true, Lock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Len() != 8<<20 || a.Backing() != BackingHugetlb2M || a.Addr()%size2M != 0 {
		t.Fatalf("arena len %d backing %v addr %#x", a.Len(), a.Backing(), a.Addr())
	}
	checkHugeArena(t, a, size2M)
}

func TestMemfd2MShared(t *testing.T) {
	reserve(t, size2M, 2)
	a, err := NewArena(ArenaConfig{Size: 4 << 20, Backings: []Backing{BackingMemfd2M}, Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Fd() < 0 || a.Backing() != BackingMemfd2M {
		t.Fatalf("memfd arena fd %d backing %v", a.Fd(), a.Backing())
	}
	checkHugeArena(t, a, size2M)
	// What another process (or a device emulator) does with the fd: map it
	// again and see the same memory.
	p, err := unix.MmapPtr(a.Fd(), 0, nil, uintptr(a.Len()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("second mapping of the memfd: %v", err)
	}
	defer unix.MunmapPtr(p, uintptr(a.Len()))
	other := unsafe.Slice((*byte)(p), a.Len())
	a.Bytes()[3<<20] = 0xA5
	other[100] = 0x5A
	if other[3<<20] != 0xA5 || a.Bytes()[100] != 0x5A {
		t.Fatal("the two mappings of the memfd do not share memory")
	}
}

func TestHugetlb1G(t *testing.T) {
	reserve(t, size1G, 1)
	for _, b := range []Backing{BackingHugetlb1G, BackingMemfd1G} {
		t.Run(b.String(), func(t *testing.T) {
			a, err := NewArena(ArenaConfig{Size: size1G, Backings: []Backing{b}, Populate: true})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if a.Len() != size1G || a.Addr()%size1G != 0 {
				t.Fatalf("arena len %d addr %#x", a.Len(), a.Addr())
			}
			checkHugeArena(t, a, size1G)
			runs, _ := a.PhysRuns()
			if len(runs) != 1 {
				t.Fatalf("1 GiB page in %d physical runs, want 1", len(runs))
			}
		})
	}
}

func TestReserveRelease(t *testing.T) {
	testutil.RequirePrivileged(t, "reserve 2 MiB hugetlb pages")
	r, err := Reserve(size2M, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	// Both pairs were read under the reservation lock, so other hcomm
	// processes reserving at the same time cannot blur them.
	if r.after != r.before+3 || r.relAfter != r.relBefore-3 {
		t.Fatalf("nr_hugepages %d -> %d on Reserve, %d -> %d on Release: want +3 and -3", r.before, r.after, r.relBefore, r.relAfter)
	}
	if left := outstandingPages(); left[size2M] != 0 {
		t.Fatalf("outstanding after release: %v", left)
	}
}

func TestReleaseWhileMapped(t *testing.T) {
	testutil.RequirePrivileged(t, "reserve 2 MiB hugetlb pages")
	// The whole sequence runs under the reservation lock, so that other
	// hcomm processes (ring's and the engine's tests, in parallel) cannot
	// change the pool's totals between the readings. And it runs only when
	// no page of the pool is available: the kernel shrinks the pool by an
	// available page first, which would be one that another process has
	// reserved and not mapped yet — its mmap would then fail.
	var unlock func()
	var before HugeCounts
	for wait := time.Now().Add(10 * time.Second); ; {
		var err error
		if unlock, err = lockPool(size2M); err != nil {
			t.Fatal(err)
		}
		if before, err = readHugeCounts(size2M); err != nil {
			unlock()
			t.Fatal(err)
		}
		if before.Available() == 0 {
			break
		}
		unlock()
		if time.Now().After(wait) {
			t.Skipf("the 2 MiB pool kept %d available pages of other processes for 10s; releasing a mapped page now would take one of them", before.Available())
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer unlock()
	r, err := reserveLocked(size2M, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewArena(ArenaConfig{Size: size2M, Backings: []Backing{BackingHugetlb2M}, Populate: true})
	if err != nil {
		r.releaseLocked()
		t.Fatal(err)
	}
	r.mu.Lock()
	err = r.releaseLocked()
	r.mu.Unlock()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	if r.relAfter != r.relBefore-1 {
		t.Fatalf("Release while mapped: nr_hugepages %d -> %d, want -1", r.relBefore, r.relAfter)
	}
	mid, _ := readHugeCounts(size2M)
	a.Bytes()[0] = 1 // still mapped
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	after, _ := readHugeCounts(size2M)
	// No page was available, so the mapped page became a surplus page that
	// leaves the pool at unmap — unless another process unmapped a page
	// meanwhile (munmap takes no lock), which the kernel then gave back
	// instead (the counters, several sysfs files, may then also be read
	// torn). Either way the pool ends as it began, which is the contract.
	if mid.Surplus == before.Surplus+1 && mid.Total == before.Total+1 {
		t.Logf("the mapped page became a surplus page (pool %+v while mapped)", mid)
	} else {
		t.Logf("another process changed the pool meanwhile (pool %+v before, %+v while mapped)", before, mid)
	}
	if after.Total != before.Total || after.Surplus != before.Surplus {
		t.Fatalf("pool before %+v, after close %+v: want it back as it was", before, after)
	}
}

func TestPhysPrivileged4K(t *testing.T) {
	testutil.RequirePrivileged(t, "read physical addresses from /proc/self/pagemap")
	a, err := NewArena(ArenaConfig{Size: 64 << 10, Backings: []Backing{Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.PhysRuns(); !errors.Is(err, ErrNotResident) {
		t.Fatalf("PhysRuns of an untouched arena = %v, want ErrNotResident", err)
	}
	prefault(a.Bytes())
	runs, err := a.PhysRuns()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.Phys == 0 {
			t.Fatalf("run %+v at physical address 0", r)
		}
	}
}

// TestTouchFaults proves what hugepages save: touching 1 GiB costs at most
// 512 minor faults with 2 MiB pages and at most 2 with a 1 GiB page, against
// one per 4 KiB page otherwise. A fault count is not a timing: it is exact
// but for the odd fault the Go runtime takes on the same thread, so each
// case keeps the fewest of three tries.
func TestTouchFaults(t *testing.T) {
	tests := []struct {
		backing   Backing
		size      int
		max, min  int64
		reserveIt bool
	}{
		{Backing4K, 64 << 20, 1 << 30, 16384, false}, // one fault per 4 KiB page
		{BackingHugetlb2M, size1G, 512, 512, true},
		{BackingHugetlb1G, size1G, 2, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.backing.String(), func(t *testing.T) {
			if tc.reserveIt {
				reserve(t, tc.backing.PageSize(), tc.size/tc.backing.PageSize())
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			least := int64(-1)
			for range 3 {
				a, err := NewArena(ArenaConfig{Size: tc.size, Backings: []Backing{tc.backing}})
				if err != nil {
					t.Fatal(err)
				}
				f := touchFaults(a.Bytes())
				a.Close()
				if least < 0 || f < least {
					least = f
				}
			}
			t.Logf("touching %s of %v pages: %d minor faults", fmtBytes(int64(tc.size)), tc.backing, least)
			if least > tc.max || least < tc.min {
				t.Fatalf("touching %s of %v pages cost %d minor faults, want %d..%d", fmtBytes(int64(tc.size)), tc.backing, least, tc.min, tc.max)
			}
		})
	}
}

// cpuHas reports whether /proc/cpuinfo lists flag for the first CPU.
func cpuHas(flag string) bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			return slices.Contains(strings.Fields(val), flag)
		}
	}
	return false
}
