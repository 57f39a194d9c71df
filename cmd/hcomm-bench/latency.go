package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/cmd/internal/baseline"
	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"github.com/hcomm-go/hcomm/engine"
)

// The latency scenario: the time of one synchronous 4 KiB transfer
// (Submit then Wait, or the traditional call that returns when the bytes
// are there), as a distribution. Every sample is kept (no histogram
// buckets: the percentiles are exact order statistics of the samples);
// each repetition gives p50/p90/p99/p99.9/max, and the table shows the
// median of each over the repetitions. Variants of one table run
// interleaved, repetition by repetition, and each alone: a variant is set
// up, warmed up, measured and closed before the next is set up, so that no
// other variant's device model, reaper or engine is there while it runs
// (the traditional path's time moves with what the other vCPU does). The
// loaded tables run the same with a CPU-bound process on the other vCPU
// (burn.go), started before the table and stopped after it.

// latRunner performs one synchronous transfer per call.
type latRunner struct {
	one   func(i int) error
	close func() error
	desc  string
	// fio: an external run of about d that reports its own percentiles.
	fio func(d time.Duration) (latPct, error)
	// fill, instead of one: time len(samples) transfers itself (under
	// load: each sample is one transfer's Submit-to-completion time while
	// others are in flight).
	fill func(samples []float64) error
}

// latPct is one repetition's distribution, in ns.
type latPct struct {
	P50, P90, P99, P999, Max float64
}

// pctOf sorts s and returns its percentiles.
func pctOf(s []float64) latPct {
	slices.Sort(s)
	at := func(q float64) float64 { return figures.Quantile(s, q) }
	return latPct{at(0.50), at(0.90), at(0.99), at(0.999), at(1)}
}

type latVariant struct {
	name  string
	setup func(o *options) (*latRunner, error)
}

type latGroup struct {
	title    string
	ref      string // the traditional path, the ratios' denominator
	variants []latVariant
	// loaded: a CPU-bound process runs on the other vCPU during the
	// table; its entries' variants start with loadedPrefix.
	loaded bool
}

// loadedPrefix starts the loaded tables' entry variants:
// "loaded-traditional→engine".
const loadedPrefix = "loaded-"

// prefix is what the group's entry variants start with.
func (g latGroup) prefix() string {
	if g.loaded {
		return loadedPrefix
	}
	return ""
}

func latGroups(o *options) []latGroup {
	devVariants := []latVariant{
		{"traditional", func(*options) (*latRunner, error) { return latTraditional() }},
		{"engine", func(*options) (*latRunner, error) { return latEngineDevice(engine.ModeReaper, 0) }},
		{"engine-dma", func(*options) (*latRunner, error) { return latEngineDevice(engine.ModeReaper, -1) }},
		{"engine-poll", func(*options) (*latRunner, error) { return latEngineDevice(engine.ModePoll, 0) }},
		{"engine-poll-dma", func(*options) (*latRunner, error) { return latEngineDevice(engine.ModePoll, -1) }},
	}
	dev := latGroup{title: "4 KiB host→device, one synchronous transfer at a time (vfio-mock HDMA, device model on its own thread)", ref: "traditional", variants: devVariants}
	loaded := latGroup{title: "4 KiB host→device, one synchronous transfer at a time, with a CPU-bound process on the other vCPU (" + burnWhere() + ")", ref: "traditional", variants: devVariants, loaded: true}
	gs := []latGroup{dev, loaded}
	if o.noFile == nil {
		f := latGroup{title: "4 KiB O_DIRECT random read, one synchronous read at a time, one file", ref: "readat"}
		f.variants = []latVariant{
			{"readat", latReadAt},
			{"engine", func(o *options) (*latRunner, error) { return latEngineFile(o, engine.ModeReaper) }},
			{"engine-poll", func(o *options) (*latRunner, error) { return latEngineFile(o, engine.ModePoll) }},
			{"fio-psync", func(o *options) (*latRunner, error) { return latFio(o, "psync") }},
			{"fio-io_uring", func(o *options) (*latRunner, error) { return latFio(o, "io_uring") }},
		}
		gs = append(gs, f)
		l := latGroup{title: fmt.Sprintf("4 KiB O_DIRECT random read under load: %d in flight, each read's submission-to-completion time", fileQD), ref: "readat-g64"}
		l.variants = []latVariant{
			{"readat-g64", latReadAtLoaded},
			{"engine", func(o *options) (*latRunner, error) { return latEngineFileLoaded(o, engine.ModeReaper) }},
			{"engine-poll", func(o *options) (*latRunner, error) { return latEngineFileLoaded(o, engine.ModePoll) }},
			{"fio-io_uring", func(o *options) (*latRunner, error) { return latFioDepth(o, "io_uring", fileQD) }},
		}
		gs = append(gs, l)
	}
	return gs
}

