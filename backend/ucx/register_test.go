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
	tls := "tcp"
	if _, bench := tb.(*testing.B); bench && os.Getenv(tlsEnv) != "" {
		tls = os.Getenv(tlsEnv)
	}
	tb.Setenv("UCX_TLS", tls)
	b, err := New(Config{})
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
// scattered ones one each, and the last reference unmaps.
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
	// 100 scattered ones (a page between each): one registration each.
	var scat [][]byte
	for i := 0; i < 100; i++ {
		o := 50<<20 + i*(16<<10+4096)
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
//   - 10000x64KiB/scattered: the same with a 4 KiB gap between regions
//     (nothing to merge: one registration each).
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
