package soak_test

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

var (
	flagSoak = flag.Duration("soak", 0, "how long to soak (0: a 3 s smoke run, as in go test ./...)")
	flagSeed = flag.Uint64("seed", 0, "the schedule's seed (0: from the clock; a failing run prints it)")
	// -lanes ucx runs the UCX lane alone, -lanes hdma,memory/poll the
	// HDMA lanes and one memory lane: a lane runs when its name
	// ("memory/poll") or its kind ("memory") is in the list.
	flagLanes = flag.String("lanes", "", "comma-separated lanes or lane kinds to run (hdma, file, file-odirect, memory, mixed, ucx; \"\": all)")
	// -memdiag 30s logs where the resident memory is every 30 s (memdiag).
	flagMemDiag = flag.Duration("memdiag", 0, "log a breakdown of the resident memory this often (0: never)")
)

// laneSelected says whether the lane of this name (kind/mode) runs.
func laneSelected(name string) bool {
	if *flagLanes == "" {
		return true
	}
	kind, _, _ := strings.Cut(name, "/")
	for _, s := range strings.Split(*flagLanes, ",") {
		if s = strings.TrimSpace(s); s == name || s == kind {
			return true
		}
	}
	return false
}

type kind int

const (
	kindHDMA kind = iota
	kindFile
	kindDirect
	kindMemory
	// kindMixed: one engine over an HDMA device (with the injected
	// faults), a file and host memory at once; submitter s moves its
	// bytes through the backend kindOfSubmitter(s).
	kindMixed
)

func (k kind) String() string {
	return [...]string{"hdma", "file", "file-odirect", "memory", "mixed"}[k]
}

// mixedKinds is what each submitter of a mixed lane uses.
var mixedKinds = [submitters]kind{kindHDMA, kindFile, kindMemory}

// Each submitter owns a region of 16 slots: one transfer per slot and
// round, so that the transfers of a round never overlap.
const (
	slots      = 16
	slotSize   = 64 << 10
	regionSize = slots * slotSize
	submitters = 3
	cpuThresh  = 4096
	hdmaTimout = 500 * time.Millisecond
	// lateAfter is what the device model counts as late: a descriptor it
	// completed this long after its doorbell, injected latency deducted,
	// is one the driver may rightly have timed out. The device model
	// shares the CPUs with every lane: on an overloaded machine (a TCG
	// guest) it can take longer than hdmaTimout without an injected stall.
	// A tenth below the timeout, so that a driver that timed a descriptor
	// out just before the device completed it is covered too.
	lateAfter = hdmaTimout * 9 / 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// tally is what a lane saw: transfers, verified bytes and failures by kind.
type tally struct {
	staged, ok, verified, bytes            atomic.Uint64
	devErr, timeouts, resetErr, canceled   atomic.Uint64
	refused, expired, engines, closeErrors atomic.Uint64
	deferred                               atomic.Uint64 // closes that left kernel I/O behind (released later)
}

// lane runs engines of one backend kind and mode, one after another.
type lane struct {
	t    *testing.T
	name string
	kind kind
	mode engine.Mode
	seed uint64
	dev  *mock.Device // HDMA: the device every engine of the lane drives
	file *os.File     // file kinds
	tly  tally

	mu       sync.Mutex
	failures []string
}

func (l *lane) failf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, fmt.Sprintf(format, args...))
	}
}

// gen is one engine's life in a lane.
type gen struct {
	l       *lane
	e       *engine.Engine
	closing atomic.Bool  // the controller began closing: cancellations allowed
	mem     sync.RWMutex // held (read) while a submitter touches block memory; Close takes it
	closed  bool         // under mem
	targets []engine.Target
	recs    []*rec // every transfer of this engine (under recMu)
	recMu   sync.Mutex
}

// rec is one transfer: its callback count and result.
type rec struct {
	calls   atomic.Int32
	res     engine.Result
	closing bool // the engine was closing when the callback ran
	staged  bool
	pending *atomic.Int32
	g       *gen
	crc     uint32
	size    int
	slot    int
	slotOff int
	write   bool // phase A (to device/file, or the memory copy)
}

func (r *rec) done(res engine.Result) {
	r.res = res
	r.closing = r.g.closing.Load()
	if r.calls.Add(1) == 1 {
		r.pending.Add(-1)
	}
}

