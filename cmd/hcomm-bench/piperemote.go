package main

// The pipeline scenario's second path: device memory (vfio-mock HDMA) to a
// peer process's pool over UCX's shared-memory transport, two ways,
// interleaved repetition by repetition:
//
//   - engine: one engine holding the device backend (hdmadev, DMA engine
//     only) and the UCX backend (SharedMemory), one Engine.Copy per window
//     of the peer's pool, pipeChunk chunks, pipeDepth in flight;
//   - two_engines: what a program did before one engine held several
//     backends — a UCX engine and a device engine, a block of
//     pipeChunk × pipeDepth bytes allocated in the UCX engine's pool and
//     Registered in the device engine's, and the chunks chained by hand
//     with the same chunk size and depth: a chunk's device → host transfer
//     (device engine), in its callback the host → peer put (UCX engine),
//     in that one's callback the block's slot is free for the next chunk.
//
// Both move the same bytes with the same calls to the device and to UCX
// (the device DMAs into a pool block, UCX copies it into the peer's
// segment, which over shared memory is a memcpy by this process: the
// transport's copy, the same in both rows). Host CPU is measured as for
// file → device (the device model's worker goroutine excluded by its
// pprof label); the peer process's CPU is in neither row (it polls its
// worker once a millisecond, the same for both).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// pipeRemoteVariants are the device → peer rows, in the order each
// repetition runs them.
var pipeRemoteVariants = []string{"device_to_remote/engine", "device_to_remote/two_engines"}

const (
	// pipeRemoteWindow is the bytes of the peer's pool each copy fills
	// (from its offset 0): the passive peer exports remotePool bytes.
	pipeRemoteWindow = 64 << 20
	// pipeRemoteTLS is UCX_TLS for both processes (the listener's
	// connection needs tcp, the data moves over sysv/posix).
	pipeRemoteTLS = "shm,tcp"
)

// pipeRemoteSize is the bytes one repetition moves: 1 GiB (256 MiB with
// -quick), as windows of pipeRemoteWindow.
func pipeRemoteSize(o *options) int64 {
	if pipeSizeOverride > 0 {
		return max(pipeRemoteWindow, pipeSizeOverride/pipeRemoteWindow*pipeRemoteWindow)
	}
	if o.quick {
		return 256 << 20
	}
	return 1 << 30
}

// remotePipe is one set-up path from device memory into the peer's pool.
type remotePipe struct {
	desc string
	dm   []byte // device memory: [0, window) the source, [window, 2×window) the read-back
	// move moves device memory [0, n) to the peer's pool [0, n).
	move func(n int64) error
	// verify reads the peer's pool [0, n) back and compares it with the
	// pattern.
	verify func(n int64) error
	close  func() error
}

