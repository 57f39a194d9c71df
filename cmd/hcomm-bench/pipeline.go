package main

// The pipeline scenario: an O_DIRECT file of 1 GiB (256 MiB with -quick),
// laid out by the scenario in a directory of its own on a real disk file
// system, into the device model's memory (vfio-mock HDMA), three ways in
// one run, interleaved repetition by repetition:
//
//   - engine: one Engine.Copy over one engine holding the device backend
//     (hdmadev, DMA engine only) and the file backend (uringfile, O_DIRECT),
//     pipeChunk chunks, pipeDepth in flight, through pool blocks;
//   - traditional: per chunk, ReadAt of the O_DIRECT file into a heap
//     buffer, then the baseline's device write (pwrite into the staging
//     memfd, descriptor and doorbell, blocking read of the completion
//     eventfd);
//   - fio: fio's sequential read of the same file, same block size and
//     queue depth, io_uring, O_DIRECT — the disk's ceiling;
//   - fio beside the device stage (file_to_device/fio_beside_device): fio's
//     read again while the device stage below writes beside it, uncoupled —
//     how much slower the disk reads while the device works;
//   - the device stage alone (host_to_device/engine): the engine of the
//     first row, set up the same way, writing the same bytes from its pool
//     blocks into device memory, pipeChunk transfers, pipeDepth in flight,
//     each completion's block submitting the next chunk — the device
//     model's ceiling. A pipeline runs at the speed of its slower stage:
//     when the disk outruns the device model (a memmove on a goroutine,
//     which a real device's DMA engine does in hardware), that is the
//     device's, and the goal against the slower stage says how close the
//     Copy comes to it.
//
// Host-side CPU is the process's CPU (getrusage, every thread) minus the
// device model's own: the mock device is created inside pprof.Do with the
// label pipeDevLabel, so its worker goroutine (and nothing else) carries
// it, and a CPU profile taken over the same window as the rusage delta
// gives that goroutine's share of the process's CPU samples: its CPU time
// is that share of the rusage delta. (The share, not the profile's own
// nanoseconds: a thread's CPU timer fires at most once per kernel tick, so
// at pipeProfileHz above CONFIG_HZ every thread is sampled once per tick of
// its CPU time — the same rate for all, the shares unbiased — while the
// profile's period, 1/pipeProfileHz, undercounts.) vfio-mock runs its worker
// as a goroutine, not on an OS thread of its own, so a thread's CPU clock
// cannot isolate it; the label follows the goroutine wherever it runs. Both
// rows are measured this way. Its copying (staging or pool → device memory)
// is what a real device's DMA engine does in hardware.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/cmd/internal/baseline"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

const (
	pipeChunk = 1 << 20 // bytes per chunk (engine), per ReadAt and device write (traditional), fio's bs
	pipeDepth = 8       // chunks in flight (engine), fio's iodepth
	// pipeDataFile is the data file's name in the scenario's own directory.
	pipeDataFile = "pipeline.dat"
	// pipeProfileHz is the CPU profile's sampling rate: as often as the
	// kernel's tick allows (Go's 100 Hz would give the device model's
	// ~0.1-0.3 CPU-seconds per GiB a few dozen samples).
	pipeProfileHz = 1000
)

// pipeDevLabel marks the device model's goroutine in the CPU profile.
var pipeDevLabel = [2]string{"hcomm-bench", "device-model"}

// pipeVariants are the rows, in the order each repetition runs them.
var pipeVariants = []string{"file_to_device/engine", "file_to_device/traditional", "file_to_device/fio"}

// pipeDeviceStage is the device stage alone; pipeSlowerStage names the
// baseline of the goal against the slower stage: per repetition, the
// lesser of fio's read and the device stage's bandwidth.
const (
	pipeDeviceStage = "host_to_device/engine"
	pipeSlowerStage = "file_to_device/slower_stage"
	// pipeFioBeside is fio's read of the file while the device stage runs
	// beside it, uncoupled: on a machine where the disk's transfers and
	// the device model's copying share memory bandwidth or host CPUs (a
	// virtual disk is a copy by the hypervisor), the disk reads slower
	// than alone while the device works, and so does any pipeline of the
	// two.
	pipeFioBeside = "file_to_device/fio_beside_device"
	// pipeBesideStep is how much the device stage moves per round while
	// fio reads beside it (the granularity of its bandwidth meanwhile).
	pipeBesideStep = 64 << 20
)

// pipeSizeOverride replaces the file's size when > 0 (tests).
var pipeSizeOverride int64

func pipelineSize(o *options) int64 {
	if pipeSizeOverride > 0 {
		return pipeSizeOverride
	}
	if o.quick {
		return 256 << 20
	}
	return 1 << 30
}

// countedOnly names the scenarios whose registered workloads serve only
// the traced children that count their copies (their own runner measures
// them, in no table).
var countedOnly = map[string]bool{"pipeline": true}

func init() {
	// The counted workloads (eBPF, traced child): run(n) moves n chunks of
	// the file in -dir to device memory, from where the last run stopped.
	for _, v := range pipeVariants[:2] {
		register(&workload{scenario: "pipeline", variant: v, count: true, setup: func(o *options) (*runner, error) {
			size := pipelineSize(o)
			p, err := openPipe(v, filepath.Join(o.dir, pipeDataFile), size)
			if err != nil {
				return nil, err
			}
			var pos int64
			return &runner{per: 1, bytes: pipeChunk, close: p.close, desc: p.desc, devSyscalls: func() uint64 { return p.dev.Counters().MSIs }, run: func(n int) error {
				want := int64(n) * pipeChunk
				if want > size {
					return fmt.Errorf("pipeline: %d chunks: the file holds %d", n, size/pipeChunk)
				}
				if pos+want > size {
					pos = 0
				}
				err := p.move(pos, want)
				pos += want
				return err
			}}, nil
		}})
	}
}

// pipe is one set-up path from the file into device memory.
type pipe struct {
	desc   string
	dev    *mock.Device   // the device model
	engine *engine.Engine // the engine rows' engine (nil: the traditional way)
	devmem []byte
	// move moves bytes [off, off+n) of the file to the same offsets of
	// device memory.
	move func(off, n int64) error
	// poolPeak is the engine pool's highest use so far (nil: no pool).
	poolPeak func() int64
	// check verifies device memory after a move of [0, size) (nil: it
	// holds the file, checkDevmem).
	check func(size int64) error
	close func() error
}

