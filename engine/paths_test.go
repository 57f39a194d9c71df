package engine_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// tempFileBE is a file backend over a new temporary file of size bytes (flags
// adds e.g. O_DIRECT).
func tempFileBE(t testing.TB, size int64, flags int) (*uringfile.Backend, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|flags, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	be, err := uringfile.New(f, uringfile.Config{Logger: quiet()})
	if err != nil {
		t.Skipf("io_uring file backend unavailable here: %v", err)
	}
	return be, f
}

// threeBackends opens one engine over an HDMA device (vfio-mock, with the
// faults given), a file and host memory, in that order.
func threeBackends(t testing.TB, cfg engine.Config, faults ...mock.Fault) (*engine.Engine, *mock.Device, *os.File) {
	t.Helper()
	dev := newMock(t, mock.Config{Seed: 7, DevMemSize: 8 << 20})
	for _, f := range faults {
		must(t, dev.InjectFault(f))
	}
	fb, f := tempFileBE(t, 8<<20, 0)
	cfg.Backend = hdmaBE(t, dev, hdmadev.Config{Timeout: time.Second})
	cfg.Backends = []backend.Backend{fb, memory.New()}
	return open(t, cfg), dev, f
}

// TestSeveralBackends: one engine, one pool, three backends; mixed
// batches (device, file and memory transfers in one SubmitBatch) under the
// mock's injected errors: every callback exactly once, every error an
// injected one, the bytes right, each backend counted on its own.
func TestSeveralBackends(t *testing.T) {
	e, dev, _ := threeBackends(t, engine.Config{QueueDepth: 256}, mock.Fault{Kind: mock.FaultError, Rate: 0.01})
	ts := e.Targets()
	if len(ts) != 3 {
		t.Fatalf("Targets: %d, want 3", len(ts))
	}
	for i, want := range []string{"hdma", "file", "memory"} {
		if got := ts[i].Describe().Name; got != want {
			t.Fatalf("target %d is %q, want %q", i, got, want)
		}
	}
	const rounds, per = 40, 24 // per round: 8 of each kind
	const n = 4096
	src := make([]engine.Block, per)
	back := make([]engine.Block, per)
	for i := range src {
		src[i], back[i] = alloc(t, e, n), alloc(t, e, n)
	}
	var calls [rounds * per]atomic.Int32
	var failed [rounds * per]atomic.Bool
	var injected, other atomic.Int32
	cb := func(r engine.Result) {
		calls[r.User].Add(1)
		switch {
		case r.Err == nil:
		case errors.Is(r.Err, hdma.ErrDeviceError):
			failed[r.User].Store(true) // the device still holds older bytes
			injected.Add(1)
		default:
			other.Add(1)
			t.Errorf("transfer %d: %v", r.User, r.Err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := ctxT(t, time.Minute)
	for r := range rounds {
		batch := make([]engine.Transfer, 0, per)
		for i := range per {
			fillRandom(rng, src[i].Bytes())
			off := uint64(i * n)
			var dst engine.Loc
			switch i % 3 {
			case 0:
				dst = engine.DeviceAt(off) // the one device: no Target needed
			case 1:
				dst = engine.FileAt(int64(off))
			case 2:
				dst = engine.Host(back[i])
			}
			batch = append(batch, engine.Transfer{Src: engine.Host(src[i]), Dst: dst, Len: n, Callback: cb, User: uint64(r*per + i)})
		}
		if k, err := e.SubmitBatchContext(ctx, batch, nil); err != nil || k != len(batch) {
			t.Fatalf("round %d: SubmitBatch: %d, %v", r, k, err)
		}
		if err := e.Drain(ctx); err != nil {
			// Say where it stopped: what each backend holds, which
			// callbacks of the round did not run.
			var missing []int
			for i := range per {
				if calls[r*per+i].Load() != 1 {
					missing = append(missing, i)
				}
			}
			t.Fatalf("round %d: Drain: %v; round's transfers without a callback (index %% 3: 0 device, 1 file, 2 memory): %v; stats %+v", r, err, missing, e.Stats())
		}
		// Read back what reached the device and the file; compare.
		for i := range per {
			if calls[r*per+i].Load() != 1 {
				t.Fatalf("transfer %d: %d callbacks after Drain", r*per+i, calls[r*per+i].Load())
			}
			if i%3 == 2 {
				if !bytes.Equal(back[i].Bytes(), src[i].Bytes()) {
					t.Fatalf("round %d, memory transfer %d: bytes differ", r, i)
				}
				continue
			}
			var from engine.Loc
			if i%3 == 0 {
				from = engine.DeviceAt(uint64(i * n))
			} else {
				from = engine.FileAt(int64(i * n))
			}
			clear(back[i].Bytes())
			id, err := e.Submit(engine.Transfer{Src: from, Dst: engine.Host(back[i]), Len: n})
			must(t, err)
			if err := e.Wait(ctx, id); err != nil {
				if i%3 == 0 && errors.Is(err, hdma.ErrDeviceError) {
					continue // the read back was the one that failed
				}
				t.Fatalf("read back %v: %v", from, err)
			}
			if !bytes.Equal(back[i].Bytes(), src[i].Bytes()) && !failed[r*per+i].Load() {
				t.Fatalf("round %d, transfer %d to %v: bytes differ", r, i, from)
			}
		}
	}
	st := e.Stats()
	if len(st.Backends) != 3 {
		t.Fatalf("Stats.Backends: %+v", st.Backends)
	}
	for i, b := range st.Backends {
		if b.Transfers == 0 || b.Outstanding != 0 {
			t.Errorf("backend %d (%s): %d transfers, %d outstanding", i, b.Name, b.Transfers, b.Outstanding)
		}
	}
	if st.Backends[0].Doorbells == 0 || st.Backends[1].Doorbells == 0 {
		t.Errorf("doorbells: device %d, file %d: want both > 0", st.Backends[0].Doorbells, st.Backends[1].Doorbells)
	}
	inj := 0
	for _, in := range dev.Injections() {
		if in.Kind == mock.FaultError {
			inj++
		}
	}
	if int(injected.Load()) > inj || other.Load() != 0 {
		t.Errorf("%d device-error callbacks for %d injected errors (%d others)", injected.Load(), inj, other.Load())
	}
	t.Logf("%d transfers over 3 backends: %+v; %d injected errors", st.Transfers, st.Backends, inj)
}

func fillRandom(rng *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// TestRouting: Locs that name no backend go to the one serving their kind;
// with two devices they must name one; ends no backend serves, and ends of
// two backends in one Transfer, are refused at submit with errors that
// name both ends.
func TestRouting(t *testing.T) {
	e := open(t, engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{}), Backends: []backend.Backend{hdmaBE(t, nil, hdmadev.Config{})}})
	b := alloc(t, e, 4096)
	ts := e.Targets()
	cases := []struct {
		name string
		t    engine.Transfer
		want string // "" = accepted
	}{
		{"named device 0", engine.Transfer{Src: engine.Host(b), Dst: ts[0].DeviceAt(0), Len: 4096}, ""},
		{"named device 1", engine.Transfer{Src: ts[1].DeviceAt(0), Dst: engine.Host(b), Len: 4096}, ""},
		{"device to device on one", engine.Transfer{Src: ts[1].DeviceAt(0), Dst: ts[1].DeviceAt(8192), Len: 4096}, ""},
		{"ambiguous device", engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096}, "several backends serve device"},
		{"no file backend", engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(0), Len: 4096}, "no backend of this engine serves file"},
		{"two backends", engine.Transfer{Src: ts[0].DeviceAt(0), Dst: ts[1].DeviceAt(0), Len: 4096}, "use Copy"},
		{"zero loc", engine.Transfer{Src: engine.Host(b), Len: 4096}, "zero Loc"},
		{"host to host", engine.Transfer{Src: engine.Host(b), Dst: engine.Host(b), Len: 4096}, "host memory to host memory"},
	}
	ctx := ctxT(t, 30*time.Second)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := e.Submit(c.t)
			if c.want == "" {
				must(t, err)
				must(t, e.Wait(ctx, id))
				return
			}
			if err == nil || !errors.Is(err, engine.ErrBadTransfer) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Submit: %v, want ErrBadTransfer saying %q", err, c.want)
			}
			if c.t.Dst.Kind() != engine.LocNone && !strings.Contains(err.Error(), c.t.Src.String()) {
				t.Errorf("error %q does not name the source %v", err, c.t.Src)
			}
		})
	}
	if _, err := engine.Open(small(t, engine.Config{Backends: make([]backend.Backend, engine.MaxBackends+1)})); !errors.Is(err, engine.ErrBadConfig) {
		t.Errorf("Open with %d nil backends: %v, want ErrBadConfig", engine.MaxBackends+1, err)
	}
}

