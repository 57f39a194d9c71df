package ucx

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/engine"
)

// regState is the cache's registrations as "lo-hi:refs" in pages of mem,
// in address order (then length), space-separated.
func regState(b *Backend, mem []byte) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	base := uint64(uintptr(unsafePointer(mem)))
	var out []string
	for _, r := range unsafe.Slice(b.be.regs, b.be.nregs) {
		a := uint64(r.addr)
		if a < base || a >= base+uint64(len(mem)) {
			continue // not of mem (the rig's own arena)
		}
		out = append(out, fmt.Sprintf("%d-%d:%d", (a-base)/pageSize, (a-base+uint64(r.len))/pageSize, uint32(r.refs)))
	}
	return strings.Join(out, " ")
}

const pageSize = 4096

// overlapRanges are the test's regions, in pages: A and B overlap, neither
// inside the other; R lies in the overlap; D inside B, across A's end; E
// and F touch, E at A's end (a run of the two is in neither).
var overlapRanges = map[string][2]int{
	"A": {0, 8}, "B": {4, 12}, "R": {5, 6}, "D": {6, 10}, "E": {7, 8}, "F": {8, 9},
}

// overlapStep is one call: "+X" registers ranges X (one region each, in
// one call: "+EF"), "-X" releases them; want is regState after it.
type overlapStep struct{ op, want string }

// TestRegisterOverlap: with cached registrations that overlap, every
// release drops the reference its registration took — on the oldest
// cached registration that held the region then, or on the one the call
// made — so a registration is unmapped with the last region that
// referenced it, never earlier (unmapping memory an arena inside it still
// uses) nor later (mapped forever). After each step the registrations and
// their counts are as the rule says; an arena mapped inside R before the
// releases stays usable (a put and a get through it) until it is
// unmapped, and then nothing of the memory stays registered.
func TestRegisterOverlap(t *testing.T) {
	cases := []struct {
		name  string
		steps []overlapStep
	}{
		{"R before B", []overlapStep{
			{"+A", "0-8:1"}, {"+R", "0-8:2"}, {"+B", "0-8:2 4-12:1"},
			{"-R", "0-8:1 4-12:1"}, {"-B", "0-8:1"}, {"-A", ""}}},
		{"R before B, A released first", []overlapStep{
			{"+A", "0-8:1"}, {"+R", "0-8:2"}, {"+B", "0-8:2 4-12:1"},
			{"-A", "0-8:1 4-12:1"}, {"-B", "0-8:1"}, {"-R", ""}}},
		{"R after B: the older A", []overlapStep{
			{"+A", "0-8:1"}, {"+B", "0-8:1 4-12:1"}, {"+R", "0-8:2 4-12:1"},
			{"-A", "0-8:1 4-12:1"}, {"-R", "4-12:1"}, {"-B", ""}}},
		{"B first: R on B", []overlapStep{
			{"+B", "4-12:1"}, {"+A", "0-8:1 4-12:1"}, {"+R", "0-8:1 4-12:2"},
			{"-B", "0-8:1 4-12:1"}, {"-A", "4-12:1"}, {"-R", ""}}},
		{"R twice, B between", []overlapStep{
			{"+A", "0-8:1"}, {"+R", "0-8:2"}, {"+B", "0-8:2 4-12:1"}, {"+R", "0-8:3 4-12:1"},
			{"-B", "0-8:3"}, {"-R", "0-8:2"}, {"-A", "0-8:1"}, {"-R", ""}}},
		{"D across A's end", []overlapStep{
			{"+A", "0-8:1"}, {"+D", "0-8:1 6-10:1"}, {"+B", "0-8:1 4-12:1 6-10:1"}, {"+R", "0-8:2 4-12:1 6-10:1"},
			{"-D", "0-8:2 4-12:1"}, {"-A", "0-8:1 4-12:1"}, {"-B", "0-8:1"}, {"-R", ""}}},
		{"a run in neither: E on A, F on the run's", []overlapStep{
			{"+A", "0-8:1"}, {"+EF", "0-8:2 7-9:1"}, {"+B", "0-8:2 4-12:1 7-9:1"},
			{"-A", "0-8:1 4-12:1 7-9:1"}, {"-F", "0-8:1 4-12:1"}, {"-E", "4-12:1"}, {"-B", ""}}},
		{"a run in neither, released in one call", []overlapStep{
			{"+B", "4-12:1"}, {"+A", "0-8:1 4-12:1"}, {"+EF", "0-8:1 4-12:3"},
			{"-EF", "0-8:1 4-12:1"}, {"-B", "0-8:1"}, {"-A", ""}}},
	}
	// Each case has 16 pages of its own (what a failed case left
	// registered stays out of the next one's way), mapped before the rig
	// so that they outlive its backend.
	all, err := unix.Mmap(-1, 0, len(cases)*32*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(all) })
	r, peer := newOverlapRig(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runOverlap(t, r, peer, all[i*32*pageSize:(i*32+16)*pageSize], c.steps)
		})
	}
}