// labeledMock creates the device model with its worker goroutine labelled
// pipeDevLabel (goroutines inherit the labels of the one that starts
// them), device memory of size bytes, touched once so that it is resident
// before anything is measured.
func labeledMock(size int64) (*mock.Device, []byte, error) {
	var m *mock.Device
	var err error
	pprof.Do(context.Background(), pprof.Labels(pipeDevLabel[0], pipeDevLabel[1]), func(context.Context) {
		m, err = mock.New(mock.Config{Spin: time.Millisecond, DevMemSize: int(size), Logger: quietLogger()})
	})
	if err != nil {
		return nil, nil, err
	}
	reg, err := m.Region(vfio.RegionBAR2)
	if err != nil || reg.Mapped() == nil {
		m.Close()
		return nil, nil, fmt.Errorf("pipeline: device memory not mappable: %v", err)
	}
	dm := reg.Mapped()
	for i := 0; i < len(dm); i += 4096 {
		dm[i] = 0
	}
	return m, dm, nil
}

func openPipe(variant, path string, size int64) (*pipe, error) {
	m, dm, err := labeledMock(size)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("pipeline: open %s O_DIRECT: %w", path, err)
	}
	var p *pipe
	switch variant {
	case "file_to_device/engine":
		p, err = openPipeEngine(m, f)
	case "file_to_device/traditional":
		p, err = openPipeTraditional(m, f)
	case pipeDeviceStage:
		p, err = openPipeDeviceStage(m, f, dm)
	default:
		err = fmt.Errorf("pipeline: no variant %q", variant)
	}
	if err != nil {
		f.Close()
		m.Close()
		return nil, err
	}
	p.devmem, p.dev = dm, m
	inner := p.close
	p.close = func() error {
		err := inner()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if cerr := m.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return p, nil
}

// openPipeEngine: one engine over the device (DMA engine only: the CPU
// path into device memory is off) and the file, a pool of exactly
// pipeChunk × pipeDepth bytes, default (reaper) mode.
func openPipeEngine(m *mock.Device, f *os.File) (*pipe, error) {
	fb, err := uringfile.New(f, uringfile.Config{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	db, err := hdmadev.New(m, hdmadev.Config{CPUThreshold: -1})
	if err != nil {
		_ = fb.Close()
		return nil, err
	}
	e, err := engine.Open(engine.Config{Backend: db, Backends: []backend.Backend{fb}, Alignment: 4096,
		PoolSize: pipeChunk * pipeDepth, QueueDepth: 64, Populate: true, Logger: quietLogger()})
	if err != nil {
		_ = fb.Close()
		_ = db.Close()
		return nil, err
	}
	ts := e.Targets()
	dev, file := ts[0], ts[1]
	return &pipe{
		engine: e,
		desc:   fmt.Sprintf("engine: one Copy file → device, %d KiB chunks, %d in flight, one engine (hdmadev + uringfile O_DIRECT), pool of %d MiB", pipeChunk>>10, pipeDepth, pipeChunk*pipeDepth>>20),
		move: func(off, n int64) error {
			c, err := e.Copy(context.Background(), engine.CopySpec{Src: file.FileAt(off), Dst: dev.DeviceAt(uint64(off)), Len: n, Chunk: pipeChunk, Depth: pipeDepth})
			if err != nil {
				return err
			}
			return c.Wait(context.Background())
		},
		poolPeak: func() int64 { return e.Stats().Pool.Peak },
		close: func() error {
			ctx, cancel := closeCtx()
			defer cancel()
			return e.Shutdown(ctx)
		},
	}, nil
}

// openPipeDeviceStage: the engine of openPipeEngine (the same backends,
// pool and mode), its pipeDepth blocks filled once with the file's first
// chunk before anything is timed, writing them into device memory chunk
// by chunk: each completion's callback hands its block back to the
// moving goroutine, which submits the next chunk from it — the hand-off
// a Copy makes too. The file backend is there, idle, as in the Copy's
// engine. Device memory then holds the first chunk's bytes in every chunk.
func openPipeDeviceStage(m *mock.Device, f *os.File, dm []byte) (*pipe, error) {
	p, err := openPipeEngine(m, f)
	if err != nil {
		return nil, err
	}
	e := p.engine
	blocks := make([]engine.Block, pipeDepth)
	for i := range blocks {
		if blocks[i], err = e.Alloc(pipeChunk); err != nil {
			p.close()
			return nil, fmt.Errorf("pipeline: device stage: block %d of %d: %w", i, pipeDepth, err)
		}
		pipePattern(blocks[i].Bytes(), 0)
	}
	dev := e.Targets()[0]
	done := make(chan engine.Result, pipeDepth)
	cb := func(r engine.Result) { done <- r }
	ctx := context.Background()
	p.desc = fmt.Sprintf("the device stage alone: the same engine writing %d KiB from each of its %d pool blocks into device memory per transfer, %d in flight, each completion's block submitting the next chunk", pipeChunk>>10, pipeDepth, pipeDepth)
	p.move = func(off, n int64) error {
		next, end, inflight := off, off+n, 0
		submit := func(i int) error {
			k := min(pipeChunk, end-next)
			if _, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.HostAt(blocks[i], 0), Dst: dev.DeviceAt(uint64(next)), Len: int(k), Callback: cb, User: uint64(i)}); err != nil {
				return fmt.Errorf("pipeline: device stage at %d: %w", next, err)
			}
			next += k
			inflight++
			return nil
		}
		var failed error
		for i := 0; i < pipeDepth && next < end; i++ {
			if failed = submit(i); failed != nil {
				break
			}
		}
		for inflight > 0 {
			r := <-done
			inflight--
			switch {
			case r.Err != nil && failed == nil:
				failed = fmt.Errorf("pipeline: device stage: %w", r.Err)
			case failed == nil && next < end:
				failed = submit(int(r.User))
			}
		}
		return failed
	}
	p.check = func(size int64) error {
		want := make([]byte, pipeChunk)
		pipePattern(want, 0)
		for off := int64(0); off < size; off += pipeChunk {
			if !bytes.Equal(dm[off:off+pipeChunk], want) {
				return fmt.Errorf("device stage: device memory at %d does not hold its block's bytes", off)
			}
		}
		return nil
	}
	return p, nil
}