func TestSoak(t *testing.T) {
	dur := *flagSoak
	if dur == 0 {
		dur = 3 * time.Second
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()) % 1_000_000_007
	}
	t.Logf("soak %v, seed %d (replay: make soak SEED=%d)", dur, seed, seed)
	// make soak runs without go test's timeout: a wedged run ends here,
	// with every goroutine's stack and the seed.
	watchdog := time.AfterFunc(dur+3*time.Minute, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("soak wedged: still running %v after its %v (seed %d: make soak SEED=%d SOAK=%v)", 3*time.Minute, dur, seed, seed, dur))
	})
	defer watchdog.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: make soak SEED=%d SOAK=%v replays this schedule", seed, seed, dur)
		}
	}()

	// Hugepages for the pools (the default backings prefer hugetlb 2 MiB):
	// reserved here, given back at the end, and counted for leaks.
	var resv *hugepage.Reservation
	if os.Geteuid() == 0 {
		r, err := hugepage.Reserve(2<<20, 24)
		if err != nil {
			t.Logf("no hugepages reserved (pools fall back to THP/4 KiB): %v", err)
		} else {
			resv = r
			defer func() {
				if err := resv.Release(); err != nil {
					t.Errorf("release hugepages: %v", err)
				}
			}()
		}
	}
	// Side lanes are made before the leak snapshots (a library's
	// process-wide state, set up once, is not theirs to leak).
	var sides []sideLane
	for i, sl := range sideLanes {
		if !laneSelected(sl.kind) {
			continue
		}
		s, err := sl.mk(t, seed*1000+500+uint64(i))
		if err != nil {
			t.Fatalf("side lane %d: %v", i, err)
		}
		sides = append(sides, s)
	}
	huge0 := hugetlbKiB(t)
	runtime.GC()
	g0 := runtime.NumGoroutine()
	fds0 := testutil.SnapshotFDs(t)
	maps0 := countMaps(t)

	dir, err := os.MkdirTemp("/var/tmp", "hcomm-soak-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)

	var lanes []*lane
	n := 0 // lanes made, selected or not: a lane's seed does not depend on -lanes
	add := func(k kind, mode engine.Mode) {
		l := &lane{t: t, kind: k, mode: mode, seed: seed*1000 + uint64(n), name: fmt.Sprintf("%v/%v", k, mode)}
		n++
		if laneSelected(l.name) {
			lanes = append(lanes, l)
		}
	}
	add(kindHDMA, engine.ModeReaper)
	add(kindHDMA, engine.ModePoll)
	add(kindFile, engine.ModeReaper)
	add(kindDirect, engine.ModePoll)
	add(kindDirect, engine.ModeReaper)
	add(kindMemory, engine.ModeReaper)
	add(kindMemory, engine.ModePoll)
	add(kindMixed, engine.ModeReaper)
	add(kindMixed, engine.ModePoll)
	for _, l := range lanes {
		if err := l.setup(dir); err != nil {
			if l.kind == kindDirect && errors.Is(err, errNoDirect) {
				testutil.MissingPrivilege(t, err.Error())
			}
			t.Fatalf("%s: %v", l.name, err)
		}
	}

	if len(lanes)+len(sides) == 0 {
		t.Fatalf("-lanes %q selects no lane", *flagLanes)
	}
	rss := startRSS(dur)
	stopDiag := func() {}
	if *flagMemDiag > 0 {
		stopDiag = memDiag(t, *flagMemDiag, sides)
	}
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(end)
		}()
	}
	for _, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(end)
		}()
	}
	wg.Wait()
	slope, samples := rss.stop()
	stopDiag()

	var total tally
	for _, l := range lanes {
		l.account()
		l.teardown()
		s := &l.tly
		t.Logf("%-20s engines %4d  transfers %8d  ok %8d  verified %8d (%s)  device errors %4d  timeouts %2d  reset failures %4d  canceled %5d  refused %5d  expired %4d  closes leaving kernel I/O %d",
			l.name, s.engines.Load(), s.staged.Load(), s.ok.Load(), s.verified.Load(), mib(s.bytes.Load()),
			s.devErr.Load(), s.timeouts.Load(), s.resetErr.Load(), s.canceled.Load(), s.refused.Load(), s.expired.Load(), s.deferred.Load())
		for _, f := range l.failures {
			t.Errorf("%s: %s", l.name, f)
		}
		total.staged.Add(s.staged.Load())
		total.ok.Add(s.ok.Load())
		total.verified.Add(s.verified.Load())
		total.bytes.Add(s.bytes.Load())
		total.engines.Add(s.engines.Load())
	}
	for _, s := range sides {
		for _, f := range s.report() {
			t.Error(f)
		}
	}
	t.Logf("total: %d engines, %d transfers, %d ok, %d verified by CRC-32C (%s)",
		total.engines.Load(), total.staged.Load(), total.ok.Load(), total.verified.Load(), mib(total.bytes.Load()))

	// Leaks: everything the lanes opened is closed now.
	g1 := settle(g0)
	if g1 > g0 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines leaked: %d → %d\n%s", g0, g1, buf[:runtime.Stack(buf, true)])
	}
	if leaked := fds0.Leaked(testutil.SnapshotFDs(t)); leaked != nil {
		t.Errorf("file descriptors leaked: %v", leaked)
	}
	maps1 := countMaps(t)
	if maps1 > maps0+mapSlack {
		t.Errorf("memory mappings leaked: %d → %d", maps0, maps1)
	}
	huge1 := hugetlbKiB(t)
	if huge1 != huge0 {
		t.Errorf("hugepages leaked: this process maps %d KiB of hugetlb pages, %d KiB before", huge1, huge0)
	}
	t.Logf("leaks: goroutines %d → %d, fds %d → %d, mappings %d → %d, hugetlb pages mapped %d → %d KiB (most at once: %d KiB)",
		g0, g1, len(fds0), len(testutil.SnapshotFDs(t)), maps0, maps1, huge0, huge1, rss.hugeMax)
	t.Logf("RSS slope after warm-up: %+.2f MiB/min over %d samples", slope, samples)
	// The slope is judged only on long runs: over a short one the pool's
	// growth, the runtime's heap target and the page cache's first touches
	// are a slope of their own. From rssJudged on, the fit spans at least
	// 9 minutes (one sample a second) after a minute's warm-up, and a leak of
	// 1 MiB/min stands out of the noise.
	if dur >= rssJudged && slope >= rssMaxSlope {
		t.Errorf("RSS grows %+.2f MiB/min after warm-up (over %d samples), limit %.1f MiB/min on runs of %v or more",
			slope, samples, rssMaxSlope, rssJudged)
	}
}