// TestGrowthSeveralBackends: pool growth maps the new arena into all three
// backends before its first block is used (a transfer to each from a block
// of it works), and idle release unmaps it from all of them.
func TestGrowthSeveralBackends(t *testing.T) {
	e, _, _ := threeBackends(t, engine.Config{PoolSize: 1 << 20, PoolMax: 8 << 20, PoolIdle: 20 * time.Millisecond,
		Backings: []hugepage.Backing{hugepage.Backing4K}})
	ctx := ctxT(t, 30*time.Second)
	first := alloc(t, e, 1<<20) // fills the first arena
	big := alloc(t, e, 2<<20)   // a new arena
	if st := e.Stats().Pool; st.Grows != 1 || st.Arenas != 2 {
		t.Fatalf("pool: %d grows, %d arenas, want 1 and 2", st.Grows, st.Arenas)
	}
	other := alloc(t, e, 4096)
	for _, dst := range []engine.Loc{engine.DeviceAt(0), engine.FileAt(0), engine.Host(other)} {
		id, err := e.Submit(engine.Transfer{Src: engine.Host(big), Dst: dst, Len: 4096})
		must(t, err)
		must(t, e.Wait(ctx, id))
	}
	must(t, e.Free(big))
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Pool.Releases == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the idle arena was not released: %+v", e.Stats().Pool)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// And the next growth maps again into every backend.
	big = alloc(t, e, 2<<20)
	for _, dst := range []engine.Loc{engine.DeviceAt(0), engine.FileAt(0), engine.Host(other)} {
		id, err := e.Submit(engine.Transfer{Src: engine.Host(big), Dst: dst, Len: 4096})
		must(t, err)
		must(t, e.Wait(ctx, id))
	}
	_ = first
}