// openPipeTraditional: ReadAt into an aligned heap buffer, then the
// baseline's device write of it, chunk by chunk, one goroutine.
func openPipeTraditional(m *mock.Device, f *os.File) (*pipe, error) {
	d, err := baseline.OpenDevice(baseline.DeviceConfig{Device: m, Staging: pipeChunk, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	buf, err := baseline.AlignedBuffer(pipeChunk, 4096)
	if err != nil {
		d.Close()
		return nil, err
	}
	return &pipe{
		desc: fmt.Sprintf("traditional: per %d KiB, ReadAt (O_DIRECT) into a heap buffer, then pwrite into the staging memfd, doorbell, blocking eventfd read (package baseline)", pipeChunk>>10),
		move: func(off, n int64) error {
			for p := off; p < off+n; p += pipeChunk {
				k := min(pipeChunk, off+n-p)
				if _, err := f.ReadAt(buf[:k], p); err != nil {
					return fmt.Errorf("pipeline: ReadAt %d: %w", p, err)
				}
				if err := d.Write(buf[:k], uint64(p)); err != nil {
					return fmt.Errorf("pipeline: device write at %d: %w", p, err)
				}
			}
			return nil
		},
		close: d.Close,
	}, nil
}

// pipePattern fills b with the bytes of the data file at offset off.
func pipePattern(b []byte, off int64) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := uint64(off+int64(i)) * 0x9e3779b97f4a7c15
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// layOutPipeFile writes the data file (the pattern), syncs it and drops it
// from the page cache (POSIX_FADV_DONTNEED; every read is O_DIRECT anyway).
func layOutPipeFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		pipePattern(buf, off)
		if _, err := f.WriteAt(buf, off); err != nil {
			return fmt.Errorf("lay out %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("lay out %s: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop %s from the page cache: %w", path, err)
	}
	return f.Close()
}

// checkDevmem compares device memory with the file's pattern.
func checkDevmem(dm []byte, size int64) error {
	want := make([]byte, pipeChunk)
	for off := int64(0); off < size; off += pipeChunk {
		pipePattern(want, off)
		if !bytes.Equal(dm[off:off+pipeChunk], want) {
			return fmt.Errorf("device memory differs from the file in the chunk at %d", off)
		}
	}
	return nil
}

// pipeSample is one repetition of one variant.
type pipeSample struct {
	gibps      float64 // GiB/s
	hostCPU    float64 // CPU-seconds per GiB, the device model's excluded
	devCPU     float64 // the device model's CPU-seconds per GiB
	rssBeyond  float64 // MiB: peak RSS (+ hugetlb pages) minus device memory
	privBeyond float64 // MiB: the same without shared file pages (the executable's text)
	poolPeakMB float64 // MiB, engine only
	// CPUs other processes kept busy and CPUs the hypervisor stole while
	// the copy ran (/proc/stat).
	others, steal float64
}

// pipeOnce sets a variant up, moves the whole file into device memory
// once, measured, checks the bytes and tears down.
func pipeOnce(path string, size int64, variant string) (pipeSample, string, error) {
	p, err := openPipe(variant, path, size)
	if err != nil {
		return pipeSample{}, "", err
	}
	defer p.close()
	runtime.GC()
	peak, err := readResident()
	if err != nil {
		return pipeSample{}, "", err
	}
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r, err := readResident(); err == nil {
				peak.total, peak.private = max(peak.total, r.total), max(peak.private, r.private)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	ld := readMachineLoad()
	el, hostNs, devNs, err := pipeMeasure(func() error { return p.move(0, size) })
	others, steal := ld.cpus()
	close(stop)
	<-sampled
	if err != nil {
		return pipeSample{}, "", err
	}
	check := p.check
	if check == nil {
		check = func(size int64) error { return checkDevmem(p.devmem, size) }
	}
	if err := check(size); err != nil {
		return pipeSample{}, "", err
	}
	gib := float64(size) / (1 << 30)
	s := pipeSample{gibps: gib / el.Seconds(), devCPU: float64(devNs) / 1e9 / gib,
		hostCPU:    float64(hostNs) / 1e9 / gib,
		rssBeyond:  float64(peak.total-int64(len(p.devmem))) / (1 << 20),
		privBeyond: float64(peak.private-int64(len(p.devmem))) / (1 << 20), others: others, steal: steal}
	if p.poolPeak != nil {
		s.poolPeakMB = float64(p.poolPeak()) / (1 << 20)
	}
	return s, p.desc, nil
}

// pipeMeasure runs fn and returns its wall time and the process's CPU time
// over it, split into the host's and the device model's (its worker's share
// of a CPU profile's samples over the same window, see the file's comment).
func pipeMeasure(fn func() error) (el time.Duration, hostNs, devNs int64, err error) {
	var prof bytes.Buffer
	runtime.SetCPUProfileRate(pipeProfileHz) // pprof then keeps this rate (and says so on stderr)
	if err := pprof.StartCPUProfile(&prof); err != nil {
		return 0, 0, 0, fmt.Errorf("pipeline: CPU profile: %w", err)
	}
	c0 := cpuNow()
	t0 := time.Now()
	err = fn()
	el = time.Since(t0)
	c1 := cpuNow()
	pprof.StopCPUProfile()
	if err != nil {
		return 0, 0, 0, err
	}
	lab, all, err := profileLabelCPU(prof.Bytes(), pipeDevLabel[0], pipeDevLabel[1])
	if err != nil {
		return 0, 0, 0, err
	}
	// A copy too short for one sample (tests' small files; never 1 GiB)
	// counts all of its CPU as the host's: an upper bound.
	if all > 0 {
		devNs = int64(float64(c1-c0) * float64(lab) / float64(all))
	}
	return el, c1 - c0 - devNs, devNs, nil
}

// resident is the process's resident memory: total counts every page it
// maps in memory (VmRSS plus its hugetlb pages, which VmRSS leaves out);
// private leaves out the file pages it shares with the page cache — the
// executable's and the shared libraries' text, which any program of the
// same size pays and another process mapping them shares.
type resident struct{ total, private int64 }

// readResident reads /proc/self/status: total = VmRSS + HugetlbPages,
// private = RssAnon + RssShmem + HugetlbPages (VmRSS = RssAnon + RssFile
// + RssShmem).
func readResident() (resident, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return resident{}, err
	}
	var r resident
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		var tot, priv bool
		switch k {
		case "VmRSS":
			tot = true
		case "RssAnon", "RssShmem":
			priv = true
		case "HugetlbPages":
			tot, priv = true, true
		default:
			continue
		}
		f := strings.Fields(v)
		if len(f) < 1 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return resident{}, fmt.Errorf("/proc/self/status %s: %w", k, err)
		}
		if tot {
			r.total += kb << 10
		}
		if priv {
			r.private += kb << 10
		}
	}
	return r, nil
}