// openRemotePipe sets variant up against the peer at addr: the device
// model (its memory holding the pattern in the source window) and the
// variant's engines, connected.
func openRemotePipe(variant, addr string) (*remotePipe, error) {
	m, dm, err := labeledMock(2 * pipeRemoteWindow)
	if err != nil {
		return nil, err
	}
	pipePattern(dm[:pipeRemoteWindow], 0)
	var p *remotePipe
	switch variant {
	case pipeRemoteVariants[0]:
		p, err = openRemoteOne(m, dm, addr)
	case pipeRemoteVariants[1]:
		p, err = openRemoteTwo(m, addr)
	default:
		err = fmt.Errorf("pipeline: no variant %q", variant)
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	p.dm = dm
	inner := p.close
	p.close = func() error {
		err := inner()
		if cerr := m.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return p, nil
}

func connectCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// openRemoteOne: one engine over the device (DMA engine only) and UCX, a
// pool of exactly pipeChunk × pipeDepth bytes.
func openRemoteOne(m *mock.Device, dm []byte, addr string) (*remotePipe, error) {
	db, err := hdmadev.New(m, hdmadev.Config{CPUThreshold: -1})
	if err != nil {
		return nil, err
	}
	ub, err := ucx.New(ucx.Config{SharedMemory: true, Logger: quietLogger()})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	e, err := engine.Open(engine.Config{Backend: db, Backends: []backend.Backend{ub},
		PoolSize: pipeChunk * pipeDepth, QueueDepth: 64, Populate: true, Logger: quietLogger()})
	if err != nil {
		_ = db.Close()
		_ = ub.Close()
		return nil, err
	}
	shut := func() error {
		ctx, cancel := closeCtx()
		defer cancel()
		return e.Shutdown(ctx)
	}
	ts := e.Targets()
	dev, rem := ts[0], ts[1]
	ctx, cancel := connectCtx()
	peer, err := rem.Backend().(*ucx.Backend).Connect(ctx, addr)
	cancel()
	if err != nil {
		shut()
		return nil, fmt.Errorf("pipeline: connect to the peer: %w", err)
	}
	cp := func(src, dst engine.Loc, n int64) error {
		c, err := e.Copy(context.Background(), engine.CopySpec{Src: src, Dst: dst, Len: n, Chunk: pipeChunk, Depth: pipeDepth})
		if err != nil {
			return err
		}
		return c.Wait(context.Background())
	}
	return &remotePipe{
		desc: fmt.Sprintf("engine: one Copy device → peer per %d MiB window, %d KiB chunks, %d in flight, one engine (hdmadev + ucx shared memory), pool of %d MiB",
			pipeRemoteWindow>>20, pipeChunk>>10, pipeDepth, pipeChunk*pipeDepth>>20),
		move: func(n int64) error { return cp(dev.DeviceAt(0), rem.Remote(peer, 0), n) },
		verify: func(n int64) error {
			if err := cp(rem.Remote(peer, 0), dev.DeviceAt(pipeRemoteWindow), n); err != nil {
				return err
			}
			return checkPattern(dm[pipeRemoteWindow:pipeRemoteWindow+n], 0)
		},
		close: shut,
	}, nil
}

// openRemoteTwo: a UCX engine (pool of pipeChunk × pipeDepth bytes, one
// block of it) and a device engine (DMA engine only) that Registers that
// block; move chains the chunks through its pipeDepth slots by hand.
func openRemoteTwo(m *mock.Device, addr string) (*remotePipe, error) {
	ub, err := ucx.New(ucx.Config{SharedMemory: true, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	ue, err := engine.Open(engine.Config{Backend: ub, PoolSize: pipeChunk * pipeDepth, QueueDepth: 64, Populate: true, Logger: quietLogger()})
	if err != nil {
		_ = ub.Close()
		return nil, err
	}
	db, err := hdmadev.New(m, hdmadev.Config{CPUThreshold: -1})
	if err != nil {
		ue.Close()
		return nil, err
	}
	// The device engine's own pool is not used: its smallest.
	de, err := engine.Open(engine.Config{Backend: db, PoolSize: 2 << 20, QueueDepth: 64, Logger: quietLogger()})
	if err != nil {
		_ = db.Close()
		ue.Close()
		return nil, err
	}
	var reg engine.Block
	shut := func() error {
		ctx, cancel := closeCtx()
		defer cancel()
		var err error
		if !reg.IsZero() {
			err = de.Unregister(reg) // before the memory goes with the UCX engine's pool
		}
		if cerr := de.Shutdown(ctx); err == nil {
			err = cerr
		}
		if cerr := ue.Shutdown(ctx); err == nil {
			err = cerr
		}
		return err
	}
	ublk, err := ue.Alloc(pipeChunk * pipeDepth)
	if err == nil {
		reg, err = de.Register(ublk.Bytes())
	}
	if err != nil {
		shut()
		return nil, fmt.Errorf("pipeline: the bounce block: %w", err)
	}
	ctx, cancel := connectCtx()
	peer, err := ub.Connect(ctx, addr)
	cancel()
	if err != nil {
		shut()
		return nil, fmt.Errorf("pipeline: connect to the peer: %w", err)
	}
	return &remotePipe{
		desc: fmt.Sprintf("two_engines: per %d MiB window, device engine (hdmadev) → a block of the UCX engine's pool Registered in it → UCX engine put (shared memory), %d KiB chunks, %d in flight, chained by hand in the callbacks",
			pipeRemoteWindow>>20, pipeChunk>>10, pipeDepth),
		move: func(n int64) error { return chainTwo(de, ue, reg, ublk, peer, n) },
		verify: func(n int64) error {
			for off := int64(0); off < n; off += pipeChunk * pipeDepth {
				k := min(pipeChunk*pipeDepth, n-off)
				id, err := ue.Submit(engine.Transfer{Src: engine.Remote(peer, uint64(off)), Dst: engine.Host(ublk), Len: int(k)})
				if err == nil {
					err = ue.Wait(context.Background(), id)
				}
				if err == nil {
					err = checkPattern(ublk.Bytes()[:k], off)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
		close: shut,
	}, nil
}

// chainEvent is a callback's report to chainTwo's loop: which slot, which
// side finished, and how.
type chainEvent struct {
	slot  int
	write bool // the put to the peer (else the device read)
	err   error
}

// chainTwo moves device memory [0, n) to the peer's pool [0, n) with two
// engines: slot i of the bounce block (reg in the device engine, ublk in
// the UCX engine: the same bytes) carries one chunk at a time; the device
// read's callback hands the chunk to the loop, which puts it, and the
// put's callback frees the slot.
func chainTwo(de, ue *engine.Engine, reg, ublk engine.Block, peer uint32, n int64) error {
	ev := make(chan chainEvent, 2*pipeDepth)
	chunkAt := make([]int64, pipeDepth)
	cb := func(slot int, write bool) func(engine.Result) {
		return func(r engine.Result) { ev <- chainEvent{slot, write, r.Err} }
	}
	var next int64
	busy := 0
	var first error
	start := func(slot int) error {
		chunkAt[slot] = next
		k := min(pipeChunk, n-next)
		next += k
		busy++
		_, err := de.SubmitContext(context.Background(), engine.Transfer{Src: engine.DeviceAt(uint64(chunkAt[slot])),
			Dst: engine.HostAt(reg, slot*pipeChunk), Len: int(k), Callback: cb(slot, false)})
		return err
	}
	for slot := 0; slot < pipeDepth && next < n; slot++ {
		if err := start(slot); err != nil {
			return err
		}
	}
	for busy > 0 {
		e := <-ev
		if e.err != nil && first == nil {
			first = fmt.Errorf("bytes at %d: %w", chunkAt[e.slot], e.err)
		}
		switch {
		case e.err != nil || e.write:
			busy--
			if e.write && first == nil && next < n {
				if err := start(e.slot); err != nil {
					first = err
				}
			}
		default:
			k := min(pipeChunk, n-chunkAt[e.slot])
			if _, err := ue.SubmitContext(context.Background(), engine.Transfer{Src: engine.HostAt(ublk, e.slot*pipeChunk),
				Dst: engine.Remote(peer, uint64(chunkAt[e.slot])), Len: int(k), Callback: cb(e.slot, true)}); err != nil {
				busy--
				if first == nil {
					first = err
				}
			}
		}
	}
	return first
}

// pipeRemoteSample is one repetition of one device → peer variant.
type pipeRemoteSample struct{ gibps, hostCPU, devCPU float64 }

// pipeRemoteOnce sets variant up, moves size bytes (windows of
// pipeRemoteWindow) to the peer, measured, reads the last window back,
// checks it and tears down.
func pipeRemoteOnce(variant, addr string, size int64) (pipeRemoteSample, string, error) {
	p, err := openRemotePipe(variant, addr)
	if err != nil {
		return pipeRemoteSample{}, "", err
	}
	defer p.close()
	// One untimed window first: the peer's segment mapped, the first
	// touches done.
	if err := p.move(pipeRemoteWindow); err != nil {
		return pipeRemoteSample{}, "", err
	}
	el, hostNs, devNs, err := pipeMeasure(func() error {
		for done := int64(0); done < size; done += pipeRemoteWindow {
			if err := p.move(pipeRemoteWindow); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return pipeRemoteSample{}, "", err
	}
	// The peer's pool holds the source window: read it back, compare.
	if err := p.verify(pipeRemoteWindow); err != nil {
		return pipeRemoteSample{}, "", fmt.Errorf("the peer's pool read back: %w", err)
	}
	gib := float64(size) / (1 << 30)
	return pipeRemoteSample{gibps: gib / el.Seconds(), hostCPU: float64(hostNs) / 1e9 / gib, devCPU: float64(devNs) / 1e9 / gib}, p.desc, nil
}

// checkPattern compares b with the pattern from offset base.
func checkPattern(b []byte, base int64) error {
	want := make([]byte, pipeChunk)
	for off := 0; off < len(b); off += pipeChunk {
		k := min(pipeChunk, len(b)-off)
		pipePattern(want[:k], base+int64(off))
		if !bytes.Equal(b[off:off+k], want[:k]) {
			return fmt.Errorf("the chunk at %d differs from the device memory's", base+int64(off))
		}
	}
	return nil
}

// runPipeRemote measures the device → peer rows: one passive peer (the
// remote scenario's, over shared memory), both variants interleaved
// o.reps times. It returns the samples, the variants' descriptions and
// the error that stopped it (nil: all measured).
func runPipeRemote(o *options) (s [2][]pipeRemoteSample, descs map[string]string, err error) {
	descs = map[string]string{}
	prev, had := os.LookupEnv("UCX_TLS")
	os.Setenv("UCX_TLS", pipeRemoteTLS)
	defer func() {
		if had {
			os.Setenv("UCX_TLS", prev)
		} else {
			os.Unsetenv("UCX_TLS")
		}
	}()
	peer, err := startRemotePeer("passive", pipeRemoteTLS, true)
	if err != nil {
		return s, descs, err
	}
	defer peer.stop()
	size := pipeRemoteSize(o)
	for rep := 0; rep < o.reps; rep++ {
		for i, v := range pipeRemoteVariants {
			o.logf("pipeline: %s, repetition %d", v, rep+1)
			x, desc, err := pipeRemoteOnce(v, peer.ucxAddr, size)
			if err != nil {
				return s, descs, fmt.Errorf("%s: %w", v, err)
			}
			descs[v] = desc
			s[i] = append(s[i], x)
		}
	}
	return s, descs, nil
}

func pipeRemoteEntries(s [2][]pipeRemoteSample, note string) []entry {
	f := func(xs []pipeRemoteSample, g func(pipeRemoteSample) float64) []float64 {
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = g(x)
		}
		return v
	}
	one, two := pipeRemoteVariants[0], pipeRemoteVariants[1]
	bw := func(x pipeRemoteSample) float64 { return x.gibps }
	host := func(x pipeRemoteSample) float64 { return x.hostCPU }
	dev := func(x pipeRemoteSample) float64 { return x.devCPU }
	join := func(a, b string) string { return strings.TrimPrefix(a+"; "+b, "; ") }
	return []entry{
		pairEntry(one, two, "bandwidth", "GiB/s", "higher", f(s[0], bw), f(s[1], bw), note),
		pairEntry(one, two, "host_cpu_per_gib", "CPU-s/GiB", "lower", f(s[0], host), f(s[1], host),
			join(note, "CPU-seconds per GiB of this process (getrusage) minus the device model's worker goroutine (pprof label); the peer process's CPU is in neither")),
		pairEntry(one, two, "device_model_cpu_per_gib", "CPU-s/GiB", "lower", f(s[0], dev), f(s[1], dev), "the device model's worker (excluded from host_cpu_per_gib)"),
	}
}

func printPipeRemote(w io.Writer, size int64, s [2][]pipeRemoteSample, descs map[string]string, failed error) {
	fmt.Fprintf(w, "\n== pipeline: device memory (vfio-mock HDMA) → a peer process's pool (UCX shared memory), %d MiB per repetition in %d MiB windows, %d KiB chunks, depth %d; median [min–max] of %d repetitions, interleaved\n",
		size>>20, pipeRemoteWindow>>20, pipeChunk>>10, pipeDepth, len(s[0]))
	rng := func(xs []pipeRemoteSample, g func(pipeRemoteSample) float64) string {
		if len(xs) == 0 {
			return "—"
		}
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = g(x)
		}
		st := newStat(v)
		return fmt.Sprintf("%.3f [%.3f–%.3f]", st.Median, st.Min, st.Max)
	}
	fmt.Fprintf(w, "   %-30s %-24s %-24s %s\n", "variant", "GiB/s", "host CPU-s/GiB", "device model CPU-s/GiB")
	for i, v := range pipeRemoteVariants {
		fmt.Fprintf(w, "   %-30s %-24s %-24s %s\n", v, rng(s[i], func(x pipeRemoteSample) float64 { return x.gibps }),
			rng(s[i], func(x pipeRemoteSample) float64 { return x.hostCPU }), rng(s[i], func(x pipeRemoteSample) float64 { return x.devCPU }))
	}
	for _, v := range pipeRemoteVariants {
		if d := descs[v]; d != "" {
			fmt.Fprintf(w, "   %s\n", d)
		}
	}
	if failed != nil {
		fmt.Fprintf(w, "   FAILED: %v\n", failed)
	}
}
