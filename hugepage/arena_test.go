package hugepage

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

func TestBackingNames(t *testing.T) {
	tests := []struct {
		b    Backing
		name string
		ps   int
		huge bool
	}{
		{Backing4K, "4K", 4096, false},
		{BackingTHP, "THP", 2 << 20, false},
		{BackingHugetlb2M, "hugetlb-2M", 2 << 20, true},
		{BackingHugetlb1G, "hugetlb-1G", 1 << 30, true},
		{BackingMemfd2M, "memfd-2M", 2 << 20, true},
		{BackingMemfd1G, "memfd-1G", 1 << 30, true},
		{Backing(42), "Backing(42)", 0, false},
	}
	for _, tc := range tests {
		if got := tc.b.String(); got != tc.name {
			t.Errorf("%d.String() = %q, want %q", int(tc.b), got, tc.name)
		}
		if got := tc.b.PageSize(); got != tc.ps {
			t.Errorf("%v.PageSize() = %d, want %d", tc.b, got, tc.ps)
		}
		if got := tc.b.Hugetlb(); got != tc.huge {
			t.Errorf("%v.Hugetlb() = %v, want %v", tc.b, got, tc.huge)
		}
	}
}

func TestNewArenaBadInput(t *testing.T) {
	tests := []struct {
		name string
		cfg  ArenaConfig
		want error
	}{
		{"zero size", ArenaConfig{Size: 0}, ErrInvalidSize},
		{"negative size", ArenaConfig{Size: -4096}, ErrInvalidSize},
		{"unknown backing", ArenaConfig{Size: 4096, Backings: []Backing{Backing(99)}}, ErrInvalidBacking},
		{"negative backing", ArenaConfig{Size: 4096, Backings: []Backing{Backing4K, Backing(-1)}}, ErrInvalidBacking},
		{"huge size", ArenaConfig{Size: maxInt, Backings: []Backing{Backing4K}}, ErrInvalidSize},
		{"memfd size not a page multiple", ArenaConfig{Size: 3 << 20, Backings: []Backing{BackingMemfd2M}}, ErrMemfdSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewArena(tc.cfg)
			if err == nil {
				a.Close()
				t.Fatalf("NewArena(%+v) succeeded, want %v", tc.cfg, tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("NewArena(%+v) = %v, want errors.Is %v", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestArena4K(t *testing.T) {
	a, err := NewArena(ArenaConfig{Size: 5000, Backings: []Backing{Backing4K}, Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Len() != 8192 || a.Backing() != Backing4K || a.PageSize() != 4096 || a.Fd() != -1 || len(a.Fallbacks()) != 0 {
		t.Fatalf("arena len %d backing %v page %d fd %d fallbacks %v", a.Len(), a.Backing(), a.PageSize(), a.Fd(), a.Fallbacks())
	}
	mem := a.Bytes()
	if len(mem) != 8192 || uintptr(unsafeAddr(mem)) != a.Addr() || a.Addr()%4096 != 0 {
		t.Fatalf("Bytes len %d at %#x, Addr %#x", len(mem), unsafeAddr(mem), a.Addr())
	}
	for i := range mem {
		if mem[i] != 0 {
			t.Fatalf("fresh arena byte %d = %d", i, mem[i])
		}
		mem[i] = byte(i)
	}
	r, err := a.Residency()
	if err != nil {
		t.Fatal(err)
	}
	if r.KernelPageSize != 4096 || r.Rss != 8192 || r.AnonHugePages != 0 || !slices.Contains(r.VmFlags, "nh") {
		t.Fatalf("residency %+v: want 4 KiB pages, 8 KiB resident, no THP, nh (MADV_NOHUGEPAGE)", r)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if a.Bytes() != nil {
		t.Fatal("Bytes after Close is not nil")
	}
	if _, err := a.Residency(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Residency after Close = %v, want ErrClosed", err)
	}
}

func TestArenaTHP(t *testing.T) {
	if err := thpAvailable(); err != nil {
		testutil.RequireFeature(t, "transparent hugepages", err)
	}
	a, err := NewArena(ArenaConfig{Size: 3 << 20, Backings: []Backing{BackingTHP}, Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Len() != 4<<20 || a.Addr()%(2<<20) != 0 || a.Backing() != BackingTHP {
		t.Fatalf("THP arena len %d addr %#x backing %v: want 4 MiB on a 2 MiB boundary", a.Len(), a.Addr(), a.Backing())
	}
	r, err := a.Residency()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.VmFlags, "hg") {
		t.Fatalf("VmFlags %v lack hg: MADV_HUGEPAGE not applied", r.VmFlags)
	}
	if r.Rss != int64(a.Len()) {
		t.Fatalf("Rss %d after Populate, want %d", r.Rss, a.Len())
	}
	// How much the kernel backs with real transparent hugepages depends on
	// free contiguous memory; report it, the demo and docs show it too.
	t.Logf("THP arena: %d of %d bytes in transparent hugepages", r.AnonHugePages, a.Len())
}

func TestFallbackRecorded(t *testing.T) {
	// A memfd of 3 MiB is refused (not a 2 MiB multiple); the policy then
	// falls back to 4 KiB pages and says why.
	a, err := NewArena(ArenaConfig{Size: 3 << 20, Backings: []Backing{BackingMemfd2M, Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	fb := a.Fallbacks()
	if a.Backing() != Backing4K || len(fb) != 1 {
		t.Fatalf("backing %v fallbacks %v: want 4K after one refusal", a.Backing(), fb)
	}
	var be *BackingError
	if !errors.As(fb[0], &be) || be.Backing != BackingMemfd2M || !errors.Is(fb[0], ErrMemfdSize) {
		t.Fatalf("fallback %v: want a *BackingError for memfd-2M wrapping ErrMemfdSize", fb[0])
	}
	if !strings.Contains(fb[0].Error(), "4194304") {
		t.Fatalf("fallback %q does not say which size to ask for", fb[0])
	}
}

// moreThanAvailable returns a 2 MiB-hugetlb size the kernel cannot grant
// now — 8 GiB beyond what is available, so that another test process
// reserving pages meanwhile does not change the outcome — or skips when
// hugetlb overcommit could grant anything.
func moreThanAvailable(t *testing.T) (int, HugeCounts) {
	t.Helper()
	c, err := readHugeCounts(size2M)
	if err != nil {
		t.Skipf("no 2 MiB hugetlb counters: %v", err)
	}
	if oc, _ := readInt(hugeDir(size2M) + "/nr_overcommit_hugepages"); oc > 0 {
		t.Skipf("nr_overcommit_hugepages is %d: the kernel may grant surplus pages", oc)
	}
	return (c.Available() + 4096) * size2M, c
}

func TestNoHugepagesTeaches(t *testing.T) {
	size, c := moreThanAvailable(t)
	_, err := NewArena(ArenaConfig{Size: size, Backings: []Backing{BackingHugetlb2M}})
	if !errors.Is(err, ErrNoHugepages) {
		t.Fatalf("NewArena of %d bytes with %d pages available = %v, want ErrNoHugepages", size, c.Available(), err)
	}
	var be *BackingError
	if !errors.As(err, &be) || be.Backing != BackingHugetlb2M {
		t.Fatalf("error %v carries no *BackingError for hugetlb-2M", err)
	}
	msg := err.Error()
	for _, want := range []string{nrHugepagesPath(size2M), "needs " + strconv.Itoa(size/size2M) + " pages of 2 MiB", "cannot allocate memory"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}

func TestFallbackFromHugetlb(t *testing.T) {
	size, _ := moreThanAvailable(t)
	a, err := NewArena(ArenaConfig{Size: size, Backings: []Backing{BackingHugetlb2M, Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Backing() != Backing4K || len(a.Fallbacks()) != 1 || !errors.Is(a.Fallbacks()[0], ErrNoHugepages) {
		t.Fatalf("backing %v fallbacks %v: want 4K after ErrNoHugepages", a.Backing(), a.Fallbacks())
	}
}

func TestAllRefusedJoinsReasons(t *testing.T) {
	size, _ := moreThanAvailable(t)
	size += 1 << 20 // also not a 2 MiB multiple: memfd refuses for its own reason
	_, err := NewArena(ArenaConfig{Size: size, Backings: []Backing{BackingHugetlb2M, BackingMemfd2M}})
	if !errors.Is(err, ErrNoHugepages) || !errors.Is(err, ErrMemfdSize) {
		t.Fatalf("error %v: want both refusals (ErrNoHugepages, ErrMemfdSize)", err)
	}
}

func TestLock(t *testing.T) {
	small, err := NewArena(ArenaConfig{Size: 1 << 20, Backings: []Backing{Backing4K}, Lock: true})
	if err != nil {
		t.Fatalf("locking 1 MiB (within RLIMIT_MEMLOCK): %v", err)
	}
	r, err := small.Residency()
	small.Close()
	if err != nil || r.Locked != 1<<20 || !small.Locked() {
		t.Fatalf("locked arena residency %+v err %v", r, err)
	}

	// 64 MiB exceeds the usual 8 MiB RLIMIT_MEMLOCK: without CAP_IPC_LOCK
	// it must fail and say why; with it, it must succeed.
	big, err := NewArena(ArenaConfig{Size: 64 << 20, Backings: []Backing{Backing4K}, Lock: true})
	if hasCapability(capIPCLock) {
		if err != nil {
			t.Fatalf("lock 64 MiB with CAP_IPC_LOCK: %v", err)
		}
		big.Close()
		return
	}
	if err == nil {
		big.Close()
		t.Skip("RLIMIT_MEMLOCK allows 64 MiB here; the refusal path is not reachable")
	}
	if !errors.Is(err, ErrMemlock) || !strings.Contains(err.Error(), "CAP_IPC_LOCK") || !strings.Contains(err.Error(), "RLIMIT_MEMLOCK") {
		t.Fatalf("lock 64 MiB without CAP_IPC_LOCK: %v, want ErrMemlock naming RLIMIT_MEMLOCK and CAP_IPC_LOCK", err)
	}
}

func TestPhysUnprivileged(t *testing.T) {
	if hasCapability(capSysAdmin) {
		t.Skip("runs without CAP_SYS_ADMIN only (as root, TestHugetlb2M checks the addresses)")
	}
	a, err := NewArena(ArenaConfig{Size: 1 << 20, Backings: []Backing{Backing4K}, Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.PhysRuns(); !errors.Is(err, ErrPrivilege) {
		t.Fatalf("PhysRuns unprivileged = %v, want ErrPrivilege", err)
	}
	if _, err := a.PhysAddr(0); !errors.Is(err, ErrPrivilege) {
		t.Fatalf("PhysAddr unprivileged = %v, want ErrPrivilege", err)
	}
}

func TestPhysBadOffset(t *testing.T) {
	a, err := NewArena(ArenaConfig{Size: 4096, Backings: []Backing{Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, off := range []int{-1, 4096} {
		if _, err := a.PhysAddr(off); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("PhysAddr(%d) = %v, want ErrOutOfRange", off, err)
		}
	}
}

func TestReserveUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as a non-root user only (as root, the privileged tests reserve)")
	}
	if _, err := Reserve(size2M, 1); !errors.Is(err, ErrPrivilege) {
		t.Fatalf("Reserve as euid %d = %v, want ErrPrivilege", os.Geteuid(), err)
	}
}

func TestReserveBadInput(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := Reserve(size2M, n); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("Reserve(2M, %d) = %v, want ErrInvalidSize", n, err)
		}
	}
	if _, err := Reserve(12345, 1); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Reserve(12345, 1) = %v, want ErrNotSupported", err)
	}
}
