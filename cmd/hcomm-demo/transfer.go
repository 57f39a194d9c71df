package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/cmd/internal/baseline"
	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"github.com/hcomm-go/hcomm/cmd/internal/selftrace"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/trace"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

const (
	blockSize = 4096
	batch     = 64
	reps      = 5
	poolSize  = 32 << 20
)

// path is one way of moving blocks host→device and back.
type path struct {
	name        string
	desc        string
	roundTrips  func(n int) error // n blocks there and back (2n transfers)
	verify      func() error      // what came back is what went
	devSyscalls func() uint64     // the device model's MSI eventfd writes so far
	close       func() error
	pool        string // what the host memory is
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newDevice is the device both paths drive: vfio-mock's HDMA model, its
// worker polling the doorbell for 1 ms before it sleeps.
func newDevice() (*mock.Device, error) {
	return mock.New(mock.Config{Spin: time.Millisecond, Logger: quiet()})
}

func pattern(i int) byte { return byte(i*7 + 3) }

// openBaseline opens the traditional path (cmd/internal/baseline, a staging
// buffer of one block) on a new vfio-mock device m.
func openBaseline() (*mock.Device, *baseline.Device, error) {
	m, err := newDevice()
	if err != nil {
		return nil, nil, err
	}
	d, err := baseline.OpenDevice(baseline.DeviceConfig{Device: m, Staging: blockSize, Logger: quiet()})
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, d, nil
}

// openMockEngine opens an engine (cfg, quiet, on the HDMA backend with bc)
// on a new vfio-mock device m; closeAll shuts the engine down, then m.
func openMockEngine(bc hdmadev.Config, cfg engine.Config) (m *mock.Device, e *engine.Engine, closeAll func() error, err error) {
	if m, err = newDevice(); err != nil {
		return nil, nil, nil, err
	}
	be, err := hdmadev.New(m, bc)
	if err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	cfg.Backend, cfg.Logger = be, quiet()
	if e, err = engine.Open(cfg); err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	closeAll = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := e.Shutdown(ctx)
		if cerr := m.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return m, e, closeAll, nil
}

// openEngine: batches of 64 host→device transfers from the engine's pool
// (DMA-mapped into the device once, at Open), one doorbell per batch, then
// 64 device→host transfers into other blocks; completions polled.
func openEngine() (*path, error) {
	m, e, closeAll, err := openMockEngine(hdmadev.Config{CPUThreshold: -1},
		engine.Config{PoolSize: poolSize, Mode: engine.ModePoll, Populate: true})
	if err != nil {
		return nil, err
	}
	var src, back []engine.Block
	var there, home []engine.Transfer
	for i := range batch {
		s, err1 := e.Alloc(blockSize)
		b, err2 := e.Alloc(blockSize)
		if err1 != nil || err2 != nil {
			closeAll()
			return nil, fmt.Errorf("alloc: %v %v", err1, err2)
		}
		for j, p := 0, s.Bytes(); j < blockSize; j++ {
			p[j] = pattern(i + j)
		}
		src, back = append(src, s), append(back, b)
		off := uint64(i * blockSize)
		there = append(there, engine.Transfer{Src: engine.Host(s), Dst: engine.DeviceAt(off), Len: blockSize})
		home = append(home, engine.Transfer{Src: engine.DeviceAt(off), Dst: engine.Host(b), Len: blockSize})
	}
	pool := fmt.Sprintf("%d MiB on hugetlb 2 MiB pages (its first choice)", poolSize>>20)
	switch len(e.Fallbacks()) {
	case 0:
	case 1:
		pool = fmt.Sprintf("%d MiB on transparent hugepages (hugetlb 2 MiB refused: none reserved)", poolSize>>20)
	default:
		pool = fmt.Sprintf("%d MiB on 4 KiB pages (hugetlb and THP refused; see engine.Fallbacks)", poolSize>>20)
	}
	ctx := context.Background()
	return &path{
		name: "hcomm engine", pool: pool,
		desc: "Alloc'd blocks already DMA-mapped; SubmitBatch of 64 descriptors, one doorbell; completions polled from the ring",
		roundTrips: func(n int) error {
			for i := 0; i < n; i += batch {
				for _, ts := range [][]engine.Transfer{there, home} {
					if k, err := e.SubmitBatch(ts, nil); err != nil || k != batch {
						return fmt.Errorf("submit: %d of %d: %w", k, batch, err)
					}
					if err := e.Drain(ctx); err != nil {
						return err
					}
				}
			}
			return nil
		},
		verify: func() error {
			st := e.Stats()
			if bad := st.DeviceErrors + st.Timeouts + st.Canceled; bad > 0 {
				return fmt.Errorf("%d transfers failed", bad)
			}
			for i := range src {
				if !bytes.Equal(src[i].Bytes(), back[i].Bytes()) {
					return fmt.Errorf("block %d came back different", i)
				}
			}
			return nil
		},
		devSyscalls: func() uint64 { return m.Counters().MSIs },
		close:       closeAll,
	}, nil
}

// openTraditional: per block, pwrite(2) into the kernel staging buffer the
// device maps, doorbell, blocking read(2) of the completion eventfd; back:
// doorbell, blocking read(2), pread(2) out of the staging buffer.
func openTraditional() (*path, error) {
	m, d, err := openBaseline()
	if err != nil {
		return nil, err
	}
	src, back := make([][]byte, batch), make([][]byte, batch)
	for i := range src {
		src[i], back[i] = make([]byte, blockSize), make([]byte, blockSize)
		for j := range src[i] {
			src[i][j] = pattern(i + j)
		}
	}
	return &path{
		name: "traditional path", pool: "Go heap buffers",
		desc: "per block: pwrite(2) into a DMA-mapped staging memfd (the kernel copies), doorbell, read(2) blocks on the completion eventfd; back: the same, then pread(2)",
		roundTrips: func(n int) error {
			for i := range n {
				s := i % batch
				if err := d.Write(src[s], uint64(s*blockSize)); err != nil {
					return err
				}
				if err := d.Read(back[s], uint64(s*blockSize)); err != nil {
					return err
				}
			}
			return nil
		},
		verify: func() error {
			for i := range src {
				if !bytes.Equal(src[i], back[i]) {
					return fmt.Errorf("block %d came back different", i)
				}
			}
			return nil
		},
		devSyscalls: func() uint64 { return m.Counters().MSIs },
		close: func() error {
			err := d.Close()
			if cerr := m.Close(); err == nil {
				err = cerr
			}
			return err
		},
	}, nil
}

func openPath(kind string) (*path, error) {
	switch kind {
	case "engine":
		return openEngine()
	case "traditional":
		return openTraditional()
	}
	return nil, fmt.Errorf("unknown path %q (engine or traditional)", kind)
}

// tally is what eBPF counted for one path, per transfer.
type tally struct {
	syscalls, device, copies float64
	byName                   map[string]float64
}

// workerReport is the traced child's last line.
type workerReport struct {
	Dev uint64 `json:"dev"`
	Err string `json:"err,omitempty"`
}

// runWorker is the traced child: set up, warm up, then n round trips
// between the parent's two snapshots.
func runWorker(kind string, n int) int {
	fail := func(err error) int { _ = selftrace.Report(workerReport{Err: err.Error()}); return 1 }
	p, err := openPath(kind)
	if err != nil {
		return fail(err)
	}
	defer p.close()
	if err := p.roundTrips(batch); err != nil {
		return fail(err)
	}
	if err := selftrace.Begin(); err != nil {
		return fail(err)
	}
	dev0 := p.devSyscalls()
	err = p.roundTrips(n)
	if eerr := selftrace.End(); err == nil {
		err = eerr
	}
	dev := p.devSyscalls() - dev0
	if err == nil {
		err = p.verify()
	}
	if err != nil {
		return fail(err)
	}
	if err := selftrace.Report(workerReport{Dev: dev}); err != nil {
		return 1
	}
	return 0
}

// count runs kind as a traced child and turns the window into per-transfer
// figures: the device model's interrupt writes (a vfio-mock artefact; an
// MSI on hardware) apart from the host's calls; CPU copies as bytes copied
// by syscalls and io_uring over bytes moved.
func count(kind string, n int) (*tally, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	d, line, err := selftrace.Run([]string{exe, "-worker", kind, "-n", strconv.Itoa(n)}, trace.Options{Logger: quiet()}, 2*time.Minute)
	var rep workerReport
	if line != nil {
		_ = json.Unmarshal(line, &rep)
	}
	if rep.Err != "" {
		return nil, fmt.Errorf("%s: %s", kind, rep.Err)
	}
	if err != nil {
		return nil, err
	}
	transfers := float64(2 * n)
	t := &tally{byName: map[string]float64{}}
	var total uint64
	for name, k := range d.SyscallCounts() {
		if k < 1<<62 { // not a negative delta after the boundary fix-up
			total += k
			t.byName[name] = float64(k) / transfers
		}
	}
	t.device = float64(rep.Dev) / transfers
	t.syscalls = float64(total-min(rep.Dev, total)) / transfers
	cp := d.CopiedBytes() + d.Engine.PathBytes[engine.PathCPU]
	t.copies = float64(cp) / transfers / blockSize
	return t, nil
}

// transfers prints the first figure: 4 KiB transfers pipelined on both
// paths, timed, counted by eBPF (as root) and verified, then the latency
// figure.
func (d *demo) transfers() error {
	// As root, reserve the 2 MiB pages the engine's pool wants.
	d.reserve(2<<20, poolSize/(2<<20)+2, "the engine's 32 MiB pool")
	paths := make([]*path, 2)
	for i, kind := range []string{"traditional", "engine"} {
		p, err := openPath(kind)
		if err != nil {
			return err
		}
		defer p.close()
		paths[i] = p
	}
	d.printf("%d blocks of 4 KiB go host→device and back, %d times per run, %d runs, interleaved;", batch, d.n/batch, reps)
	d.printf("device: vfio-mock's HDMA model (IOMMU, descriptor rings, DMA by memmove, MSI on an eventfd), one per path")
	d.printf("engine pool: %s", paths[1].pool)
	times, err := d.timePaths(paths)
	if err != nil {
		return err
	}
	d.printf("every block came back byte for byte, on both paths")
	tallies, traced := d.countPaths()
	ratio := d.printThroughput(paths, times, tallies, traced)
	d.explain(paths, tallies, ratio)
	return d.latency()
}

// timePaths warms both paths up, then times reps interleaved runs of d.n
// round trips each (ns per transfer), and verifies what came back.
func (d *demo) timePaths(paths []*path) ([][]float64, error) {
	times := make([][]float64, len(paths))
	for _, p := range paths {
		if err := p.roundTrips(batch); err != nil { // warm up
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	for range reps {
		for i, p := range paths {
			t0 := time.Now()
			if err := p.roundTrips(d.n); err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			times[i] = append(times[i], float64(time.Since(t0).Nanoseconds())/float64(2*d.n))
		}
	}
	for _, p := range paths {
		if err := p.verify(); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return times, nil
}

// countPaths counts both paths with eBPF in traced children; without the
// privileges (or when a count fails) the tallies are nil and traced says
// why, for the table's cells.
func (d *demo) countPaths() (tallies []*tally, traced string) {
	tallies = make([]*tally, 2)
	if !d.root {
		d.skip("syscall and copy counts: eBPF tracing needs root (CAP_BPF+CAP_PERFMON); the timings above still ran")
		return tallies, "n/a (needs root)"
	}
	if err := trace.CheckPrivileges(); err != nil {
		d.skip("syscall and copy counts: %v", err)
		return tallies, "n/a (" + firstLine(err.Error()) + ")"
	}
	for i, kind := range []string{"traditional", "engine"} {
		t, err := count(kind, d.n)
		if err != nil {
			d.skip("counting %s: %v", kind, err)
			return tallies, "n/a (count failed)"
		}
		tallies[i] = t
	}
	return tallies, ""
}

// printThroughput prints the throughput table and returns the engine's
// time per transfer over the traditional path's.
func (d *demo) printThroughput(paths []*path, times [][]float64, tallies []*tally, traced string) float64 {
	fmt.Fprintln(d.out)
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	d.printf("Throughput: 4 KiB transfers pipelined (the engine: batches of 64, one doorbell each; the traditional")
	d.printf("path: one blocking call after another) — time per transfer is the run's time over its transfers:")
	fmt.Fprintf(tw, "   \ttime/transfer, pipelined, median [min–max]\tsyscalls/transfer\tCPU copies/transfer\t\n")
	var tm [2]float64
	for i, p := range paths {
		tm[i] = figures.Median(times[i])
		sc, cp := traced, ""
		if t := tallies[i]; t != nil {
			sc = fmt.Sprintf("%.3f", t.syscalls)
			if t.device > 0 {
				sc += fmt.Sprintf("  (+%.3f device irq)", t.device)
			}
			cp = fmt.Sprintf("%.3f", t.copies)
		}
		fmt.Fprintf(tw, "   %s\t%s [%s–%s]\t%s\t%s\t\n", p.name, dur(tm[i]), dur(slices.Min(times[i])), dur(slices.Max(times[i])), sc, cp)
	}
	ratio := tm[1] / tm[0]
	rs, rc := "", ""
	if tallies[0] != nil && tallies[1] != nil {
		rs = fmt.Sprintf("%.0f → %.3f", tallies[0].syscalls, tallies[1].syscalls)
		rc = fmt.Sprintf("%.0f → %.3f", tallies[0].copies, tallies[1].copies)
	}
	fmt.Fprintf(tw, "   engine ÷ traditional\t%.3f× (%.0f× less time per transfer, pipelined)\t%s\t%s\t\n", ratio, 1/ratio, rs, rc)
	tw.Flush()
	fmt.Fprintln(d.out)
	return ratio
}

// explain says what the throughput table means, with the counts when
// there are any, and what each path does.
func (d *demo) explain(paths []*path, tallies []*tally, ratio float64) {
	if tallies[0] != nil && tallies[1] != nil {
		d.printf("What it means: per 4 KiB transfer the traditional path makes %.1f system calls and the kernel", tallies[0].syscalls)
		d.printf("copies every byte once (pwrite into, pread out of its staging buffer); the engine writes a 64-byte")
		d.printf("descriptor into a ring in memory the device already maps and rings one doorbell per 64 transfers:")
		d.printf("%.3f system calls, no CPU copy (the device's DMA moves the bytes), %.0f× less time per transfer", tallies[1].syscalls, 1/ratio)
		d.printf("when transfers are pipelined (a throughput figure; one transfer's latency is the next table).")
	} else {
		d.printf("What it means: per 4 KiB transfer the traditional path makes two system calls by construction")
		d.printf("(pwrite or pread, and a blocking read of the completion eventfd) and the kernel copies every byte;")
		d.printf("the engine writes a 64-byte descriptor into a ring the device already maps, one doorbell per 64")
		d.printf("transfers, no copy: %.0f× less time per transfer when pipelined (a throughput figure; one transfer's", 1/ratio)
		d.printf("latency is the next table). (Counted by eBPF when run as root.)")
	}
	d.printf("(\"device irq\": vfio-mock signals completion by writing an eventfd; on hardware that is an MSI,")
	d.printf("not a system call of the process. The engine polls and never sleeps on it.)")
	for i, p := range paths {
		d.printf("%-17s %s", p.name+":", p.desc)
		if t := tallies[i]; t != nil {
			d.printf("%-17s eBPF saw per transfer: %s", "", byName(t.byName))
		}
	}
}

func byName(m map[string]float64) string {
	var names []string
	for k, v := range m {
		if v >= 0.001 {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		if a < b {
			return -1
		}
		return 1
	})
	s := ""
	for i, k := range names {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %.3f", k, m[k])
	}
	if s == "" {
		return "nothing"
	}
	return s
}

func dur(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.2f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' || i > 140 {
			return s[:i]
		}
	}
	return s
}
