package ucx

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/internal/testutil"
)

// newRegBackend is a backend over UCX_TLS=tcp (the cache is not used with
// SharedMemory) and an anonymous mapping of n bytes, both released at the
// end. BenchmarkRegister runs under HCOMM_UCX_TLS when it is set: over
// verbs ucp_mem_map pins the pages (ibv_reg_mr), over tcp it pins nothing.
func newRegBackend(tb testing.TB, n int) (*Backend, []byte) {
	tb.Helper()
	return newRegBackendConfig(tb, n, Config{})
}

// newRegBackendConfig is newRegBackend with cfg.
func newRegBackendConfig(tb testing.TB, n int, cfg Config) (*Backend, []byte) {
	tb.Helper()
	tls := "tcp"
	if _, bench := tb.(*testing.B); bench && os.Getenv(tlsEnv) != "" {
		tls = os.Getenv(tlsEnv)
	}
	tb.Setenv("UCX_TLS", tls)
	b, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if err != nil {
		b.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		b.Close()
		unix.Munmap(mem)
	})
	return b, mem
}

// TestRegisterCache: memory registered once is not registered again —
// RegisterRegions of the same range, of a range inside it, and MapArena of
// an arena inside it are answered from the cache (no ucp_mem_map) — many
// adjacent regions in one call are one registration whatever their order,
// scattered ones too far apart to cover one each, and the last reference
// unmaps.
func TestRegisterCache(t *testing.T) {
	b, mem := newRegBackend(t, 64<<20)
	step := func(what string, wantMaps, wantHits uint64) {
		t.Helper()
		if m, h := b.RegistrationStats(); m != wantMaps || h != wantHits {
			t.Fatalf("%s: %d ucp_mem_map calls, %d cache hits; want %d, %d", what, m, h, wantMaps, wantHits)
		}
	}
	big := mem[:16<<20]
	if err := b.RegisterRegions([][]byte{big}); err != nil {
		t.Fatal(err)
	}
	step("first registration", 1, 0)
	if err := b.RegisterRegions([][]byte{big}); err != nil {
		t.Fatal(err)
	}
	step("the same again", 1, 1)
	if err := b.RegisterRegions([][]byte{big[4096:8192]}); err != nil {
		t.Fatal(err)
	}
	step("a range inside", 1, 2)
	if _, err := b.mapMem(0, big[1<<20:2<<20], false); err != nil {
		t.Fatal(err)
	}
	step("an arena inside", 1, 3)
	if off, ok := b.Offset(uintptr(unsafePointer(big)) + 1<<20 + 5); !ok || off != 5 {
		t.Fatalf("Offset in the cached arena: %d, %v", off, ok)
	}
	// 1000 adjacent 16 KiB regions in random order: one run.
	small := mem[32<<20 : 32<<20+1000*16<<10]
	regs := make([][]byte, 1000)
	for i := range regs {
		regs[i] = small[i*16<<10 : (i+1)*16<<10]
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(regs), func(i, j int) { regs[i], regs[j] = regs[j], regs[i] })
	if err := b.RegisterRegions(regs); err != nil {
		t.Fatal(err)
	}
	step("1000 adjacent regions", 2, 3)
	// 100 scattered ones, gaps wider than a cover bridges (68 KiB between
	// each): one registration each.
	var scat [][]byte
	for i := 0; i < 100; i++ {
		o := 50<<20 + i*(16<<10+68<<10)
		scat = append(scat, mem[o:o+16<<10])
	}
	if err := b.RegisterRegions(scat); err != nil {
		t.Fatal(err)
	}
	step("100 scattered regions", 102, 3)
	if err := b.RegisterRegions(scat[10:20]); err != nil {
		t.Fatal(err)
	}
	step("10 of them again", 102, 13)
	// Releases.
	if err := b.UnregisterRegions([][]byte{mem[60<<20 : 61<<20]}); !errors.Is(err, backend.ErrBadConfig) {
		t.Fatalf("unregister of memory never registered: %v, want ErrBadConfig", err)
	}
	for _, rs := range [][][]byte{regs, scat, scat[10:20], {big}, {big}, {big[4096:8192]}} {
		if err := b.UnregisterRegions(rs); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.be.nregs; n != 1 {
		t.Fatalf("%d registrations cached with only the arena left, want 1 (its own)", n)
	}
	if err := b.UnmapArena(0); err != nil {
		t.Fatal(err)
	}
	if n := b.be.nregs; n != 0 {
		t.Fatalf("%d registrations cached after the last reference went", n)
	}
	if err := b.RegisterRegions([][]byte{big}); err != nil {
		t.Fatal(err)
	}
	step("registered anew", 103, 13)
}

// TestRegisterCover: runs close together in one mapping are one covering
// registration, within the policy (each gap at most RegisterGap, the gaps
// together at most an eighth of the regions' bytes, one mapping, no cached
// registration in the way); a region later registered inside a covered gap
// is not held by the cover (a registration of its own), one in a covered
// run is; the last reference unmaps the cover; a refused cover
// falls back to one registration per run and says why.
func TestRegisterCover(t *testing.T) {
	const size, gap = 64 << 10, 4096
	b, mem := newRegBackend(t, 64<<20)
	check := func(what string, wantMaps, wantHits uint64, want CoverStats) {
		t.Helper()
		if m, h := b.RegistrationStats(); m != wantMaps || h != wantHits {
			t.Fatalf("%s: %d ucp_mem_map calls, %d cache hits; want %d, %d", what, m, h, wantMaps, wantHits)
		}
		if c := b.RegistrationCovers(); c != want {
			t.Fatalf("%s: covers %+v, want %+v", what, c, want)
		}
	}
	scattered := func(base, n, size, gap int) [][]byte {
		rs := make([][]byte, n)
		for i := range rs {
			o := base + i*(size+gap)
			rs[i] = mem[o : o+size]
		}
		rand.New(rand.NewPCG(3, 4)).Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		return rs
	}
	// 100 regions of 64 KiB, 4 KiB apart, in random order: one cover.
	regs := scattered(0, 100, size, gap)
	if err := b.RegisterRegions(regs); err != nil {
		t.Fatal(err)
	}
	check("100 regions 4 KiB apart", 1, 0, CoverStats{Covers: 1, Gaps: 99, GapBytes: 99 * gap})
	if n := b.be.nregs; n != 1 {
		t.Fatalf("%d registrations cached, want the cover alone", n)
	}
	inGap := mem[size : size+gap]
	if err := b.RegisterRegions([][]byte{inGap, regs[7]}); err != nil {
		t.Fatal(err)
	}
	// The gap is registered (covered) but not held: memory the caller may
	// free and reuse gets a registration of its own, of its pages then.
	check("a covered gap and a region again", 2, 1, CoverStats{Covers: 1, Gaps: 99, GapBytes: 99 * gap})
	if err := b.UnregisterRegions([][]byte{inGap, regs[7]}); err != nil {
		t.Fatal(err)
	}
	if err := b.UnregisterRegions(regs[:50]); err != nil {
		t.Fatal(err)
	}
	if n := b.be.nregs; n != 1 {
		t.Fatalf("%d registrations cached with 50 regions still held, want the cover", n)
	}
	if err := b.UnregisterRegions(regs[50:]); err != nil {
		t.Fatal(err)
	}
	if n := b.be.nregs; n != 0 {
		t.Fatalf("%d registrations cached after the last reference went", n)
	}
	cov := CoverStats{Covers: 1, Gaps: 99, GapBytes: 99 * gap}

	// Gaps wider than RegisterGap, or more than an eighth of the regions'
	// bytes: one registration per region.
	wide := scattered(8<<20, 10, size, DefaultRegisterGap+4096)
	if err := b.RegisterRegions(wide); err != nil {
		t.Fatal(err)
	}
	check("gaps wider than RegisterGap", 12, 1, cov)
	dense := scattered(16<<20, 10, 16<<10, 8<<10) // a gap is half a region
	if err := b.RegisterRegions(dense); err != nil {
		t.Fatal(err)
	}
	check("gaps half the regions", 22, 1, cov)
	// 8 KiB regions with 1 KiB gaps: exactly an eighth, bridged.
	eighth := scattered(20<<20, 10, 8<<10, 1<<10)
	if err := b.RegisterRegions(eighth); err != nil {
		t.Fatal(err)
	}
	cov = CoverStats{Covers: 2, Gaps: 108, GapBytes: 99*gap + 9<<10}
	check("gaps an eighth of the regions", 23, 1, cov)
	for _, rs := range [][][]byte{wide, dense, eighth} {
		if err := b.UnregisterRegions(rs); err != nil {
			t.Fatal(err)
		}
	}

	// A page in the middle made another mapping (PROT_NONE, as a guard
	// page): two covers, one each side of it.
	guard := scattered(24<<20, 10, size, gap)
	hole := 24<<20 + 5*(size+gap) - gap
	if err := unix.Mprotect(mem[hole:hole+gap], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterRegions(guard); err != nil {
		t.Fatal(err)
	}
	cov = CoverStats{Covers: 4, Gaps: 116, GapBytes: 99*gap + 9<<10 + 8*gap}
	check("a guard page between two halves", 25, 1, cov)
	if err := b.UnregisterRegions(guard); err != nil {
		t.Fatal(err)
	}
	// Memory not mapped at all between them: the same. (unix.Munmap of a
	// slice would unmap the whole mapping it came from.)
	if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafePointer(mem[hole:])), gap, 0); errno != 0 {
		t.Fatal(errno)
	}
	if err := b.RegisterRegions(guard); err != nil {
		t.Fatal(err)
	}
	cov = CoverStats{Covers: 6, Gaps: 124, GapBytes: 99*gap + 9<<10 + 16*gap}
	check("a hole between two halves", 27, 1, cov)
	if err := b.UnregisterRegions(guard); err != nil {
		t.Fatal(err)
	}

	// A cached registration in a gap: the cover stops before it.
	lone := mem[32<<20+size : 32<<20+size+512]
	if err := b.RegisterRegions([][]byte{lone}); err != nil {
		t.Fatal(err)
	}
	split := scattered(32<<20, 4, size, gap)
	if err := b.RegisterRegions(split); err != nil {
		t.Fatal(err)
	}
	cov = CoverStats{Covers: 7, Gaps: 126, GapBytes: 99*gap + 9<<10 + 16*gap + 2*gap}
	check("a cached registration in a gap", 30, 1, cov) // the lone one, run 0, runs 1-3 covered
	for _, rs := range [][][]byte{split, {lone}} {
		if err := b.UnregisterRegions(rs); err != nil {
			t.Fatal(err)
		}
	}

	// A refused cover: run by run, and said.
	b.refuseCovers(true)
	refused := scattered(40<<20, 10, size, gap)
	if err := b.RegisterRegions(refused); err != nil {
		t.Fatal(err)
	}
	b.refuseCovers(false)
	cov.Refused = 1
	check("a refused cover", 40, 1, cov)
	fbs := b.RegistrationFallbacks()
	if len(fbs) != 1 || !errors.Is(fbs[0], ErrUCX) || !strings.Contains(fbs[0].Error(), "of 10 runs refused") {
		t.Fatalf("fallbacks %v: want one refusal of 10 runs, wrapping ErrUCX", fbs)
	}
	t.Log(fbs[0])
	if err := b.UnregisterRegions(refused); err != nil {
		t.Fatal(err)
	}
	if n := b.be.nregs; n != 0 {
		t.Fatalf("%d registrations cached at the end", n)
	}

	if _, err := New(Config{RegisterGap: MaxRegisterGap + 1}); !errors.Is(err, backend.ErrBadConfig) {
		t.Fatalf("RegisterGap beyond MaxRegisterGap: %v, want ErrBadConfig", err)
	}
	// RegisterGap < 0: never.
	off, m2 := newRegBackendConfig(t, 8<<20, Config{RegisterGap: -1})
	rs := make([][]byte, 10)
	for i := range rs {
		rs[i] = m2[i*(size+gap) : i*(size+gap)+size]
	}
	if err := off.RegisterRegions(rs); err != nil {
		t.Fatal(err)
	}
	if m, _ := off.RegistrationStats(); m != 10 || off.RegistrationCovers() != (CoverStats{}) {
		t.Fatalf("RegisterGap -1: %d ucp_mem_map calls, covers %+v; want 10, none", m, off.RegistrationCovers())
	}
	if err := off.UnregisterRegions(rs); err != nil {
		t.Fatal(err)
	}
}