// TestRegisterOverlapOrders: A, B, R and D (overlapRanges) registered
// one per call in every order and released in every order: after each
// step the registrations and their counts are those of a model of the
// rule (a region's reference on the oldest registration that holds it,
// else on a new one of its own; its release from the same), no release
// fails, and nothing stays registered.
func TestRegisterOverlapOrders(t *testing.T) {
	b, mem := newRegBackend(t, 16*pageSize)
	names := []string{"A", "B", "R", "D"}
	orders := perms(names)
	for _, reg := range orders {
		for _, rel := range orders {
			var m overlapModel
			steps := make([]string, 0, 8)
			for _, n := range reg {
				steps = append(steps, "+"+n)
			}
			for _, n := range rel {
				steps = append(steps, "-"+n)
			}
			for i, st := range steps {
				p := overlapRanges[st[1:]]
				rs := [][]byte{mem[p[0]*pageSize : p[1]*pageSize]}
				var err error
				if st[0] == '+' {
					err = b.RegisterRegions(rs)
					m.register(p[0], p[1])
				} else {
					err = b.UnregisterRegions(rs)
					m.release(p[0], p[1])
				}
				if err != nil {
					t.Fatalf("%v, step %d: %v", steps, i, err)
				}
				if got, want := regState(b, mem), m.String(); got != want {
					t.Fatalf("%v, step %d %s: registrations %q, want %q", steps, i, st, got, want)
				}
			}
		}
	}
}

// perms is every order of s.
func perms(s []string) [][]string {
	if len(s) <= 1 {
		return [][]string{append([]string(nil), s...)}
	}
	var out [][]string
	for i := range s {
		rest := append(append([]string(nil), s[:i]...), s[i+1:]...)
		for _, p := range perms(rest) {
			out = append(out, append([]string{s[i]}, p...))
		}
	}
	return out
}

// overlapModel is the cache's rule for single-region calls, in pages.
type overlapModel struct {
	regs []struct{ lo, hi, refs, seq int }
	seq  int
}

// holder is the index of the oldest registration containing [lo, hi), or -1.
func (m *overlapModel) holder(lo, hi int) int {
	best := -1
	for i, r := range m.regs {
		if r.lo <= lo && hi <= r.hi && (best < 0 || r.seq < m.regs[best].seq) {
			best = i
		}
	}
	return best
}

func (m *overlapModel) register(lo, hi int) {
	if i := m.holder(lo, hi); i >= 0 {
		m.regs[i].refs++
		return
	}
	m.seq++
	m.regs = append(m.regs, struct{ lo, hi, refs, seq int }{lo, hi, 1, m.seq})
}

func (m *overlapModel) release(lo, hi int) {
	if i := m.holder(lo, hi); i >= 0 {
		if m.regs[i].refs--; m.regs[i].refs == 0 {
			m.regs = append(m.regs[:i], m.regs[i+1:]...)
		}
	}
}

// String is regState's form of the model.
func (m *overlapModel) String() string {
	rs := append(m.regs[:0:0], m.regs...)
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].lo != rs[j].lo {
			return rs[i].lo < rs[j].lo
		}
		return rs[i].hi < rs[j].hi
	})
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%d-%d:%d", r.lo, r.hi, r.refs))
	}
	return strings.Join(out, " ")
}

// newOverlapRig is a rig over tcp connected to a second one (for the
// transfers through the arena).
func newOverlapRig(t *testing.T) (r *rig, peer uint32) {
	a := newRigConfig(t, "tcp", 64, Config{Listen: listenAddr("tcp")})
	r = newRig(t, "tcp", 64)
	return r, connect(t, r.b, a.b.Addr())
}

// runOverlap carries out steps on r's backend, with an arena (slot 1) mapped
// over R's page before the first release and used after each step.
func runOverlap(t *testing.T, r *rig, peer uint32, mem []byte, steps []overlapStep) {
	b := r.b
	regions := func(names string) [][]byte {
		var rs [][]byte
		for _, n := range names {
			p := overlapRanges[string(n)]
			rs = append(rs, mem[p[0]*pageSize:p[1]*pageSize])
		}
		return rs
	}
	if s := regState(b, mem); s != "" {
		t.Fatalf("registrations before the case: %q", s)
	}
	arena := false
	defer func() {
		if arena {
			b.UnmapArena(1)
		}
	}()
	for i, s := range steps {
		if s.op[0] == '-' && !arena {
			// The arena takes its reference on the registration that
			// holds R's page then; it must outlive every release.
			if _, err := b.mapMem(1, regions("R")[0], false); err != nil {
				t.Fatalf("step %d: map an arena over R: %v", i, err)
			}
			arena = true
		}
		var err error
		if s.op[0] == '+' {
			err = b.RegisterRegions(regions(s.op[1:]))
		} else {
			err = b.UnregisterRegions(regions(s.op[1:]))
		}
		if err != nil {
			t.Fatalf("step %d %s: %v", i, s.op, err)
		}
		got := regState(b, mem)
		if arena {
			// The arena's own reference: one more on the registration
			// it took (compare without it).
			got = withoutArena(t, b, mem, got)
		}
		if got != s.want {
			t.Fatalf("step %d %s: registrations %q, want %q", i, s.op, got, s.want)
		}
		if arena {
			overlapTransfer(t, r, peer, mem, i)
		}
	}
	if err := b.UnmapArena(1); err != nil {
		t.Fatal(err)
	}
	arena = false
	if s := regState(b, mem); s != "" {
		t.Fatalf("after the arena went: registrations %q, want none", s)
	}
}