// latResult is one variant over the repetitions.
type latResult struct {
	name string
	desc string
	reps []latPct
	n    int // samples per repetition
	err  error
}

func (r *latResult) median() latPct {
	get := func(f func(latPct) float64) float64 {
		v := make([]float64, len(r.reps))
		for i, p := range r.reps {
			v[i] = f(p)
		}
		return newStat(v).Median
	}
	return latPct{get(func(p latPct) float64 { return p.P50 }), get(func(p latPct) float64 { return p.P90 }),
		get(func(p latPct) float64 { return p.P99 }), get(func(p latPct) float64 { return p.P999 }),
		get(func(p latPct) float64 { return p.Max })}
}

// latSamples is how many synchronous transfers one repetition times.
func latSamples(o *options) int {
	if o.quick {
		return 2000
	}
	return 20000
}

func runLatency(o *options, g latGroup) []*latResult {
	res := make([]*latResult, len(g.variants))
	n := latSamples(o)
	for i, v := range g.variants {
		res[i] = &latResult{name: v.name, n: n}
	}
	if g.loaded {
		stop, err := startBurner(o)
		if err != nil {
			for _, r := range res {
				r.err = fmt.Errorf("no load: %w", err)
			}
			return res
		}
		defer stop()
	}
	samples := make([]float64, n)
	for rep := 0; rep < o.reps; rep++ {
		for i, v := range g.variants {
			if res[i].err != nil {
				continue
			}
			p, desc, err := latRep(o, v, samples)
			res[i].desc = desc
			if err != nil {
				res[i].err = err
				continue
			}
			res[i].reps = append(res[i].reps, p)
		}
	}
	return res
}