// fioPipeArgs is fio's command line for the file, and what it says of fio's
// buffers. fio's default buffers are malloc'd 4 KiB pages: a 1 MiB O_DIRECT
// read into them is 256 segments, above a virtio-blk disk's max_segments
// (254), so the block layer splits every read in two and fio measures less
// than the disk gives. With hugetlb pages (--iomem=mmaphuge, what the
// engine's pool uses too) each read is one request; fio gets them when the
// kernel has enough free 2 MiB pages, and the note says which it got.
func fioPipeArgs(path string, size int64) (args []string, note string) {
	args = []string{"--name=hcomm-pipeline", "--filename=" + path, "--rw=read", "--direct=1", "--ioengine=io_uring",
		"--bs=" + strconv.Itoa(pipeChunk), "--iodepth=" + strconv.Itoa(pipeDepth), "--size=" + strconv.FormatInt(size, 10),
		"--output-format=json"}
	need := (pipeChunk*pipeDepth)>>21 + 2 // fio's buffers, rounded up, and its alignment slack
	if c, err := hugepage.ReadHugeCounts(2 << 20); err == nil && c.Available() >= need {
		return append(args, "--iomem=mmaphuge"), "fio " + strings.Join(args[2:len(args)-1], " ") + " --iomem=mmaphuge on the same file (buffers in 2 MiB hugetlb pages, as the engine's pool)"
	}
	return args, fmt.Sprintf("fio %s on the same file, its buffers in 4 KiB pages (fewer than %d free 2 MiB hugetlb pages): a 1 MiB read may be split by the block layer, fio's ceiling is then low", strings.Join(args[2:len(args)-1], " "), need)
}

// fioPipe runs fio's sequential read of the file (args from fioPipeArgs): GiB/s and fio's own CPU
// seconds per GiB (usr_cpu + sys_cpu of its job).
func fioPipe(fio string, args []string, size int64) (gibps, cpuPerGiB float64, err error) {
	out, err := exec.Command(fio, args...).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("fio %s: %w", strings.Join(args, " "), err)
	}
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var j struct {
		Jobs []struct {
			Read struct {
				Bytes   int64   `json:"io_bytes"`
				BW      float64 `json:"bw_bytes"`
				Runtime float64 `json:"runtime"` // ms
			} `json:"read"`
			Usr     float64 `json:"usr_cpu"`
			Sys     float64 `json:"sys_cpu"`
			Runtime float64 `json:"job_runtime"` // ms
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &j); err != nil || len(j.Jobs) == 0 {
		return 0, 0, fmt.Errorf("parse fio output: %v", err)
	}
	r := j.Jobs[0]
	if r.Read.BW <= 0 || r.Read.Bytes < size {
		return 0, 0, fmt.Errorf("fio read %d of %d bytes (bw %g)", r.Read.Bytes, size, r.Read.BW)
	}
	gib := float64(r.Read.Bytes) / (1 << 30)
	return r.Read.BW / (1 << 30), (r.Usr + r.Sys) / 100 * r.Runtime / 1e3 / gib, nil
}

// runPipeline measures the scenario: lays the file out, runs the three
// variants interleaved o.reps times, counts copies in traced children
// when it can, and returns the entries and what it skipped.
func runPipeline(o *options, out io.Writer, tables bool) ([]entry, []string, bool) {
	var skipped []string
	fail := func(err error) ([]entry, []string, bool) {
		return nil, append(skipped, "pipeline FAILED: "+err.Error()), true
	}
	dir, fs, err := benchDir(o)
	if err != nil {
		return nil, []string{"pipeline: " + err.Error()}, false
	}
	tmp, err := os.MkdirTemp(dir, "hcomm-bench-pipeline-*")
	if err != nil {
		return fail(err)
	}
	undo := atExit(func() { os.RemoveAll(tmp) })
	defer undo()
	size := pipelineSize(o)
	path := filepath.Join(tmp, pipeDataFile)
	o.logf("pipeline: laying out %d MiB in %s (%s)", size>>20, tmp, fs)
	if err := layOutPipeFile(path, size); err != nil {
		return fail(err)
	}
	fio, ferr := exec.LookPath("fio")
	if ferr != nil {
		skipped = append(skipped, "pipeline/file_to_device/fio: fio not installed (make bench installs it: apt-get install fio)")
	}
	fioArgs, fioNote := fioPipeArgs(path, size)
	if ferr == nil {
		o.logf("pipeline: %s", fioNote)
	}
	var s [2][]pipeSample
	var stage []pipeSample // the device stage alone
	var beside []besideSample
	var fioBW, fioCPU, fioSteal []float64
	descs := map[string]string{}
	var failed error
	for rep := 0; rep < o.reps && failed == nil; rep++ {
		// The engine and fio take turns going first: a disk whose speed
		// drifts, or that recovers after a slow reader, favours neither.
		// (Index 3: the device stage alone, beside the engine's copy.)
		// (Index 4: fio beside the device stage.)
		order := []int{0, 3, 1, 2, 4}
		if rep%2 == 1 {
			order = []int{4, 2, 1, 3, 0}
		}
		for _, i := range order {
			if i == 4 {
				if ferr != nil {
					continue
				}
				b, err := fioBesideDevice(path, size, fio, fioArgs)
				if err != nil {
					failed = fmt.Errorf("%s: %w", pipeFioBeside, err)
					break
				}
				beside = append(beside, b)
				o.logf("pipeline: %s, repetition %d: fio %.3f GiB/s, the device stage meanwhile %.3f GiB/s", pipeFioBeside, rep+1, b.fio, b.device)
				continue
			}
			if i == 2 {
				v := pipeVariants[2]
				if ferr != nil {
					continue
				}
				ld := readMachineLoad()
				bw, cpu, err := fioPipe(fio, fioArgs, size)
				if err != nil {
					failed = fmt.Errorf("%s: %w", v, err)
					break
				}
				others, steal := ld.cpus()
				fioBW, fioCPU, fioSteal = append(fioBW, bw), append(fioCPU, cpu), append(fioSteal, steal)
				o.logf("pipeline: %s, repetition %d: %.3f GiB/s (other processes %.2f CPUs, steal %.2f CPUs)", v, rep+1, bw, others, steal)
				continue
			}
			v := pipeDeviceStage
			if i < 2 {
				v = pipeVariants[i]
			}
			o.logf("pipeline: %s, repetition %d", v, rep+1)
			x, desc, err := pipeOnce(path, size, v)
			if err != nil {
				failed = fmt.Errorf("%s: %w", v, err)
				break
			}
			descs[v] = desc
			if i < 2 {
				s[i] = append(s[i], x)
			} else {
				stage = append(stage, x)
			}
			o.logf("pipeline: %s, repetition %d: %.3f GiB/s, host %.3f CPU-s/GiB, device model %.3f CPU-s/GiB (other processes %.2f CPUs, steal %.2f CPUs)", v, rep+1, x.gibps, x.hostCPU, x.devCPU, x.others, x.steal)
		}
	}
	if failed != nil {
		skipped = append(skipped, "pipeline FAILED: "+failed.Error())
	}
	// CPU copies per byte, eBPF, in traced children over the same file.
	var copies [2]*float64
	var copyNote [2]string
	if ok, why := privileged(o); !ok {
		copyNote = [2]string{why, why}
	} else {
		co := *o
		co.dir = tmp
		n := int(min(size/pipeChunk, 512))
		for i, v := range pipeVariants[:2] {
			w, _ := lookup("pipeline", v)
			c, err := countInChild(&co, w, n)
			if err != nil {
				copyNote[i] = "count failed: " + err.Error()
				skipped = append(skipped, fmt.Sprintf("pipeline/%s copy count: %v", v, err))
				continue
			}
			copies[i] = ptr(c.Copies)
			copyNote[i] = fmt.Sprintf("eBPF over %d chunks: %.4g bytes copied by the CPU and %.4g moved by DMA per chunk; %.3g host syscalls per chunk", n, c.CopyBytes, c.Direct, c.Host)
		}
	}
	es := pipeEntries(s, fioBW, fioCPU, fioSteal, fioNote, copies, copyNote)
	es = append(es, pipeStageEntries(s[0], stage, fioBW)...)
	es = append(es, pipeBesideEntries(s[0], beside, fioBW)...)
	if tables {
		printPipeline(out, size, fs, s, fioBW, fioCPU, fioNote, copies, descs)
		printPipeStage(out, stage, fioBW, descs[pipeDeviceStage])
		printPipeBeside(out, beside, fioBW)
	}
	// Device memory → a peer process's pool, one engine against two.
	rs, rdescs, rerr := runPipeRemote(o)
	note := ""
	if rerr != nil {
		note = "FAILED: " + rerr.Error()
		skipped = append(skipped, "pipeline/device_to_remote FAILED: "+rerr.Error())
	}
	es = append(es, pipeRemoteEntries(rs, note)...)
	if tables {
		printPipeRemote(out, pipeRemoteSize(o), rs, rdescs, rerr)
	}
	return es, skipped, failed != nil || rerr != nil
}