// TestAddRemoveBackend: a device added to a running engine gets the pool
// mapped first and serves at once; removed while transfers run on it and
// on the other backend, its transfers complete once each (done or
// canceled), later ones naming it are refused, and the other backend never
// sees an error.
func TestAddRemoveBackend(t *testing.T) {
	e := open(t, engine.Config{Backend: memory.New(), QueueDepth: 128})
	ctx := ctxT(t, time.Minute)
	a, b := alloc(t, e, 4096), alloc(t, e, 4096)
	stop := make(chan struct{})
	var memErrs, memDone atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // memory transfers all along
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// A callback, not Wait: the device transfers beside reuse
			// staging slots fast enough to make an ID stale.
			_, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.Host(a), Dst: engine.Host(b), Len: 4096, Callback: func(r engine.Result) {
				if r.Err != nil {
					memErrs.Add(1)
					t.Errorf("memory transfer: %v", r.Err)
				}
				memDone.Add(1)
			}})
			if err != nil {
				memErrs.Add(1)
				t.Errorf("memory transfer: %v", err)
				return
			}
		}
	}()
	dev, err := e.AddBackend(hdmaBE(t, nil, hdmadev.Config{}))
	must(t, err)
	if got := len(e.Targets()); got != 2 {
		t.Fatalf("Targets after AddBackend: %d", got)
	}
	var calls [4096]atomic.Int32
	var devErrs atomic.Int64
	cb := func(r engine.Result) {
		calls[r.User].Add(1)
		if r.Err != nil {
			if !errors.Is(r.Err, engine.ErrCanceled) {
				t.Errorf("device transfer %d: %v", r.User, r.Err)
			}
			devErrs.Add(1)
		}
	}
	submitted := 0
	for i := range 2048 {
		if _, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.Host(a), Dst: dev.DeviceAt(uint64(i%16) * 4096), Len: 4096, Callback: cb, User: uint64(i)}); err != nil {
			t.Fatalf("device transfer %d: %v", i, err)
		}
		submitted++
	}
	// Remove it with transfers in flight and a context that ends at once:
	// what it still holds is canceled.
	rctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.RemoveBackend(rctx, dev); err != nil {
		t.Fatalf("RemoveBackend: %v", err)
	}
	if _, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.Host(a), Dst: dev.DeviceAt(0), Len: 4096}); !errors.Is(err, engine.ErrBadTransfer) {
		t.Fatalf("Submit to a removed backend: %v, want ErrBadTransfer", err)
	}
	must(t, e.Drain(ctx))
	for i := range submitted {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("device transfer %d: %d callbacks", i, c)
		}
	}
	// Add one again (the slot is reused with a new generation: the old
	// Target stays refused) and use it.
	dev2, err := e.AddBackend(hdmaBE(t, nil, hdmadev.Config{}))
	must(t, err)
	if _, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.Host(a), Dst: dev.DeviceAt(0), Len: 4096}); !errors.Is(err, engine.ErrBadTransfer) {
		t.Fatalf("Submit with the stale Target: %v, want ErrBadTransfer", err)
	}
	// A callback again, not Wait: the memory transfers beside may reuse
	// its slot before a Wait looks at it (ErrStaleID, as documented).
	res := make(chan error, 1)
	_, err = e.SubmitContext(ctx, engine.Transfer{Src: engine.Host(a), Dst: dev2.DeviceAt(0), Len: 4096, Callback: func(r engine.Result) { res <- r.Err }})
	must(t, err)
	select {
	case err := <-res:
		must(t, err)
	case <-ctx.Done():
		t.Fatalf("the transfer to the re-added backend never completed: %v", ctx.Err())
	}
	close(stop)
	wg.Wait()
	must(t, e.Drain(ctx))
	if memErrs.Load() != 0 || memDone.Load() == 0 {
		t.Fatalf("memory transfers: %d done, %d failed", memDone.Load(), memErrs.Load())
	}
	t.Logf("%d memory transfers beside; %d of %d device transfers canceled by the removal", memDone.Load(), devErrs.Load(), submitted)
}

