// The runtime re-reads its cgroup's CPU limit about once a second (a few
// preads of a few bytes, for GOMAXPROCS): in the traced child those would
// be CPU copies that are not the pipeline's.
//
//go:debug updatemaxprocs=0
package pathtrace_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/bpf"
	"github.com/hcomm-go/hcomm/cmd/internal/selftrace"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/trace"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// traceChildEnv makes the test binary the traced child of
// TestCopyPipelineTraced: with it set, TestMain runs one way of moving the
// bytes (its value names the way) instead of the tests.
const traceChildEnv = "HCOMM_PATHTRACE_CHILD"

func TestMain(m *testing.M) {
	if way := os.Getenv(traceChildEnv); way != "" {
		os.Exit(childMain(way))
	}
	os.Exit(m.Run())
}

// The traced pipeline: tracedSize bytes from a file into vfio-mock device
// memory and back out to another file, tracedChunk bytes a step.
const (
	tracedSize  = 256 << 20
	tracedChunk = 1 << 20
	tracedDepth = 4
)

// tracedReport is the child's last line: what happened in the window
// besides what eBPF saw.
type tracedReport struct {
	Bytes int64  `json:"bytes"` // bytes moved file → device, and again device → file
	MSIs  uint64 `json:"msis"`  // eventfd writes by the device model in the window
	// Paths is the bytes the engine sent down each path in the window
	// (its own count: the hook uprobes need a symbol table, and go test
	// strips its binaries).
	Paths [backend.NumPaths]uint64 `json:"paths"`
	Err   string                   `json:"err,omitempty"`
}