func pipeField(xs []pipeSample, f func(pipeSample) float64) []float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	return v
}

// pairEntry is one metric of the engine against a baseline, paired by
// repetition.
func pairEntry(variant, base, metric, unit, better string, eng, bas []float64, note string) entry {
	x := entry{Name: "pipeline", Variant: variant, BaselineVariant: base, Metric: metric, Unit: unit, Better: better, Runs: len(eng), Note: note}
	es, bs := newStat(eng), newStat(bas)
	if len(eng) > 0 {
		x.Engine, x.EngineMin, x.EngineMax, x.EngineRuns = ptr(es.Median), ptr(es.Min), ptr(es.Max), es.Runs
	} else {
		x.Note = strings.TrimPrefix(x.Note+"; not measured", "; ")
	}
	if len(bas) > 0 {
		x.Baseline, x.BaselineMin, x.BaselineMax, x.BaselineRuns = ptr(bs.Median), ptr(bs.Min), ptr(bs.Max), bs.Runs
		if len(eng) > 0 && bs.Median != 0 {
			x.Ratio = ptr(es.Median / bs.Median)
		}
	}
	return x
}

func pipeEntries(s [2][]pipeSample, fioBW, fioCPU, fioSteal []float64, fioNote string, copies [2]*float64, copyNote [2]string) []entry {
	eng, trad, fio := pipeVariants[0], pipeVariants[1], pipeVariants[2]
	bw := func(x pipeSample) float64 { return x.gibps }
	host := func(x pipeSample) float64 { return x.hostCPU }
	dev := func(x pipeSample) float64 { return x.devCPU }
	rss := func(x pipeSample) float64 { return x.rssBeyond }
	priv := func(x pipeSample) float64 { return x.privBeyond }
	cpuNote := "CPU-seconds per GiB of the process (getrusage) minus the device model's worker goroutine (pprof label, its share of the samples of a CPU profile over the same window)"
	es := []entry{
		pairEntry(eng, fio, "bandwidth", "GiB/s", "higher", pipeField(s[0], bw), fioBW, fioNote),
		pairEntry(trad, fio, "bandwidth", "GiB/s", "higher", pipeField(s[1], bw), fioBW, ""),
		pairEntry(eng, trad, "bandwidth", "GiB/s", "higher", pipeField(s[0], bw), pipeField(s[1], bw), ""),
		pairEntry(eng, trad, "host_cpu_per_gib", "CPU-s/GiB", "lower", pipeField(s[0], host), pipeField(s[1], host), cpuNote),
		pairEntry(eng, fio, "host_cpu_per_gib", "CPU-s/GiB", "lower", pipeField(s[0], host), fioCPU, "fio: its job's usr_cpu + sys_cpu (it moves nothing to a device)"),
		pairEntry(eng, trad, "device_model_cpu_per_gib", "CPU-s/GiB", "lower", pipeField(s[0], dev), pipeField(s[1], dev), "the device model's worker (excluded from host_cpu_per_gib): what a real device's DMA engine does"),
		pairEntry(eng, trad, "rss_beyond_device", "MiB", "lower", pipeField(s[0], rss), pipeField(s[1], rss), "peak VmRSS + HugetlbPages during the copy minus the device memory (touched before); includes the executable's and libraries' shared file pages (RssFile)"),
		pairEntry(eng, trad, "private_beyond_device", "MiB", "lower", pipeField(s[0], priv), pipeField(s[1], priv), "peak RssAnon + RssShmem + HugetlbPages during the copy minus the device memory: what the process holds of its own, the shared file pages (RssFile) left out"),
		pairEntry(eng, fio, "steal", "CPUs", "lower", pipeField(s[0], func(x pipeSample) float64 { return x.steal }), fioSteal, "CPUs the hypervisor took from this machine while each side ran (/proc/stat steal over the copy): the engine's copy needs CPU on time (the device model's worker, the reaper, the completions), fio's read hardly any"),
		pairEntry(eng, "", "pool_peak", "MiB", "lower", pipeField(s[0], func(x pipeSample) float64 { return x.poolPeakMB }), nil, "the pool's highest use (hugepage.PoolStats.Peak) over the copy"),
	}
	c := entry{Name: "pipeline", Variant: eng, BaselineVariant: trad, Metric: "cpu_copies", Unit: "/byte", Better: "lower", Runs: 1,
		Engine: copies[0], Baseline: copies[1], Note: "engine: " + copyNote[0] + "; traditional: " + copyNote[1]}
	if copies[0] == nil {
		c.Runs = 0
	}
	return append(es, c)
}