// latRep is one repetition of one variant, alone: set up, warmed up (500
// transfers: caches, the pool's pages, the reaper's thread), timed,
// closed.
func latRep(o *options, v latVariant, samples []float64) (p latPct, desc string, err error) {
	o.logf("setting up latency/%s", v.name)
	r, err := v.setup(o)
	if err != nil {
		return p, "", fmt.Errorf("set up: %w", err)
	}
	defer func() {
		if cerr := r.close(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	switch {
	case r.fio != nil:
		p, err = r.fio(o.target * 4)
		return p, r.desc, err
	case r.fill != nil:
		if err := r.fill(make([]float64, 500)); err != nil {
			return p, r.desc, err
		}
		if err := r.fill(samples); err != nil {
			return p, r.desc, err
		}
		return pctOf(samples), r.desc, nil
	}
	for j := range 500 {
		if err := r.one(j); err != nil {
			return p, r.desc, err
		}
	}
	for j := range samples {
		t0 := time.Now()
		if err := r.one(j); err != nil {
			return p, r.desc, err
		}
		samples[j] = float64(time.Since(t0).Nanoseconds())
	}
	return pctOf(samples), r.desc, nil
}

// idleCPU measures an idle engine in the default mode: after 1000
// synchronous transfers (the reaper has run), the process's CPU time over
// the next d, as a percentage of one CPU. The device model is asleep (its
// worker sleeps after its spin), so this is the reaper's idle cost plus the
// Go runtime's.
func idleCPU(d time.Duration) (float64, error) {
	r, err := latEngineDevice(engine.ModeReaper, -1)
	if err != nil {
		return 0, err
	}
	defer r.close()
	for i := range 1000 {
		if err := r.one(i); err != nil {
			return 0, err
		}
	}
	time.Sleep(50 * time.Millisecond) // past the reaper's and the device's spins
	c0 := cpuNow()
	time.Sleep(d)
	return float64(cpuNow()-c0) / float64(d) * 100, nil
}

func latTraditional() (*latRunner, error) {
	r, err := setupTraditional(4096, 64, false, false)
	if err != nil {
		return nil, err
	}
	return &latRunner{one: func(int) error { return r.run(1) }, close: r.close, desc: r.desc}, nil
}

// latEngineDevice: Submit of one 4 KiB block, then Wait for it. cpu is
// hdmadev.Config.CPUThreshold (0: the default, measured at Open; -1: DMA).
func latEngineDevice(mode engine.Mode, cpu int) (*latRunner, error) {
	m, err := newMock(64<<20, false)
	if err != nil {
		return nil, err
	}
	e, err := openDeviceEngine(m, engine.Config{PoolSize: 4 << 20, Mode: mode, Logger: quietLogger()}, hdmadev.Config{CPUThreshold: cpu})
	if err != nil {
		m.Close()
		return nil, err
	}
	closeAll := func() error {
		ctx, cancel := closeCtx()
		defer cancel()
		err := e.Shutdown(ctx)
		if cerr := m.Close(); err == nil {
			err = cerr
		}
		return err
	}
	var ts [64]engine.Transfer
	for i := range ts {
		b, err := e.Alloc(4096)
		if err != nil {
			closeAll()
			return nil, err
		}
		ts[i] = engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(i) * 4096), Len: 4096}
	}
	ctx := context.Background()
	path := "DMA (descriptor, doorbell, completion ring)"
	if e.Backend().CPUThreshold >= 4096 {
		path = fmt.Sprintf("CPU copy into device memory (measured threshold %d B)", e.Backend().CPUThreshold)
	}
	modeName := "default (reaper) mode"
	if mode == engine.ModePoll {
		modeName = "poll mode"
	}
	return &latRunner{close: closeAll,
		desc: fmt.Sprintf("engine, %s: Submit then Wait; %s", modeName, path),
		one: func(i int) error {
			id, err := e.Submit(ts[i&63])
			if err != nil {
				return err
			}
			return e.Wait(ctx, id)
		}}, nil
}

func latReadAt(o *options) (*latRunner, error) {
	f, err := openDirect(o)
	if err != nil {
		return nil, err
	}
	buf, err := baseline.AlignedBuffer(fileBlock, 4096)
	if err != nil {
		f.Close()
		return nil, err
	}
	offs := offsets(o, offsRing)
	return &latRunner{close: f.Close, desc: "os.File.ReadAt of 4 KiB into an aligned heap buffer (pread(2), O_DIRECT)",
		one: func(i int) error {
			_, err := f.ReadAt(buf, offs[i&(offsRing-1)])
			return err
		}}, nil
}

func latEngineFile(o *options, mode engine.Mode) (*latRunner, error) {
	fe, err := openFileEngineBlocks(o, engine.Config{PoolSize: 4 << 20, Alignment: 4096, Mode: mode, Logger: quietLogger()}, 1)
	if err != nil {
		return nil, err
	}
	e, b := fe.e, fe.blocks[0]
	offs := offsets(o, offsRing)
	ctx := context.Background()
	modeName := "default (reaper) mode"
	if mode == engine.ModePoll {
		modeName = "poll mode"
	}
	return &latRunner{desc: "engine, " + modeName + ": Submit of a 4 KiB read (io_uring, registered buffer and file), then Wait",
		close: fe.close,
		one: func(i int) error {
			id, err := e.Submit(engine.Transfer{Src: engine.FileAt(offs[i&(offsRing-1)]), Dst: engine.Host(b), Len: fileBlock})
			if err != nil {
				return err
			}
			return e.Wait(ctx, id)
		}}, nil
}