// sideLanes make lanes with a schedule of their own, run beside the others
// until the same end and checked after them (ucx_lane_test.go: a peer
// process killed and started again). Each is made before the leak
// snapshots; its run leaves nothing behind.
// kind is the lane's kind for -lanes ("ucx").
var sideLanes []struct {
	kind string
	mk   func(t *testing.T, seed uint64) (sideLane, error)
}

type sideLane interface {
	run(end time.Time)
	// report logs the lane's tally and returns its failures.
	report() []string
	// diag is a line about what the lane holds, for -memdiag.
	diag() string
}

// The RSS slope limit and the shortest run it is asserted on.
const (
	rssJudged   = 10 * time.Minute
	rssMaxSlope = 1.0 // MiB/min
)

var errNoDirect = errors.New("O_DIRECT unavailable")

func (l *lane) setup(dir string) error {
	switch l.kind {
	case kindHDMA, kindMixed:
		d, err := mock.New(mock.Config{Name: "soak-" + strconv.Itoa(int(l.seed%1000)), Seed: l.seed, LateAfter: lateAfter, Logger: quiet()})
		if err != nil {
			return err
		}
		l.dev = d
		rng := rand.New(rand.NewPCG(l.seed, 1))
		for _, f := range []mock.Fault{
			{Kind: mock.FaultError, Rate: 1e-3},
			{Kind: mock.FaultLatency, Rate: 2e-3, Latency: time.Duration(100+rng.IntN(1900)) * time.Microsecond},
			{Kind: mock.FaultStall, Rate: 5e-5},
			{Kind: mock.FaultReset, Rate: 1e-4},
		} {
			if err := d.InjectFault(f); err != nil {
				return err
			}
		}
	case kindFile, kindDirect:
		flags := os.O_RDWR | os.O_CREATE
		if l.kind == kindDirect {
			flags |= 0o40000 // O_DIRECT
		}
		f, err := os.OpenFile(filepath.Join(dir, strings.ReplaceAll(l.name, "/", "-")), flags, 0o600)
		if err != nil {
			if l.kind == kindDirect {
				return fmt.Errorf("%w on %s: %w", errNoDirect, dir, err)
			}
			return err
		}
		if err := f.Truncate(submitters * regionSize); err != nil {
			f.Close()
			return err
		}
		l.file = f
	}
	if l.kind == kindMixed {
		f, err := os.OpenFile(filepath.Join(dir, strings.ReplaceAll(l.name, "/", "-")), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if err := f.Truncate(submitters * regionSize); err != nil {
			f.Close()
			return err
		}
		l.file = f
	}
	return nil
}

func (l *lane) teardown() {
	if l.dev != nil {
		l.dev.Close()
	}
	if l.file != nil {
		l.file.Close()
	}
}

// account checks the lane's failures against what its injector logged.
func (l *lane) account() {
	s := &l.tly
	if l.dev == nil {
		for _, c := range []struct {
			what string
			n    uint64
		}{{"device errors", s.devErr.Load()}, {"timeouts", s.timeouts.Load()}, {"reset failures", s.resetErr.Load()}} {
			if c.n != 0 {
				l.failf("%d %s without fault injection", c.n, c.what)
			}
		}
		return
	}
	c := l.dev.Counters()
	l.t.Logf("%-20s injected: %d errors, %d latency, %d stalls, %d resets; device resets %d, IOMMU faults %d, device-memory faults %d, bad descriptors %d, fatal %d, late %d",
		l.name, c.InjectedErrors, c.InjectedLatency, c.InjectedStalls, c.InjectedResets, c.Resets, c.IOMMUFaults, c.DevMemFaults, c.BadDescriptors, c.FatalFaults, c.Late)
	if got := s.devErr.Load(); got != c.InjectedErrors {
		l.failf("%d device-error callbacks, the mock injected %d errors", got, c.InjectedErrors)
	}
	// A timeout needs a device that did not complete in time: an
	// injected stall, or a descriptor the model itself was late with.
	if got := s.timeouts.Load(); got > c.InjectedStalls+c.Late {
		l.failf("%d timeouts, the mock injected only %d stalls and was late with %d descriptors", got, c.InjectedStalls, c.Late)
	}
	// A recovery (after an injected reset, or a timeout: a stall or a
	// late descriptor) fails what was outstanding: at most the queue's
	// 2×QueueDepth entries (64 at most).
	recoveries := c.InjectedResets + max(c.InjectedStalls, s.timeouts.Load())
	if got, most := s.resetErr.Load(), recoveries*2*64; got > most {
		l.failf("%d reset failures, more than %d injected resets and timeouts can explain (%d each)", got, recoveries, 2*64)
	}
	if c.IOMMUFaults+c.DevMemFaults+c.BadDescriptors+c.FatalFaults != 0 {
		l.failf("the device saw IOMMU faults %d, device-memory faults %d, bad descriptors %d, fatal faults %d: something reached it that should not",
			c.IOMMUFaults, c.DevMemFaults, c.BadDescriptors, c.FatalFaults)
	}
}

// run opens engines one after another until end, each for a random life.
func (l *lane) run(end time.Time) {
	for n := uint64(0); time.Now().Before(end); n++ {
		rng := rand.New(rand.NewPCG(l.seed, n<<8))
		g, err := l.open(rng)
		if err != nil {
			l.failf("engine %d: open: %v", n, err)
			return
		}
		l.tly.engines.Add(1)
		var wg sync.WaitGroup
		for s := range submitters {
			wg.Add(1)
			lock := rng.IntN(2) == 0
			go func() {
				defer wg.Done()
				if lock {
					// As code that enters a namespace or calls a
					// thread-bound C library does: the thread exits
					// with the goroutine, with what it submitted to
					// io_uring still in flight.
					runtime.LockOSThread()
				}
				g.submitter(s, rand.New(rand.NewPCG(l.seed, n<<8|uint64(s+1))))
			}()
		}
		life := time.Duration(100+rng.IntN(2900)) * time.Millisecond
		time.Sleep(min(life, time.Until(end)+time.Millisecond))
		g.close(rng)
		wg.Wait()
		g.check(n)
	}
}

func (l *lane) open(rng *rand.Rand) (*gen, error) {
	var be backend.Backend
	var more []backend.Backend
	var err error
	align := 8
	switch l.kind {
	case kindHDMA:
		be, err = hdmadev.New(l.dev, hdmadev.Config{CPUThreshold: cpuThresh, Timeout: hdmaTimout, Logger: quiet()})
	case kindFile, kindDirect:
		be, err = uringfile.New(l.file, uringfile.Config{Logger: quiet()})
		if l.kind == kindDirect {
			align = 4096
		}
	case kindMemory:
		be = memory.New()
	case kindMixed:
		be, err = hdmadev.New(l.dev, hdmadev.Config{CPUThreshold: cpuThresh, Timeout: hdmaTimout, Logger: quiet()})
		if err == nil {
			var fb *uringfile.Backend
			if fb, err = uringfile.New(l.file, uringfile.Config{Logger: quiet()}); err != nil {
				_ = be.Close()
				return nil, err
			}
			more = []backend.Backend{fb, memory.New()}
		}
	}
	if err != nil {
		return nil, err
	}
	e, err := engine.Open(engine.Config{
		Backend:    be,
		Backends:   more,
		PoolSize:   int64(2*submitters*regionSize + 2<<20),
		QueueDepth: []int{8, 16, 64}[rng.IntN(3)],
		Alignment:  align,
		Mode:       l.mode,
		Logger:     quiet(),
	})
	if err != nil {
		return nil, err
	}
	return &gen{l: l, e: e, targets: e.Targets()}, nil
}

// kindOfSubmitter is the backend kind submitter s moves its bytes through.
func (g *gen) kindOfSubmitter(s int) kind {
	if g.l.kind == kindMixed {
		return mixedKinds[s]
	}
	return g.l.kind
}

// deviceAt and fileAt name the lane's device and file: on a mixed engine,
// through its Target half of the time (the other half the Loc names no
// backend and the engine routes it to the only one of its kind).
func (g *gen) deviceAt(off uint64, rng *rand.Rand) engine.Loc {
	if g.l.kind == kindMixed && rng.IntN(2) == 0 {
		return g.targets[0].DeviceAt(off)
	}
	return engine.DeviceAt(off)
}

func (g *gen) fileAt(off int64, rng *rand.Rand) engine.Loc {
	if g.l.kind == kindMixed && rng.IntN(2) == 0 {
		return g.targets[1].FileAt(off)
	}
	return engine.FileAt(off)
}

// close closes the engine the way a program might: at once, or draining
// for a short while first. Memory is not touched meanwhile (mem).
func (g *gen) close(rng *rand.Rand) {
	g.closing.Store(true)
	g.mem.Lock()
	defer g.mem.Unlock()
	var err error
	if rng.IntN(2) == 0 {
		err = g.e.Close()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(20_000))*time.Microsecond)
		err = g.e.Shutdown(ctx)
		cancel()
	}
	if err != nil && g.l.file != nil && strings.Contains(err.Error(), "could not cancel") &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// File I/O the kernel still held when the context ended (a
		// loaded disk): canceled for us, the engine releases the pool
		// when it ends. Wait for that before the next engine uses the
		// file: a canceled write may still land.
		g.l.tly.deferred.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = g.e.Shutdown(ctx)
		cancel()
	}
	if err != nil {
		g.l.tly.closeErrors.Add(1)
		g.l.failf("close: %v", err)
	}
	g.closed = true
}