// pipeStageEntries: the device stage alone (its bandwidth beside fio's),
// and the Copy against the slower of its two stages, repetition by
// repetition (the lesser of fio's read and the device stage alone in the
// same repetition).
func pipeStageEntries(eng, stage []pipeSample, fioBW []float64) []entry {
	bw := func(x pipeSample) float64 { return x.gibps }
	sbw := pipeField(stage, bw)
	slower := make([]float64, 0, len(sbw))
	for i := range min(len(sbw), len(fioBW)) {
		slower = append(slower, min(sbw[i], fioBW[i]))
	}
	return []entry{
		pairEntry(pipeDeviceStage, pipeVariants[2], "bandwidth", "GiB/s", "higher", sbw, fioBW,
			"the device stage alone (the same engine writing pool blocks into the device model, 1 MiB × 8) against fio's read of the file: above 1, the disk is the slower stage"),
		pairEntry(pipeDeviceStage, "", "device_model_cpu_per_gib", "CPU-s/GiB", "lower", pipeField(stage, func(x pipeSample) float64 { return x.devCPU }), nil,
			"the device model's worker while the device stage ran alone"),
		pairEntry(pipeVariants[0], pipeSlowerStage, "bandwidth", "GiB/s", "higher", pipeField(eng, bw), slower,
			"baseline: per repetition, the lesser of fio's sequential read of the file and the device stage alone — the most a pipeline of the two can move"),
	}
}

// besideSample is one repetition of fio's read with the device stage
// running beside it: fio's bandwidth, and the device stage's over the same
// window (GiB/s).
type besideSample struct{ fio, device float64 }

// fioBesideDevice runs fio's read of the file (args from fioPipeArgs) while
// the device stage (the engine of the device-stage row, set up the same
// way) writes its pool blocks into device memory round after round,
// pipeBesideStep bytes a round, from before fio starts until it ends: the
// two stages at once, uncoupled. The device stage's bandwidth is the
// rounds it finished while fio ran.
func fioBesideDevice(path string, size int64, fio string, args []string) (besideSample, error) {
	p, err := openPipe(pipeDeviceStage, path, size)
	if err != nil {
		return besideSample{}, err
	}
	defer p.close()
	step := min(int64(pipeBesideStep), size)
	var rounds atomic.Int64
	var stop atomic.Bool
	started, ended := make(chan struct{}), make(chan error, 1)
	go func() {
		var off int64
		for i := 0; !stop.Load(); i++ {
			if off+step > size {
				off = 0
			}
			if err := p.move(off, step); err != nil {
				ended <- err
				return
			}
			off += step
			rounds.Add(1)
			if i == 0 {
				close(started)
			}
		}
		ended <- nil
	}()
	select {
	case <-started:
	case err := <-ended:
		return besideSample{}, fmt.Errorf("the device stage before fio: %w", err)
	}
	r0, t0 := rounds.Load(), time.Now()
	bw, _, ferr := fioPipe(fio, args, size)
	r1, el := rounds.Load(), time.Since(t0)
	stop.Store(true)
	if err := <-ended; err != nil {
		return besideSample{}, fmt.Errorf("the device stage beside fio: %w", err)
	}
	if ferr != nil {
		return besideSample{}, ferr
	}
	return besideSample{fio: bw, device: float64((r1-r0)*step) / (1 << 30) / el.Seconds()}, nil
}

// pipeBesideEntries: fio's read with the device stage beside it, against
// fio's read alone in the same repetition, and the device stage's
// bandwidth meanwhile.
func pipeBesideEntries(eng []pipeSample, beside []besideSample, fioBW []float64) []entry {
	if len(beside) == 0 {
		return nil
	}
	fb, db := besideRuns(beside)
	return []entry{
		pairEntry(pipeFioBeside, pipeVariants[2], "bandwidth", "GiB/s", "higher", fb, fioBW,
			"fio's read of the file while the device stage runs beside it, uncoupled, against fio's read alone: below 1, the disk and the device model share something on this machine (memory bandwidth, the hypervisor's CPUs), and no pipeline of the two reaches fio's read alone"),
		pairEntry(pipeFioBeside+"/device", "", "bandwidth", "GiB/s", "higher", db, nil,
			"the device stage's bandwidth while fio read beside it"),
		pairEntry(pipeVariants[0], pipeFioBeside, "bandwidth", "GiB/s", "higher", pipeField(eng, func(x pipeSample) float64 { return x.gibps }), fb,
			"the Copy against fio's read with the device stage running beside it (uncoupled, at the device stage's full speed: more device traffic than a pipeline at the disk's pace makes)"),
	}
}

// besideRuns splits the repetitions into fio's bandwidths and the device
// stage's.
func besideRuns(beside []besideSample) (fio, device []float64) {
	fio, device = make([]float64, len(beside)), make([]float64, len(beside))
	for i, b := range beside {
		fio[i], device[i] = b.fio, b.device
	}
	return fio, device
}

// printPipeBeside prints fio's read beside the device stage.
func printPipeBeside(w io.Writer, beside []besideSample, fioBW []float64) {
	if len(beside) == 0 {
		return
	}
	fb, db := besideRuns(beside)
	ratio := make([]float64, 0, len(beside))
	for i, b := range beside {
		if i < len(fioBW) && fioBW[i] > 0 {
			ratio = append(ratio, b.fio/fioBW[i])
		}
	}
	f, d := newStat(fb), newStat(db)
	fmt.Fprintf(w, "   %-28s %.3f [%.3f–%.3f] GiB/s, the device stage meanwhile %.3f [%.3f–%.3f] GiB/s", pipeFioBeside, f.Median, f.Min, f.Max, d.Median, d.Min, d.Max)
	if len(ratio) > 0 {
		r := newStat(ratio)
		fmt.Fprintf(w, "; %.2f× [%.2f–%.2f] fio's read alone", r.Median, r.Min, r.Max)
	}
	fmt.Fprintf(w, "\n   %s: fio's read (the same command) while the device stage writes pool blocks into device memory beside it, %d MiB a round, uncoupled\n", pipeFioBeside, pipeBesideStep>>20)
}

// printPipeStage prints the device stage's row and the slower stage.
func printPipeStage(w io.Writer, stage []pipeSample, fioBW []float64, desc string) {
	if len(stage) == 0 {
		return
	}
	st := newStat(pipeField(stage, func(x pipeSample) float64 { return x.gibps }))
	dv := newStat(pipeField(stage, func(x pipeSample) float64 { return x.devCPU }))
	fmt.Fprintf(w, "   %-28s %.3f [%.3f–%.3f] GiB/s; device model %.3f [%.3f–%.3f] CPU-s/GiB\n", pipeDeviceStage, st.Median, st.Min, st.Max, dv.Median, dv.Min, dv.Max)
	slowerDisk := 0
	for i := range min(len(stage), len(fioBW)) {
		if fioBW[i] <= stage[i].gibps {
			slowerDisk++
		}
	}
	reps := min(len(stage), len(fioBW))
	fmt.Fprintf(w, "   the slower stage, per repetition: the disk (fio's read) in %d, the device stage in %d\n", slowerDisk, reps-slowerDisk)
	if desc != "" {
		fmt.Fprintf(w, "   %s\n", desc)
	}
}