// latReadAtLoaded: 64 goroutines each reading with ReadAt, every call
// timed; the samples are the first len(samples) calls to finish.
func latReadAtLoaded(o *options) (*latRunner, error) {
	f, err := openDirect(o)
	if err != nil {
		return nil, err
	}
	bufs := make([][]byte, fileQD)
	for i := range bufs {
		if bufs[i], err = baseline.AlignedBuffer(fileBlock, 4096); err != nil {
			f.Close()
			return nil, err
		}
	}
	offs := offsets(o, offsRing)
	return &latRunner{close: f.Close, desc: fmt.Sprintf("%d goroutines, each os.File.ReadAt of 4 KiB (pread(2), O_DIRECT), every call timed (fewer are in the kernel at once than goroutines: see file-4k readat-direct-g64 IOPS)", fileQD),
		fill: func(samples []float64) error {
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make([]error, fileQD)
			for g := range fileQD {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						t0 := time.Now()
						_, err := f.ReadAt(bufs[g], offs[(int(next.Load())+g*977)&(offsRing-1)])
						d := time.Since(t0)
						if err != nil {
							errs[g] = err
							return
						}
						i := next.Add(1) - 1
						if i >= int64(len(samples)) {
							return
						}
						samples[i] = float64(d.Nanoseconds())
					}
				}()
			}
			wg.Wait()
			return errors.Join(errs...)
		}}, nil
}

// latEngineFileLoaded: 64 reads in flight through one engine; each sample
// is the oldest read's time from its Submit to the return of its Wait,
// after which it is submitted again.
func latEngineFileLoaded(o *options, mode engine.Mode) (*latRunner, error) {
	fe, err := openFileEngineBlocks(o, engine.Config{PoolSize: 4 << 20, QueueDepth: 2 * fileQD, Alignment: 4096, Mode: mode, Logger: quietLogger()}, fileQD)
	if err != nil {
		return nil, err
	}
	e, blocks, closeAll := fe.e, fe.blocks, fe.close
	offs := offsets(o, offsRing)
	ctx := context.Background()
	modeName := "default (reaper) mode"
	if mode == engine.ModePoll {
		modeName = "poll mode"
	}
	var ids [fileQD]engine.ID
	var t0s [fileQD]time.Time
	next := 0
	submit := func(k int) error {
		t0s[k] = time.Now()
		id, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.FileAt(offs[next&(offsRing-1)]), Dst: engine.Host(blocks[k]), Len: fileBlock})
		next++
		ids[k] = id
		return err
	}
	return &latRunner{close: closeAll,
		desc: fmt.Sprintf("engine, %s: %d reads in flight; the oldest is waited for (Wait), timed from its Submit, and submitted again", modeName, fileQD),
		fill: func(samples []float64) error {
			for k := range fileQD {
				if err := submit(k); err != nil {
					return err
				}
			}
			for i := range samples {
				k := i % fileQD
				if err := e.Wait(ctx, ids[k]); err != nil {
					return err
				}
				samples[i] = float64(time.Since(t0s[k]).Nanoseconds())
				if err := submit(k); err != nil {
					return err
				}
			}
			return e.Drain(ctx)
		}}, nil
}

// latFio: fio's own completion-latency percentiles (lat_ns: submission to
// completion) at queue depth 1.
func latFio(o *options, ioengine string) (*latRunner, error) { return latFioDepth(o, ioengine, 1) }

// latFioDepth: fio's lat_ns percentiles at queue depth qd.
func latFioDepth(o *options, ioengine string, qd int) (*latRunner, error) {
	fio, path, err := fioAndFile(o)
	if err != nil {
		return nil, err
	}
	return &latRunner{close: func() error { return nil },
		desc: fmt.Sprintf("fio %s randread bs=4k direct=1 iodepth=%d (its lat_ns percentiles)", ioengine, qd),
		fio: func(d time.Duration) (latPct, error) {
			args := []string{"--name=hcomm", "--filename=" + path, "--rw=randread", "--bs=4k", "--direct=1",
				"--size=" + strconv.FormatInt(fileSize(o), 10), "--ioengine=" + ioengine, "--iodepth=" + strconv.Itoa(qd),
				"--time_based", "--runtime=" + strconv.Itoa(int(max(d, 100*time.Millisecond)/time.Millisecond)) + "ms",
				"--randrepeat=0", "--norandommap", "--output-format=json",
				"--lat_percentiles=1", "--clat_percentiles=0", "--percentile_list=50:90:99:99.9"}
			if ioengine == "io_uring" {
				args = append(args, "--fixedbufs", "--registerfiles")
			}
			out, err := exec.Command(fio, args...).Output()
			if err != nil {
				return latPct{}, fmt.Errorf("fio %v: %w", args, err)
			}
			return parseFioLat(out)
		}}, nil
}