// TestRegisterUncached: RegisterUncached makes its own ucp_mem_map and
// packed key, outside the cache (the cache neither counts it nor answers a
// later registration of the same memory from it); a release frees it once,
// a second is ErrBadConfig; Close releases what is left, after which a
// release does nothing and a registration is refused.
func TestRegisterUncached(t *testing.T) {
	b, mem := newRegBackend(t, 8<<20)
	if _, err := b.RegisterUncached(nil); !errors.Is(err, backend.ErrBadConfig) {
		t.Fatalf("RegisterUncached(nil): %v, want ErrBadConfig", err)
	}
	rel1, err := b.RegisterUncached(mem[:4<<20])
	if err != nil {
		t.Fatal(err)
	}
	rel2, err := b.RegisterUncached(mem[4<<20:])
	if err != nil {
		t.Fatal(err)
	}
	if len(b.uncached) != 2 {
		t.Fatalf("%d uncached registrations held, want 2", len(b.uncached))
	}
	for r := range b.uncached {
		if r.memh == nil || r.rkey == nil || r.rkeylen == 0 {
			t.Fatalf("uncached registration %#x+%d: memh %v, key %v (%d bytes): want both", r.addr, r.len, r.memh, r.rkey, r.rkeylen)
		}
	}
	if m, h := b.RegistrationStats(); m != 0 || h != 0 || b.be.nregs != 0 {
		t.Fatalf("the cache saw uncached registrations: %d maps, %d hits, %d entries", m, h, b.be.nregs)
	}
	if err := b.RegisterRegions([][]byte{mem[:4<<20]}); err != nil {
		t.Fatal(err)
	}
	if m, h := b.RegistrationStats(); m != 1 || h != 0 {
		t.Fatalf("the cache answered from an uncached registration: %d maps, %d hits; want 1, 0", m, h)
	}
	if err := b.UnregisterRegions([][]byte{mem[:4<<20]}); err != nil {
		t.Fatal(err)
	}
	if err := rel1(); err != nil {
		t.Fatal(err)
	}
	if err := rel1(); !errors.Is(err, backend.ErrBadConfig) {
		t.Fatalf("second release: %v, want ErrBadConfig", err)
	}
	if len(b.uncached) != 1 {
		t.Fatalf("%d uncached registrations held after one release, want 1", len(b.uncached))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b.uncached != nil {
		t.Fatalf("Close left %d uncached registrations", len(b.uncached))
	}
	if err := rel2(); err != nil {
		t.Fatalf("release after Close: %v, want nil", err)
	}
	if _, err := b.RegisterUncached(mem); !errors.Is(err, ErrClosed) {
		t.Fatalf("RegisterUncached after Close: %v, want ErrClosed", err)
	}
}

// TestRegisterAllocs: registering again memory the cache holds, and
// releasing that reference, allocates nothing (the spans for C are the
// backend's reused buffers).
func TestRegisterAllocs(t *testing.T) {
	b, mem := newRegBackend(t, 1<<20)
	regs := [][]byte{mem}
	if err := b.RegisterRegions(regs); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := b.RegisterRegions(regs); err != nil {
			t.Fatal(err)
		}
		if err := b.UnregisterRegions(regs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per cached registration and release", allocs)
	}
	if err := b.UnregisterRegions(regs); err != nil {
		t.Fatal(err)
	}
}

// regHelperEnv makes the test binary the registration helper
// (TestRegisterNoSyscall): it registers 1 GiB, then, between two marker
// system calls, registers and releases it again 1000 times from the cache
// (hc_reg_batch and hc_reg_release, as RegisterRegions and
// UnregisterRegions call them, in one call into C).
const regHelperEnv = "HCOMM_UCX_REG_HELPER"

func regHelper() int {
	runtime.LockOSThread()
	// No progress goroutine: it would contend for the backend's mutex
	// (futex calls that are the mutex's, not the registration's).
	b, err := New(Config{CallerProgress: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	mem, err := unix.Mmap(-1, 0, 1<<30, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	regs := [][]byte{mem}
	if err := b.RegisterRegions(regs); err != nil { // the one ucp_mem_map
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; i < 10; i++ { // warm: the wrapper's first calls
		b.RegisterRegions(regs)
		b.UnregisterRegions(regs)
	}
	// The loop is in C, between its markers: the Go runtime's scheduler
	// work around each call into C (a P handed back, a thread woken) is
	// not the registration's.
	if err := b.benchRegHits(mem, 1000); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	maps, hits := b.RegistrationStats()
	fmt.Printf("%d %d\n", maps, hits)
	return 0
}

// TestRegisterNoSyscall: registering 1 GiB that the cache holds makes no
// system call and no ucp_mem_map. The helper process runs under strace
// (-f: every thread); between its two markers the thread that made them
// makes no system call at all in 1000 registrations and releases (the Go
// runtime's preemption signals and collections are switched off in it).
// TestRegisterCache checks that RegisterRegions takes that path.
func TestRegisterNoSyscall(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		testutil.MissingPrivilege(t, "strace (scripts/deps.sh installs it): "+err.Error())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "strace.log")
	cmd := exec.Command("strace", "-f", "-qq", "-o", log, self, "-test.run=^$")
	// The Go runtime's own system calls on that thread are kept out:
	// no asynchronous preemption (SIGURG, rt_sigreturn, the wake-ups
	// after it) and no garbage collection (its workers' futex wake-ups).
	cmd.Env = append(os.Environ(), regHelperEnv+"=1", "UCX_TLS=tcp", "GODEBUG=asyncpreemptoff=1", "GOGC=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper under strace: %v: %s", err, out)
	}
	var maps, hits int
	if _, err := fmt.Sscan(string(out), &maps, &hits); err != nil || maps != 1 || hits < 1010 {
		t.Fatalf("helper said %q: want 1 ucp_mem_map and >= 1010 cache hits", out)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	tid, n := "", 0
	var between []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch {
		case strings.Contains(l, "/hcomm-reg-start"):
			tid = f[0]
		case strings.Contains(l, "/hcomm-reg-end") && f[0] == tid:
			t.Logf("1000 cached registrations and releases of 1 GiB: %d system calls on their thread (%s); %d ucp_mem_map in all, %d cache hits", n, tid, maps, hits)
			if n != 0 {
				t.Fatalf("cached registrations made %d system calls: %v", n, between)
			}
			return
		case tid != "" && f[0] == tid && !strings.HasPrefix(f[1], "<..."):
			n++
			if len(between) < 10 {
				between = append(between, l)
			}
		}
	}
	t.Fatalf("markers not found in the strace log (%d bytes)", len(data))
}

// BenchmarkRegister: registration through the cache against ucp_mem_map
// called directly in C, in the same process and minutes.
//
//   - 1GiB/first: RegisterRegions of 1 GiB the cache does not hold, then
//     UnregisterRegions (ucp_mem_map and ucp_mem_unmap).
//   - 1GiB/second: the same while another reference holds it: a cache hit.
//   - 1GiB/ucp_mem_map: the C yardstick, map and unmap (over verbs UCX's
//     own registration cache answers all but the first: a second
//     registration through UCX).
//   - 1GiB/ucp_mem_map-cold: the same, UCX's cache dropping it after each
//     unmap (as the backend's release does): a first registration each
//     time.
//   - 10000x64KiB/batched: one RegisterRegions of 10 000 adjacent 64 KiB
//     regions and one UnregisterRegions.
//   - 10000x64KiBscattered/batched: the same with a 4 KiB gap between
//     regions: one covering registration (the gaps are 6% of the bytes).
//   - 10000x64KiBscattered/percall: the same through a backend that makes
//     no covers (RegisterGap -1): one registration per region, as
//     before covers.
//   - 10000x64KiB/second, 10000x64KiBscattered/second: the same calls
//     while another reference holds the regions: cache hits.
//   - 10000x64KiB/ucp_mem_map and 10000x64KiBscattered/ucp_mem_map: 10 000
//     direct ucp_mem_map calls (and unmaps) in C; -cold as above.
//
// Under HCOMM_UCX_TLS (rc_verbs,ud_verbs in the soft-RoCE guest) the
// registrations are the verbs memory domain's: pinned pages.
func BenchmarkRegister(b *testing.B) {
	const n, size, gap = 10_000, 64 << 10, 4096
	be, mem := newRegBackend(b, 1<<30+n*(size+gap))
	gib := mem[:1<<30]
	one := [][]byte{gib}
	b.Run("1GiB/first", func(b *testing.B) {
		for range b.N {
			if err := be.RegisterRegions(one); err != nil {
				b.Fatal(err)
			}
			if err := be.UnregisterRegions(one); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("1GiB/second", func(b *testing.B) {
		if err := be.RegisterRegions(one); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if err := be.RegisterRegions(one); err != nil {
				b.Fatal(err)
			}
			if err := be.UnregisterRegions(one); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		be.UnregisterRegions(one)
	})
	for _, cold := range []bool{false, true} {
		name := "1GiB/ucp_mem_map"
		if cold {
			name += "-cold"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				if err := be.benchMemMap(gib, 1<<30, 0, 1, cold); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	small := mem[1<<30:]
	regions := func(stride int) [][]byte {
		rs := make([][]byte, n)
		for i := range rs {
			rs[i] = small[i*stride : i*stride+size]
		}
		return rs
	}
	adj, scat := regions(size), regions(size+gap)
	// The same UCX_TLS as be (newRegBackend set it for the benchmark).
	nocover, err := New(Config{RegisterGap: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer nocover.Close()
	b.Run("10000x64KiBscattered/percall", func(b *testing.B) {
		for range b.N {
			if err := nocover.RegisterRegions(scat); err != nil {
				b.Fatal(err)
			}
			if err := nocover.UnregisterRegions(scat); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name   string
		rs     [][]byte
		stride uint64
	}{{"10000x64KiB", adj, size}, {"10000x64KiBscattered", scat, size + gap}} {
		b.Run(c.name+"/batched", func(b *testing.B) {
			for range b.N {
				if err := be.RegisterRegions(c.rs); err != nil {
					b.Fatal(err)
				}
				if err := be.UnregisterRegions(c.rs); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/second", func(b *testing.B) {
			if err := be.RegisterRegions(c.rs); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := be.RegisterRegions(c.rs); err != nil {
					b.Fatal(err)
				}
				if err := be.UnregisterRegions(c.rs); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			be.UnregisterRegions(c.rs)
		})
		for _, cold := range []bool{false, true} {
			name := c.name + "/ucp_mem_map"
			if cold {
				name += "-cold"
			}
			b.Run(name, func(b *testing.B) {
				for range b.N {
					if err := be.benchMemMap(small, size, c.stride, n, cold); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