func printPipeline(w io.Writer, size int64, fs string, s [2][]pipeSample, fioBW, fioCPU []float64, fioNote string, copies [2]*float64, descs map[string]string) {
	fmt.Fprintf(w, "\n== pipeline: %d MiB O_DIRECT file (%s) → device memory (vfio-mock HDMA), %d KiB chunks, depth %d; median [min–max] of %d repetitions, interleaved\n",
		size>>20, fs, pipeChunk>>10, pipeDepth, len(s[0]))
	rng := func(v []float64, f string) string {
		if len(v) == 0 {
			return "—"
		}
		st := newStat(v)
		return fmt.Sprintf(f+" ["+f+"–"+f+"]", st.Median, st.Min, st.Max)
	}
	cp := func(p *float64) string {
		if p == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.3g", *p)
	}
	fmt.Fprintf(w, "   %-28s %-24s %-24s %-24s %-18s %-18s %s\n", "variant", "GiB/s", "host CPU-s/GiB", "device model CPU-s/GiB", "RSS beyond dev MiB", "private beyond MiB", "CPU copies/byte")
	for i, v := range pipeVariants[:2] {
		fmt.Fprintf(w, "   %-28s %-24s %-24s %-24s %-18s %-18s %s\n", v, rng(pipeField(s[i], func(x pipeSample) float64 { return x.gibps }), "%.3f"),
			rng(pipeField(s[i], func(x pipeSample) float64 { return x.hostCPU }), "%.3f"),
			rng(pipeField(s[i], func(x pipeSample) float64 { return x.devCPU }), "%.3f"),
			rng(pipeField(s[i], func(x pipeSample) float64 { return x.rssBeyond }), "%.1f"),
			rng(pipeField(s[i], func(x pipeSample) float64 { return x.privBeyond }), "%.1f"), cp(copies[i]))
	}
	fmt.Fprintf(w, "   %-28s %-24s %-24s\n", pipeVariants[2], rng(fioBW, "%.3f"), rng(fioCPU, "%.3f")+" (fio's own)")
	fmt.Fprintf(w, "   %s\n", fioNote)
	if len(s[0]) > 0 {
		fmt.Fprintf(w, "   engine pool peak: %s MiB (chunk × depth = %d MiB)\n", rng(pipeField(s[0], func(x pipeSample) float64 { return x.poolPeakMB }), "%.0f"), pipeChunk*pipeDepth>>20)
	}
	for _, v := range pipeVariants[:2] {
		if d := descs[v]; d != "" {
			fmt.Fprintf(w, "   %s\n", d)
		}
	}
}