func parseFioLat(out []byte) (latPct, error) {
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var j struct {
		Jobs []struct {
			Read struct {
				Lat struct {
					Max        float64            `json:"max"`
					Percentile map[string]float64 `json:"percentile"`
				} `json:"lat_ns"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &j); err != nil || len(j.Jobs) == 0 {
		return latPct{}, fmt.Errorf("parse fio output: %v", err)
	}
	l := j.Jobs[0].Read.Lat
	p := latPct{P50: l.Percentile["50.000000"], P90: l.Percentile["90.000000"], P99: l.Percentile["99.000000"],
		P999: l.Percentile["99.900000"], Max: l.Max}
	if p.P50 == 0 {
		return p, fmt.Errorf("fio reported no latency percentiles")
	}
	return p, nil
}

// printLatency prints one group's table: the medians over the repetitions
// of each percentile, in µs, and each engine variant's p50 and p99 as a
// ratio to the traditional path's (engine ÷ traditional: lower is better).
func (b *bench) addLatency(g latGroup, res []*latResult) {
	var ref *latResult
	for _, r := range res {
		if r.name == g.ref && r.err == nil && len(r.reps) > 0 {
			ref = r
		}
	}
	for _, r := range res {
		if r.err != nil || len(r.reps) == 0 || r == ref || ref == nil {
			continue
		}
		m, rm := r.median(), ref.median()
		runs := func(x *latResult, f func(latPct) float64) []float64 {
			v := make([]float64, len(x.reps))
			for i, p := range x.reps {
				v[i] = f(p)
			}
			return v
		}
		for _, q := range []struct {
			name string
			e, b float64
			f    func(latPct) float64
		}{
			{"p50", m.P50, rm.P50, func(p latPct) float64 { return p.P50 }},
			{"p90", m.P90, rm.P90, func(p latPct) float64 { return p.P90 }},
			{"p99", m.P99, rm.P99, func(p latPct) float64 { return p.P99 }},
			{"p99.9", m.P999, rm.P999, func(p latPct) float64 { return p.P999 }},
			{"max", m.Max, rm.Max, func(p latPct) float64 { return p.Max }},
		} {
			b.entries = append(b.entries, entry{Name: "latency", Variant: g.prefix() + g.ref + "→" + r.name, Metric: q.name, Unit: "ns",
				Engine: ptr(q.e), Baseline: ptr(q.b), Ratio: ptr(q.e / q.b), Runs: len(r.reps), Better: "lower",
				BaselineVariant: g.prefix() + g.ref, EngineRuns: runs(r, q.f), BaselineRuns: runs(ref, q.f)})
		}
	}
	if !b.tables() {
		return
	}
	fmt.Fprintf(b.out, "\n== latency: %s\n", g.title)
	fmt.Fprintf(b.out, "   µs per transfer, median over %d repetitions of each percentile; ratio = variant ÷ %s (lower is better)\n", b.o.reps, g.ref)
	tw := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "variant\tp50\tp90\tp99\tp99.9\tmax\tp50 ratio\tp99 ratio\tsamples/rep\t\n")
	for _, r := range res {
		if r.err != nil || len(r.reps) == 0 {
			continue
		}
		m := r.median()
		r50, r99 := "", ""
		if ref != nil {
			rm := ref.median()
			r50, r99 = fmt.Sprintf("%.3g×", m.P50/rm.P50), fmt.Sprintf("%.3g×", m.P99/rm.P99)
		}
		ns := strconv.Itoa(r.n)
		if r.desc != "" && bytes.HasPrefix([]byte(r.desc), []byte("fio")) {
			ns = "fio"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, num(m.P50/1e3), num(m.P90/1e3), num(m.P99/1e3),
			num(m.P999/1e3), num(m.Max/1e3), r50, r99, ns)
	}
	tw.Flush()
	for _, r := range res {
		switch {
		case r.err != nil:
			fmt.Fprintf(b.out, "   %s: not measured: %s\n", r.name, firstLine(r.err.Error()))
		default:
			b.describe(r.name, r.desc)
		}
	}
}