// TestCopyPipelineTraced: eBPF (cmd/internal/selftrace) counts what a child
// process does while it moves 256 MiB file → vfio-mock device → file.
// Through Engine.Copy with O_DIRECT files no byte of the data is copied by
// a CPU between user and kernel memory: the files' bytes move by DMA
// (io_uring requests on O_DIRECT files of a disk file system, which the
// tracer classes as direct, not as copies), the device's by its DMA
// engine. What the tracer does count as copied is 8-byte eventfd
// counters only: the device model's MSIs (an interrupt message on
// hardware) and the engine's reads of its readiness eventfds.
//
// The traditional way — pread into a heap buffer, the device write from
// it, and back with a pwrite, on the same files opened without O_DIRECT —
// is counted the same way, and the same arithmetic finds every byte
// copied once kernel→user and once user→kernel: the check can fail.
func TestCopyPipelineTraced(t *testing.T) {
	testutil.RequirePrivileged(t, "eBPF tracing of a child process")
	if err := trace.CheckPrivileges(); err != nil {
		testutil.RequireFeature(t, "eBPF tracing", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(os.TempDir(), &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		t.Skipf("the temporary directory %s is on tmpfs, whose O_DIRECT still copies (and the tracer says so): set TMPDIR to a disk file system", os.TempDir())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		way string
		// check judges the window: data is the bytes a CPU copied between
		// user and kernel memory beyond eventfd counters (see cpuCopies).
		check func(t *testing.T, d *trace.Snapshot, data int64, rep tracedReport)
	}{
		{"engine", func(t *testing.T, d *trace.Snapshot, data int64, rep tracedReport) {
			if data != 0 {
				t.Errorf("the pipeline's data: %d bytes copied by a CPU between user and kernel, want 0", data)
			}
			if got := d.DirectBytes(); got != 2*tracedSize {
				t.Errorf("direct (DMA) bytes: %d, want %d (both files' bytes, O_DIRECT through io_uring)", got, 2*tracedSize)
			}
			if cpu := rep.Paths[engine.PathCPU] + rep.Paths[engine.PathMemory]; cpu != 0 {
				t.Errorf("the engine copied %d bytes on its CPU paths, want 0", cpu)
			}
			if dma, file := rep.Paths[engine.PathDMA], rep.Paths[engine.PathFile]; dma != 2*tracedSize || file != 2*tracedSize {
				t.Errorf("the engine's DMA path moved %d bytes and its file path %d, want %d each", dma, file, 2*tracedSize)
			}
		}},
		{"traditional", func(t *testing.T, d *trace.Snapshot, data int64, rep tracedReport) {
			// What the check above must catch: the file's bytes copied
			// once out of the page cache and once back into it.
			if k2u, u2k := d.KernelToUserBytes(), d.UserToKernelBytes(); k2u < tracedSize || u2k < tracedSize {
				t.Errorf("the tracer saw %d bytes kernel→user and %d user→kernel, want at least %d each", k2u, u2k, tracedSize)
			}
			// Every byte, less 8 for each of the 512 preads and pwrites
			// (cpuCopies cannot tell a call's first 8 bytes from a counter).
			if want := int64(2*tracedSize - 8*2*tracedSize/tracedChunk); data < want {
				t.Errorf("data copied by a CPU: %d bytes, want at least %d", data, want)
			}
		}},
	} {
		t.Run(c.way, func(t *testing.T) {
			t.Setenv(traceChildEnv, c.way)
			d, line, err := selftrace.Run([]string{exe}, trace.Options{Logger: quiet()}, 5*time.Minute)
			var rep tracedReport
			if line != nil {
				if jerr := json.Unmarshal(line, &rep); jerr != nil {
					t.Fatalf("child's report %q: %v (run: %v)", line, jerr, err)
				}
			}
			if rep.Err != "" {
				t.Fatalf("child: %s", rep.Err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.ProgramMisses != 0 || d.Misc != (bpf.MiscStat{}) {
				t.Fatalf("the tracer missed events (%d program misses, %+v): its counts may be low", d.ProgramMisses, d.Misc)
			}
			data, signals, signalOps := cpuCopies(d)
			t.Logf("%s: %d MiB file → device → file; the tracer saw: CPU copies user→kernel %d B, kernel→user %d B, of which %d B in %d eventfd counters (the device model wrote %d MSIs); data copied by a CPU %d B; direct (DMA) %d B; engine paths %v B (DMA, CPU, file, memory, ...); syscalls %v",
				c.way, rep.Bytes>>20, d.UserToKernelBytes(), d.KernelToUserBytes(), signals, signalOps, rep.MSIs, data, d.DirectBytes(),
				rep.Paths, d.SyscallCounts())
			if k2k := d.KernelCopyBytes(); k2k != 0 {
				t.Errorf("%d bytes moved in the kernel (copy_file_range, sendfile, splice): none were asked for", k2k)
			}
			c.check(t, d, data, rep)
		})
	}
}

// The handshake's own copies in selftrace's window: the child's wake-up
// read of one byte at Begin and its "end\n" write at End (Run subtracts
// their calls, not their bytes).
const (
	handshakeRead  int64 = 1
	handshakeWrite int64 = int64(len("end\n"))
)

// cpuCopies splits what the tracer counted as copied by a CPU between user
// and kernel memory, by system calls and io_uring requests, into eventfd
// counters — 8 bytes a call, the device model's MSIs and the engine's
// reads of its readiness eventfds — and data: data is the copied bytes
// minus 8 per copying call or request, after the handshake's two calls
// are taken out, so that any call that moved other than 8 bytes (a data
// read or write) shows in it.
func cpuCopies(d *trace.Snapshot) (data int64, signals, signalOps uint64) {
	for _, src := range trace.Sources {
		for _, dir := range []trace.Direction{trace.UserToKernel, trace.KernelToUser} {
			s := d.Copy[bpf.CopyIndex(int(src), int(dir), int(trace.ClassCopy))]
			ops, bytes := int64(s.Ops), int64(s.Bytes)
			if src == trace.SourceSyscall {
				if dir == trace.KernelToUser {
					ops, bytes = ops-1, bytes-handshakeRead
				} else {
					ops, bytes = ops-1, bytes-handshakeWrite
				}
			}
			data += bytes - 8*ops
			signals += uint64(8 * ops)
			signalOps += uint64(ops)
		}
	}
	return data, signals, signalOps
}

// childMain is the traced child: set up, Begin, move the bytes, End,
// verify, report (one JSON line; nothing else may reach stdout).
func childMain(way string) int {
	rep, err := tracedChild(way)
	if err != nil {
		rep.Err = err.Error()
	}
	if err := selftrace.Report(rep); err != nil || rep.Err != "" {
		return 1
	}
	return 0
}

func tracedChild(way string) (rep tracedReport, err error) {
	rep.Bytes = tracedSize
	dir, err := os.MkdirTemp("", "pathtrace")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	inPath, outPath := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	for _, p := range []string{inPath, outPath} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return rep, err
		}
		if err := os.Truncate(p, tracedSize); err != nil {
			return rep, err
		}
	}
	if err := writePattern(inPath, tracedSize); err != nil {
		return rep, err
	}
	dev, err := mock.New(mock.Config{Seed: 3, DevMemSize: tracedSize, Logger: quiet()})
	if err != nil {
		return rep, err
	}
	defer dev.Close()
	// Files: O_DIRECT for the engine's path, through the page cache for the
	// traditional one.
	flags := 0
	if way == "engine" {
		flags = unix.O_DIRECT
	}
	in, err := os.OpenFile(inPath, os.O_RDONLY|flags, 0)
	if err != nil {
		return rep, err
	}
	defer in.Close()
	out, err := os.OpenFile(outPath, os.O_RDWR|flags, 0)
	if err != nil {
		return rep, err
	}
	defer out.Close()
	devBE, err := hdmadev.New(dev, hdmadev.Config{CPUThreshold: -1})
	if err != nil {
		return rep, err
	}
	cfg := engine.Config{Backend: devBE, Alignment: 4096, PoolSize: 16 << 20, QueueDepth: 64,
		Backings: []hugepage.Backing{hugepage.Backing4K}, Logger: quiet()}
	if way == "engine" {
		for _, f := range []*os.File{in, out} {
			fb, err := uringfile.New(f, uringfile.Config{})
			if err != nil {
				devBE.Close()
				return rep, err
			}
			cfg.Backends = append(cfg.Backends, fb)
		}
	}
	e, err := engine.Open(cfg)
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := e.Close(); err == nil {
			err = cerr
		}
	}()
	var run func() error
	switch way {
	case "engine":
		ts := e.Targets()
		copyAll := func(n int64) error {
			for _, s := range [][2]engine.Loc{{ts[1].FileAt(0), ts[0].DeviceAt(0)}, {ts[0].DeviceAt(0), ts[2].FileAt(0)}} {
				c, err := e.Copy(context.Background(), engine.CopySpec{Src: s[0], Dst: s[1], Len: n, Chunk: tracedChunk, Depth: tracedDepth})
				if err != nil {
					return err
				}
				if err := c.Wait(context.Background()); err != nil {
					return err
				}
			}
			return nil
		}
		if err := copyAll(8 << 20); err != nil { // warm up
			return rep, err
		}
		run = func() error { return copyAll(tracedSize) }
	case "traditional":
		blk, err := e.Alloc(tracedChunk)
		if err != nil {
			return rep, err
		}
		heap := make([]byte, tracedChunk)
		xfer := func(tr engine.Transfer) error {
			id, err := e.Submit(tr)
			if err != nil {
				return err
			}
			return e.Wait(context.Background(), id)
		}
		run = func() error {
			for off := int64(0); off < tracedSize; off += tracedChunk {
				if _, err := in.ReadAt(heap, off); err != nil {
					return err
				}
				copy(blk.Bytes(), heap)
				if err := xfer(engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(uint64(off)), Len: tracedChunk}); err != nil {
					return err
				}
			}
			for off := int64(0); off < tracedSize; off += tracedChunk {
				if err := xfer(engine.Transfer{Src: engine.DeviceAt(uint64(off)), Dst: engine.Host(blk), Len: tracedChunk}); err != nil {
					return err
				}
				copy(heap, blk.Bytes())
				if _, err := out.WriteAt(heap, off); err != nil {
					return err
				}
			}
			return out.Sync()
		}
	default:
		return rep, fmt.Errorf("unknown way %q", way)
	}
	if err := selftrace.Begin(); err != nil {
		return rep, err
	}
	msi0, st0 := dev.Counters().MSIs, e.Stats()
	err = run()
	rep.MSIs = dev.Counters().MSIs - msi0
	st1 := e.Stats()
	for p := range rep.Paths {
		rep.Paths[p] = st1.Paths[p].Bytes - st0.Paths[p].Bytes
	}
	if eerr := selftrace.End(); err == nil {
		err = eerr
	}
	if err != nil {
		return rep, err
	}
	return rep, checkPattern(outPath, tracedSize)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// writePattern writes the pattern into the file at path (through the page
// cache), syncs it and drops it from the page cache.
func writePattern(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		offsetPattern(buf, off)
		if _, err := f.WriteAt(buf, off); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_DONTNEED)
}

// checkPattern says whether the file at path holds the pattern.
func checkPattern(path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf, want := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.ReadAt(buf, off); err != nil {
			return err
		}
		offsetPattern(want, off)
		if !bytes.Equal(buf, want) {
			return fmt.Errorf("%s differs from the input in the MiB at %d", path, off)
		}
	}
	return nil
}

// patternBase is random bytes that offsetPattern stamps with offsets.
var patternBase = func() []byte {
	b := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(29, 3))
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}()

// offsetPattern fills b (at most 1 MiB, starting at file offset off) with
// random bytes whose every 4 KiB begins with its file offset: a block in
// the wrong place shows. Cheap under -race, unlike a byte loop.
func offsetPattern(b []byte, off int64) {
	copy(b, patternBase)
	for i := 0; i+8 <= len(b); i += 4096 {
		binary.LittleEndian.PutUint64(b[i:], uint64(off+int64(i)))
	}
}