// withoutArena is state with the arena's reference taken off the
// registration it holds (slot_reg[1]), which must be one of state's.
func withoutArena(t *testing.T, b *Backend, mem []byte, state string) string {
	t.Helper()
	b.mu.Lock()
	reg := b.be.slot_reg[1]
	b.mu.Unlock()
	if reg == nil {
		t.Fatal("the arena holds no registration of the cache")
	}
	base := uint64(uintptr(unsafePointer(mem)))
	lo, hi := (uint64(reg.addr)-base)/pageSize, (uint64(reg.addr)-base+uint64(reg.len))/pageSize
	key := fmt.Sprintf("%d-%d:", lo, hi)
	f := strings.Fields(state)
	for i, e := range f {
		if strings.HasPrefix(e, key) {
			var n int
			fmt.Sscanf(e[len(key):], "%d", &n)
			if n == 1 {
				f = append(f[:i], f[i+1:]...)
			} else {
				f[i] = fmt.Sprintf("%s%d", key, n-1)
			}
			return strings.Join(f, " ")
		}
	}
	t.Fatalf("the arena's registration %d-%d is not cached (%q): unmapped under it", lo, hi, state)
	return ""
}

// overlapTransfer puts R's page (arena 1) to the peer and gets it back
// into the page: the arena's registration is alive.
func overlapTransfer(t *testing.T, r *rig, peer uint32, mem []byte, step int) {
	t.Helper()
	p := overlapRanges["R"]
	page := mem[p[0]*pageSize : p[1]*pageSize]
	for i := range page {
		page[i] = byte(step + i)
	}
	h := backend.Endpoint{Kind: engine.LocHost, Arena: 1, Addr: uint64(uintptr(unsafePointer(page)))}
	rem := backend.Endpoint{Kind: engine.LocRemote, Peer: peer, Off: 0}
	for k, put := range []bool{true, false} {
		if !put {
			clear(page)
		}
		var op backend.Op
		var err error
		if put {
			err = r.b.Prepare(h, rem, pageSize, &op)
		} else {
			err = r.b.Prepare(rem, h, pageSize, &op)
		}
		if err != nil {
			t.Fatalf("step %d: prepare: %v", step, err)
		}
		if !r.post(uint64(k), &op, true) {
			t.Fatalf("step %d: Forward refused", step)
		}
		r.b.Flush()
		got := map[uint64]backend.Completion{}
		r.wait(got, 1)
		if c := got[uint64(k)]; c.Status != backend.StatusOK || c.N != pageSize {
			t.Fatalf("step %d: transfer through the arena over R: status %d (%v), %d bytes", step, c.Status, r.b.Err(c.Status), c.N)
		}
	}
	for i := range page {
		if page[i] != byte(step+i) {
			t.Fatalf("step %d: byte %d came back %d, want %d", step, i, page[i], byte(step+i))
		}
	}
}

// BenchmarkRegisterLookup: a registration and release of cached memory
// when one large registration lies below many small ones (10 000 regions
// of 4 KiB, 8 KiB apart, registered first; then the 80 MiB around them):
// the page registered is held by the large one only, so a lookup that
// walks back over every entry that starts below it pays for each small
// one.
func BenchmarkRegisterLookup(b *testing.B) {
	const n, size, stride = 10000, 4 << 10, 8 << 10
	be, mem := newRegBackend(b, n*stride)
	small := make([][]byte, n)
	for i := range small {
		small[i] = mem[i*stride : i*stride+size]
	}
	if err := be.RegisterRegions(small); err != nil {
		b.Fatal(err)
	}
	if err := be.RegisterRegions([][]byte{mem}); err != nil {
		b.Fatal(err)
	}
	if m, _ := be.RegistrationStats(); m != n+1 {
		b.Fatalf("%d registrations, want %d", m, n+1)
	}
	page := [][]byte{mem[len(mem)-size:]} // in the last gap: the large one's only
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := be.RegisterRegions(page); err != nil {
			b.Fatal(err)
		}
		if err := be.UnregisterRegions(page); err != nil {
			b.Fatal(err)
		}
	}
}