// check runs when the engine is closed: every transfer got exactly one
// callback, refused ones none.
func (g *gen) check(n uint64) {
	if st := g.e.Stats(); st.InFlight != 0 {
		g.l.failf("engine %d: InFlight %d after Close", n, st.InFlight)
	}
	for _, r := range g.recs {
		c := r.calls.Load()
		if r.staged && c != 1 || !r.staged && c != 0 {
			g.l.failf("engine %d: transfer (staged %v, slot %d, %d bytes): %d callbacks", n, r.staged, r.slot, r.size, c)
		}
	}
}

// submitter runs rounds until the engine closes: phase A moves random
// bytes out of its source block (to the device, the file, or — memory —
// straight into its destination block); phase B reads what phase A wrote
// back into the cleared destination block; the bytes are then compared by
// CRC-32C.
func (g *gen) submitter(s int, rng *rand.Rand) {
	src, err1 := g.e.Alloc(regionSize)
	dst, err2 := g.e.Alloc(regionSize)
	if err1 != nil || err2 != nil {
		if !g.closing.Load() {
			g.l.failf("alloc: %v %v", err1, err2)
		}
		return
	}
	base := uint64(s) * regionSize // device or file region
	kd := g.kindOfSubmitter(s)
	for !g.closing.Load() {
		k := 1 + rng.IntN(slots)
		recs := make([]*rec, k)
		ts := make([]engine.Transfer, k)
		var pending atomic.Int32
		if !g.withMem(func() {
			for i := range k {
				r := &rec{g: g, pending: &pending, slot: i, write: true}
				r.slotOff, r.size = g.l.shape(rng)
				mem := src.Bytes()[i*slotSize+r.slotOff:][:r.size]
				fill(mem, rng.Uint64())
				r.crc = crc32.Checksum(mem, castagnoli)
				if kd == kindMemory {
					clear(dst.Bytes()[i*slotSize+r.slotOff:][:r.size])
				}
				recs[i] = r
				ts[i] = engine.Transfer{Src: engine.HostAt(src, i*slotSize+r.slotOff), Len: r.size, Callback: r.done}
				off := base + uint64(i*slotSize+r.slotOff)
				switch kd {
				case kindHDMA:
					ts[i].Dst = g.deviceAt(off, rng)
				case kindFile, kindDirect:
					ts[i].Dst = g.fileAt(int64(off), rng)
				case kindMemory:
					ts[i].Dst = engine.HostAt(dst, i*slotSize+r.slotOff)
				}
			}
		}) {
			return
		}
		if !g.submit(rng, ts, recs, &pending) {
			return
		}
		if kd == kindMemory {
			g.verify(dst, recs)
			continue
		}
		// Phase B: read back what phase A wrote, into cleared memory.
		var back []*rec
		var bts []engine.Transfer
		var bpending atomic.Int32
		if !g.withMem(func() {
			for _, r := range recs {
				if !r.staged || r.res.Err != nil {
					continue
				}
				clear(dst.Bytes()[r.slot*slotSize+r.slotOff:][:r.size])
				b := &rec{g: g, pending: &bpending, slot: r.slot, slotOff: r.slotOff, size: r.size, crc: r.crc}
				back = append(back, b)
				t := engine.Transfer{Dst: engine.HostAt(dst, r.slot*slotSize+r.slotOff), Len: r.size, Callback: b.done}
				off := base + uint64(r.slot*slotSize+r.slotOff)
				if kd == kindHDMA {
					t.Src = g.deviceAt(off, rng)
				} else {
					t.Src = g.fileAt(int64(off), rng)
				}
				bts = append(bts, t)
			}
		}) {
			return
		}
		if len(bts) > 0 {
			if !g.submit(rng, bts, back, &bpending) {
				return
			}
			g.verify(dst, back)
		}
	}
}