// TestCopyPipeline: a file (O_DIRECT) into vfio-mock device memory and
// back out to another file as two Copy calls, bytes verified, the pool's
// use never above Chunk × Depth (sampled while it runs), progress visible.
// 1 GiB; 256 MiB under -short.
func TestCopyPipeline(t *testing.T) {
	size := int64(1 << 30)
	if testing.Short() {
		size = 256 << 20
	}
	const chunk, depth = 1 << 20, 4
	dev := newMock(t, mock.Config{Seed: 3, DevMemSize: int(size)})
	in, fin := tempFileBE(t, 0, unix.O_DIRECT)
	out, fout := tempFileBE(t, size, unix.O_DIRECT)
	// The input: a pattern written through the page cache, then dropped
	// from it for this file (O_DIRECT reads go to the disk anyway).
	writePattern(t, fin.Name(), size)
	e := open(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1}), Backends: []backend.Backend{in, out},
		Alignment: 4096, PoolSize: 16 << 20, QueueDepth: 64, Backings: []hugepage.Backing{hugepage.Backing4K}})
	ts := e.Targets()
	ctx := ctxT(t, 10*time.Minute)
	var peak, readPeak atomic.Int64
	sample := func(stop <-chan struct{}) {
		for {
			st := e.Stats()
			if u := st.Pool.InUse; u > peak.Load() {
				peak.Store(u)
			}
			if r := int64(st.Backends[1].Outstanding); r > readPeak.Load() {
				readPeak.Store(r) // reads from the input file
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}
	for _, step := range []struct {
		name     string
		src, dst engine.Loc
	}{
		{"file → device", ts[1].FileAt(0), ts[0].DeviceAt(0)},
		{"device → file", ts[0].DeviceAt(0), ts[2].FileAt(0)},
	} {
		stop := make(chan struct{})
		go sample(stop)
		var called atomic.Int32
		start := time.Now()
		c, err := e.Copy(ctx, engine.CopySpec{Src: step.src, Dst: step.dst, Len: size, Chunk: chunk, Depth: depth,
			Callback: func(engine.CopyResult) { called.Add(1) }})
		must(t, err)
		sawProgress := false
		for {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			err = c.Wait(wctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				break
			}
			if d := c.Done(); d > 0 && d < size {
				sawProgress = true
			}
		}
		close(stop)
		must(t, err)
		if r := c.Result(); r.Bytes != size || r.Err != nil {
			t.Fatalf("%s: %+v", step.name, r)
		}
		time.Sleep(10 * time.Millisecond)
		if called.Load() != 1 {
			t.Fatalf("%s: callback ran %d times", step.name, called.Load())
		}
		el := time.Since(start)
		t.Logf("%s: %d MiB in %v (%.2f GiB/s), progress seen: %v", step.name, size>>20, el, float64(size)/(1<<30)/el.Seconds(), sawProgress)
	}
	// Of depth blocks, at most depth - max(1, depth/4) read at once: the
	// rest is slack for writes (CopySpec.Depth).
	if r, want := readPeak.Load(), int64(depth-max(1, depth/4)); r > want || r == 0 {
		t.Errorf("reads from the input file in flight peaked at %d, want 1..%d", r, want)
	}
	if p := peak.Load(); p > chunk*depth {
		t.Fatalf("pool use peaked at %d bytes, above Chunk × Depth = %d", p, chunk*depth)
	}
	checkPattern(t, fout.Name(), size)
}

func writePattern(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		offsetPattern(buf, off)
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	must(t, f.Sync())
	_ = unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_DONTNEED)
}