// profileLabelCPU sums the CPU values of a CPU profile's samples (gzipped
// profile.proto, as runtime/pprof writes it) that carry the label key=val,
// and of all its samples.
func profileLabelCPU(gz []byte, key, val string) (labelled, total int64, err error) {
	raw, err := gunzip(gz)
	if err != nil {
		return 0, 0, fmt.Errorf("pipeline: CPU profile: %w", err)
	}
	type sample struct {
		values []int64
		labels [][2]int64
	}
	var samples []sample
	var strs []string
	err = pbFields(raw, func(f int, wire int, v uint64, b []byte) error {
		switch {
		case f == 2 && wire == 2: // sample
			var s sample
			if err := pbFields(b, func(f, wire int, v uint64, b []byte) error {
				switch {
				case f == 2 && wire == 0:
					s.values = append(s.values, int64(v))
				case f == 2 && wire == 2:
					for len(b) > 0 {
						x, n := uvarint(b)
						if n <= 0 {
							return errors.New("bad packed value")
						}
						s.values = append(s.values, int64(x))
						b = b[n:]
					}
				case f == 3 && wire == 2:
					var l [2]int64
					if err := pbFields(b, func(f, wire int, v uint64, _ []byte) error {
						if wire == 0 && (f == 1 || f == 2) {
							l[f-1] = int64(v)
						}
						return nil
					}); err != nil {
						return err
					}
					s.labels = append(s.labels, l)
				}
				return nil
			}); err != nil {
				return err
			}
			samples = append(samples, s)
		case f == 6 && wire == 2:
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("pipeline: CPU profile: %w", err)
	}
	// A Go CPU profile's sample types are [samples/count, cpu/nanoseconds]:
	// the last value is the CPU time.
	for _, s := range samples {
		if len(s.values) == 0 {
			continue
		}
		v := s.values[len(s.values)-1]
		total += v
		for _, l := range s.labels {
			if l[0] >= 0 && l[1] >= 0 && int(l[0]) < len(strs) && int(l[1]) < len(strs) && strs[l[0]] == key && strs[l[1]] == val {
				labelled += v
				break
			}
		}
	}
	return labelled, total, nil
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func uvarint(b []byte) (uint64, int) { return binary.Uvarint(b) }

// pbFields calls fn for every field of the protobuf message b: its number,
// wire type, and its value (varint, fixed) or bytes (length-delimited).
func pbFields(b []byte, fn func(field, wire int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		tag, n := uvarint(b)
		if n <= 0 {
			return errors.New("bad field tag")
		}
		b = b[n:]
		field, wire := int(tag>>3), int(tag&7)
		var v uint64
		var data []byte
		switch wire {
		case 0:
			if v, n = uvarint(b); n <= 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return errors.New("short fixed64")
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case 2:
			l, n := uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errors.New("bad length")
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return errors.New("short fixed32")
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		default:
			return fmt.Errorf("wire type %d", wire)
		}
		if err := fn(field, wire, v, data); err != nil {
			return err
		}
	}
	return nil
}

// pipelineGoals: the engine's Copy against fio's read of the same file
// (bandwidth) and against the traditional way (host CPU), its CPU copies
// (eBPF) and its memory; device → peer, one engine's Copy against two
// engines chained by hand (bandwidth, host CPU).
// amendCPUPerGiB puts both sides' CPU-seconds per GiB in a goal's detail.
func amendCPUPerGiB(g *goal, s goalSpec, es entries) {
	if e := es.find(s.Ref); e != nil && e.Engine != nil && e.Baseline != nil {
		g.Detail = fmt.Sprintf("%.3g vs %.3g CPU-s/GiB", *e.Engine, *e.Baseline)
	}
}

func pipelineGoals() []goalSpec {
	eng, trad, fio := pipeVariants[0], pipeVariants[1], pipeVariants[2]
	one, two := pipeRemoteVariants[0], pipeRemoteVariants[1]
	budget := float64(pipeChunk * pipeDepth >> 20)
	return []goalSpec{
		{ID: "pipeline.file_to_device.bw_vs_fio", Group: "pipeline", Scenario: "pipeline",
			What: "file → device, one Copy (1 MiB × 8): bandwidth ÷ fio's sequential read (bs 1M, iodepth 8)", Unit: "×", Limit: limit{"≥", 0.9},
			Ref: ref{"pipeline", eng, fio, "bandwidth"},
			// The engine's copy slows when the hypervisor takes CPU from
			// the machine, fio's read hardly: the detail says how much
			// each side had taken.
			Amend: func(g *goal, _ goalSpec, es entries) {
				if e := es.find(ref{"pipeline", eng, fio, "steal"}); e != nil && e.Engine != nil && e.Baseline != nil {
					g.Detail = fmt.Sprintf("CPU stolen by the hypervisor: %.2f [%.2f–%.2f] CPUs during the engine's copies, %.2f [%.2f–%.2f] during fio's", *e.Engine, *e.EngineMin, *e.EngineMax, *e.Baseline, *e.BaselineMin, *e.BaselineMax)
				}
				// A pipeline cannot outrun its slower stage: when the
				// device model is slower than the disk, say so.
				if e := es.find(ref{"pipeline", pipeDeviceStage, fio, "bandwidth"}); e != nil && e.Ratio != nil && *e.Ratio < 1 {
					g.Detail = strings.TrimPrefix(g.Detail+fmt.Sprintf("; the device stage alone is the slower stage (%.3g× fio's read): see pipeline.file_to_device.bw_vs_slower_stage", *e.Ratio), "; ")
				}
				// Nor can it outrun the disk as it reads while the
				// device works: fio beside the device stage.
				if e := es.find(ref{"pipeline", pipeFioBeside, fio, "bandwidth"}); e != nil && e.Ratio != nil {
					if lo, hi := ratioRange(e); lo != nil {
						g.Detail = strings.TrimPrefix(g.Detail+fmt.Sprintf("; fio's read with the device stage running beside it: %.3g× [%.3g–%.3g] its read alone", *e.Ratio, *lo, *hi), "; ")
					}
				}
			}},
		{ID: "pipeline.file_to_device.bw_vs_slower_stage", Group: "pipeline", Scenario: "pipeline",
			What: "file → device, one Copy (1 MiB × 8): bandwidth ÷ the slower of its stages alone (fio's read of the file; the device stage: the same engine writing pool blocks into the device model), per repetition", Unit: "×", Limit: limit{"≥", 0.9},
			Ref: ref{"pipeline", eng, pipeSlowerStage, "bandwidth"},
			Amend: func(g *goal, _ goalSpec, es entries) {
				if e := es.find(ref{"pipeline", pipeDeviceStage, fio, "bandwidth"}); e != nil && e.Engine != nil && e.Baseline != nil {
					g.Detail = fmt.Sprintf("the device stage alone %.3g [%.3g–%.3g] GiB/s, fio's read %.3g [%.3g–%.3g] GiB/s", *e.Engine, *e.EngineMin, *e.EngineMax, *e.Baseline, *e.BaselineMin, *e.BaselineMax)
				}
			}},
		{ID: "pipeline.file_to_device.cpu_per_gib_vs_traditional", Group: "pipeline", Scenario: "pipeline",
			What: "file → device: host CPU-seconds per GiB (device model's worker excluded) ÷ ReadAt + baseline device write", Unit: "×", Limit: limit{"≤", 0.3},
			Ref:   ref{"pipeline", eng, trad, "host_cpu_per_gib"},
			Amend: amendCPUPerGiB},
		{ID: "pipeline.file_to_device.cpu_copies_per_byte", Group: "pipeline", Scenario: "pipeline",
			What: "file → device: bytes the CPU copies per byte moved (eBPF)", Unit: "/byte", Limit: limit{"<", 1e-4},
			Ref:    ref{"pipeline", eng, trad, "cpu_copies"},
			Detail: "no data copy: what is left is the interrupts' 8-byte eventfd counters, about 2 bytes per MiB"},
		{ID: "pipeline.file_to_device.pool_bytes", Group: "pipeline", Scenario: "pipeline",
			What: "file → device: the pool's peak use", Unit: "MiB", Limit: limit{"≤", budget},
			Ref: ref{"pipeline", eng, "", "pool_peak"}, Detail: "chunk × depth"},
		{ID: "pipeline.device_to_remote.bw_vs_two_engines", Group: "pipeline", Scenario: "pipeline",
			What: "device → peer (UCX shared memory), one Copy per 64 MiB (1 MiB × 8): bandwidth ÷ two engines chained by hand (same chunks, depth)", Unit: "×", Limit: limit{"≥", 0.9},
			Ref: ref{"pipeline", one, two, "bandwidth"}},
		{ID: "pipeline.device_to_remote.cpu_per_gib_vs_two_engines", Group: "pipeline", Scenario: "pipeline",
			What: "device → peer: host CPU-seconds per GiB (device model's worker excluded) ÷ two engines chained by hand", Unit: "×", Limit: limit{"≤", 1.1},
			Ref:   ref{"pipeline", one, two, "host_cpu_per_gib"},
			Amend: amendCPUPerGiB},
		{ID: "pipeline.file_to_device.private_beyond_device", Group: "pipeline", Scenario: "pipeline",
			What: "file → device: peak private resident memory (anonymous, shmem, hugetlb) beyond the device model's memory", Unit: "MiB", Limit: limit{"≤", budget + 16},
			Ref: ref{"pipeline", eng, trad, "private_beyond_device"},
			Amend: func(g *goal, s goalSpec, es entries) {
				g.Detail = "chunk × depth + 16 MiB; the executable's shared file pages (RssFile) left out"
				if e := es.find(ref{"pipeline", eng, trad, "rss_beyond_device"}); e != nil && e.Engine != nil {
					g.Detail += fmt.Sprintf("; with them, total RSS beyond device %.1f MiB", *e.Engine)
				}
			}},
	}
}

// machineLoad is a snapshot of what the whole machine's CPUs did
// (/proc/stat) and of this process's and its waited-for children's CPU:
// the difference of two tells how busy the other processes kept the CPUs
// while a variant ran, and how much time the hypervisor stole.
type machineLoad struct {
	t              time.Time
	busy, steal    float64 // seconds, all CPUs
	self, children float64 // seconds
}

func readMachineLoad() machineLoad {
	l := machineLoad{t: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			n, _ := strconv.ParseFloat(v, 64)
			switch i {
			case 0, 1, 2, 5, 6: // user nice system irq softirq
				l.busy += n / 100
			case 7:
				l.steal += n / 100
			}
		}
	}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		l.self = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	if unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) == nil {
		l.children = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	return l
}

// cpus says, over the time since l, how many CPUs the other processes
// kept busy and how many the hypervisor stole.
func (l machineLoad) cpus() (others, steal float64) {
	n := readMachineLoad()
	s := n.t.Sub(l.t).Seconds()
	if s <= 0 {
		return 0, 0
	}
	o := (n.busy - l.busy) - (n.self - l.self) - (n.children - l.children)
	return max(o, 0) / s, max(n.steal-l.steal, 0) / s
}