// shape picks a transfer's offset in its slot and its size.
func (l *lane) shape(rng *rand.Rand) (off, size int) {
	switch l.kind {
	case kindDirect:
		off = rng.IntN(slotSize/4096/2) * 4096
		size = (1 + rng.IntN((slotSize-off)/4096)) * 4096
		return off, size
	}
	off = rng.IntN(slotSize / 2)
	switch rng.IntN(3) {
	case 0:
		size = 1 + rng.IntN(min(cpuThresh, slotSize-off)) // small: the CPU path on HDMA
	case 1:
		size = 1 + rng.IntN(slotSize-off)
	default:
		size = slotSize - off
	}
	return off, size
}

// withMem runs f while the engine's memory is mapped; false when the engine
// was closed first.
func (g *gen) withMem(f func()) bool {
	g.mem.RLock()
	defer g.mem.RUnlock()
	if g.closed {
		return false
	}
	f()
	return true
}

// submit stages ts with a randomly chosen submission call, waits for the
// callbacks of what was staged and classifies the results; false when the
// engine closed.
func (g *gen) submit(rng *rand.Rand, ts []engine.Transfer, recs []*rec, pending *atomic.Int32) bool {
	pending.Store(int32(len(ts)))
	staged, closed := 0, false
	note := func(n int, err error) {
		for i := staged; i < staged+n; i++ {
			recs[i].staged = true
		}
		staged += n
		switch {
		case err == nil:
		case errors.Is(err, engine.ErrClosed):
			closed = true
		case errors.Is(err, context.DeadlineExceeded):
			g.l.tly.expired.Add(1)
		case errors.Is(err, engine.ErrQueueFull):
		default:
			g.l.failf("submit: %v", err)
			closed = true
		}
	}
	expiring := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
	}
	switch rng.IntN(4) {
	case 0: // singles; a full queue waits (and may expire)
		for i := 0; i < len(ts) && !closed; i++ {
			_, err := g.e.Submit(ts[i])
			if errors.Is(err, engine.ErrQueueFull) {
				ctx, cancel := expiring()
				_, err = g.e.SubmitContext(ctx, ts[i])
				cancel()
			}
			if err != nil {
				note(0, err)
				break
			}
			note(1, nil)
		}
	case 1: // one batch, the rest waiting for room
		n, err := g.e.SubmitBatch(ts, nil)
		note(n, err)
		if errors.Is(err, engine.ErrQueueFull) {
			n, err = g.e.SubmitBatchContext(context.Background(), ts[staged:], nil)
			note(n, err)
		}
	case 2: // a batch with a context that may expire
		ctx, cancel := expiring()
		n, err := g.e.SubmitBatchContext(ctx, ts, nil)
		cancel()
		note(n, err)
	default: // batches of random size
		for staged < len(ts) && !closed {
			k := 1 + rng.IntN(len(ts)-staged)
			n, err := g.e.SubmitBatchContext(context.Background(), ts[staged:staged+k], nil)
			note(n, err)
			if err != nil {
				break
			}
		}
	}
	g.recMu.Lock()
	g.recs = append(g.recs, recs...)
	g.recMu.Unlock()
	g.l.tly.refused.Add(uint64(len(ts) - staged))
	g.l.tly.staged.Add(uint64(staged))
	pending.Add(int32(staged - len(ts)))
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; pending.Load() > 0; i++ {
		if g.l.mode == engine.ModePoll {
			g.e.Poll()
		}
		if i > 16 {
			time.Sleep(50 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
		if time.Now().After(deadline) {
			g.l.failf("%d callbacks missing 60 s after submission (closing %v)", pending.Load(), g.closing.Load())
			return false
		}
	}
	for _, r := range recs[:staged] {
		g.classify(r)
	}
	return !closed
}

// classify checks a transfer's error against what may fail it.
func (g *gen) classify(r *rec) {
	s := &g.l.tly
	err := r.res.Err
	switch {
	case err == nil:
		s.ok.Add(1)
		return
	case errors.Is(err, engine.ErrCanceled):
		s.canceled.Add(1)
		if !r.closing {
			g.l.failf("canceled while the engine was not closing: %v", err)
		}
		return
	}
	if g.l.dev != nil { // an HDMA lane, or a mixed one (only HDMA fails by injection)
		switch {
		case errors.Is(err, hdma.ErrDeviceError):
			s.devErr.Add(1)
			return
		case errors.Is(err, engine.ErrTimeout):
			s.timeouts.Add(1)
			return
		case errors.Is(err, hdma.ErrDeviceReset):
			s.resetErr.Add(1)
			return
		}
	}
	g.l.failf("a failure no injector explains: %v", err)
}

// verify compares what successful transfers left in dst with what was
// written, by CRC-32C.
func (g *gen) verify(dst engine.Block, recs []*rec) {
	g.withMem(func() {
		for _, r := range recs {
			if !r.staged || r.res.Err != nil {
				continue
			}
			mem := dst.Bytes()[r.slot*slotSize+r.slotOff:][:r.size]
			if got := crc32.Checksum(mem, castagnoli); got != r.crc {
				g.l.failf("slot %d, %d bytes at +%d: CRC-32C %08x, wrote %08x: data lost or misplaced", r.slot, r.size, r.slotOff, got, r.crc)
				continue
			}
			if r.res.N != r.size {
				g.l.failf("slot %d: success with %d of %d bytes", r.slot, r.res.N, r.size)
			}
			g.l.tly.verified.Add(1)
			g.l.tly.bytes.Add(uint64(r.size))
		}
	})
}

// fill writes pseudo-random bytes (xorshift64 from seed) into b.
func fill(b []byte, seed uint64) {
	x := seed | 1
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	for ; i < len(b); i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}