func checkPattern(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf, want := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		offsetPattern(want, off)
		if !bytes.Equal(buf, want) {
			t.Fatalf("output differs in the MiB at %d", off)
		}
	}
}

// offsetPattern fills b with bytes that depend on their file offset.
func offsetPattern(b []byte, off int64) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := uint64(off+int64(i)) * 0x9e3779b97f4a7c15
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// TestCopyErrors: bad specs are refused before anything moves; a failed
// chunk stops the copy with an error naming its byte range and side; a
// canceled context stops it.
func TestCopyErrors(t *testing.T) {
	dev := newMock(t, mock.Config{Seed: 5, DevMemSize: 8 << 20})
	fb, _ := tempFileBE(t, 4<<20, 0)
	e := open(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{CPUThreshold: -1}), Backends: []backend.Backend{fb}, PoolSize: 16 << 20})
	ctx := ctxT(t, time.Minute)
	b := alloc(t, e, 4096)
	for _, c := range []struct {
		name string
		spec engine.CopySpec
	}{
		{"zero length", engine.CopySpec{Src: engine.FileAt(0), Dst: engine.DeviceAt(0)}},
		{"host end", engine.CopySpec{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096}},
		{"depth 1", engine.CopySpec{Src: engine.FileAt(0), Dst: engine.DeviceAt(0), Len: 4096, Depth: 1}},
		{"no remote backend", engine.CopySpec{Src: engine.FileAt(0), Dst: engine.Remote(0, 0), Len: 4096}},
	} {
		if _, err := e.Copy(ctx, c.spec); !errors.Is(err, engine.ErrBadTransfer) {
			t.Errorf("%s: %v, want ErrBadTransfer", c.name, err)
		}
	}
	// The device fails its 3rd write: the copy says which bytes.
	must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultError, Nth: 3}))
	c, err := e.Copy(ctx, engine.CopySpec{Src: engine.FileAt(0), Dst: engine.DeviceAt(0), Len: 4 << 20, Chunk: 256 << 10, Depth: 2})
	must(t, err)
	err = c.Wait(ctx)
	if !errors.Is(err, engine.ErrCopyFailed) || !errors.Is(err, hdma.ErrDeviceError) || !strings.Contains(err.Error(), "writing to device memory") || !strings.Contains(err.Error(), "bytes [") {
		t.Fatalf("copy with a failing chunk: %v", err)
	}
	if d := c.Result().Bytes; d >= 4<<20 {
		t.Errorf("a failed copy reports %d bytes done", d)
	}
	// Canceled before it starts: no byte moves after the context ended.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	c, err = e.Copy(cctx, engine.CopySpec{Src: engine.FileAt(0), Dst: engine.DeviceAt(0), Len: 4 << 20})
	must(t, err)
	if err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled copy: %v", err)
	}
	if st := e.Stats().Pool; st.InUse != 4096 {
		t.Fatalf("after the copies the pool holds %d bytes in use, want only the test's 4096", st.InUse)
	}
}
