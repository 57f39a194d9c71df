package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/cmd/internal/baseline"
	"github.com/hcomm-go/hcomm/engine"
)

const (
	fileBlock = 4096
	fileQD    = 64
	// The engine refills its queue when half of it has completed: one
	// io_uring_enter per 32 I/Os at most, the queue between 32 and 64 deep.
	fileRefill = 32
	fileName   = "hcomm-bench-4k.dat"
	// The buffered variant has a file of its own: page-cache pages of the
	// O_DIRECT file would make every direct write flush and invalidate
	// them first.
	bufferedName = "hcomm-bench-4k-buffered.dat"
)

func fileSize(o *options) int64 {
	if o.quick {
		return 64 << 20
	}
	return 512 << 20
}

var fileOps = []string{"randwrite", "randread"}

// atName names the traditional rows for op: os.File.WriteAt or ReadAt.
func atName(op string) string {
	if op == "randread" {
		return "readat"
	}
	return "writeat"
}

func init() {
	for _, op := range fileOps {
		write := op == "randwrite"
		reg := func(v string, setup func(o *options) (*runner, error), count bool) {
			register(&workload{scenario: "file-4k", variant: op + "/" + v, setup: setup, count: count})
		}
		reg("engine", func(o *options) (*runner, error) { return setupEngineFilePipe(o, write, engine.ModePoll) }, true)
		reg("engine-reaper", func(o *options) (*runner, error) { return setupEngineFilePipe(o, write, engine.ModeReaper) }, true)
		reg("engine-wait", func(o *options) (*runner, error) { return setupEngineFileWait(o, write, engine.ModePoll) }, true)
		reg("engine-reaper-wait", func(o *options) (*runner, error) { return setupEngineFileWait(o, write, engine.ModeReaper) }, true)
		reg("engine-spin", func(o *options) (*runner, error) { return setupEngineFile(o, write) }, true)
		at := atName(op)
		reg(at+"-direct-qd1", func(o *options) (*runner, error) { return setupWriteAt(o, write, true, 1) }, true)
		reg(at+"-direct-g64", func(o *options) (*runner, error) { return setupWriteAt(o, write, true, fileQD) }, true)
		reg(at+"-buffered-qd1", func(o *options) (*runner, error) { return setupWriteAt(o, write, false, 1) }, true)
		reg("fio-io_uring", func(o *options) (*runner, error) { return setupFio(o, op, "io_uring", false) }, false)
		reg("fio-psync", func(o *options) (*runner, error) { return setupFio(o, op, "psync", false) }, false)
		// The stable device (stabledev.go): the goal rows' engine
		// variants beside fio io_uring.
		sreg := func(v string, setup func(o *options) (*runner, error), count bool) {
			register(&workload{scenario: "file-4k", variant: stablePrefix + op + "/" + v, setup: setup, count: count})
		}
		sreg("engine", func(o *options) (*runner, error) { return setupEngineFilePipeOn(o, write, engine.ModePoll, true) }, true)
		sreg("engine-reaper", func(o *options) (*runner, error) { return setupEngineFilePipeOn(o, write, engine.ModeReaper, true) }, true)
		sreg("fio-io_uring", func(o *options) (*runner, error) { return setupFio(o, op, "io_uring", true) }, false)
		sreg("floor-uring", func(o *options) (*runner, error) { return setupFloorUring(o, write, true) }, true)
	}
}

// offsets returns a fixed pseudo-random sequence of block offsets in the
// data file.
func offsets(o *options, n int) []int64 { return offsetsIn(fileSize(o), n) }

// offsetsIn returns a fixed pseudo-random sequence of block offsets below
// size.
func offsetsIn(size int64, n int) []int64 {
	blocks := size / fileBlock
	rng := rand.New(rand.NewPCG(42, 4242))
	offs := make([]int64, n)
	for i := range offs {
		offs[i] = rng.Int64N(blocks) * fileBlock
	}
	return offs
}

func openDirect(o *options) (*os.File, error) {
	f, _, err := openTarget(o, false)
	return f, err
}

// targetPath is where file-4k's I/O goes: the data file, or with stable
// the stable device (its size is the device's).
func targetPath(o *options, stable bool) (path string, size int64, err error) {
	if !stable {
		path, err = prepareFile(o)
		return path, fileSize(o), err
	}
	if o.stableDev == "" {
		return "", 0, errors.New("no stable device set up")
	}
	f, err := os.Open(o.stableDev)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if size, err = f.Seek(0, io.SeekEnd); err != nil {
		return "", 0, fmt.Errorf("%s: size: %w", o.stableDev, err)
	}
	return o.stableDev, size, nil
}

// openTarget opens file-4k's target (targetPath) O_DIRECT and returns its
// size.
func openTarget(o *options, stable bool) (*os.File, int64, error) {
	path, size, err := targetPath(o, stable)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s O_DIRECT: %w", path, err)
	}
	return f, size, nil
}

const offsRing = 1 << 16

// setupWriteAt: os.File WriteAt/ReadAt of one 4 KiB heap block per call,
// O_DIRECT or buffered, from `workers` goroutines.
func setupWriteAt(o *options, write, direct bool, workers int) (*runner, error) {
	var f *os.File
	var err error
	if direct {
		f, err = openDirect(o)
	} else {
		var path string
		if path, err = layOut(o, bufferedName); err == nil {
			f, err = os.OpenFile(path, os.O_RDWR, 0)
		}
	}
	if err != nil {
		return nil, err
	}
	fp, err := baseline.NewFile(f, baseline.FileConfig{Block: fileBlock, Workers: workers})
	if err != nil {
		f.Close()
		return nil, err
	}
	offs := offsets(o, offsRing)
	next := 0
	mode := "buffered (page cache)"
	if direct {
		mode = "O_DIRECT"
	}
	if !direct && write {
		mode += ", fsync at the end of each run (no dirty pages left for the next variant)"
	}
	r := &runner{per: 1, bytes: fileBlock, close: f.Close,
		desc: fmt.Sprintf("os.File.%s of one 4 KiB heap buffer per call, %s, %d goroutine(s)", map[bool]string{true: "WriteAt", false: "ReadAt"}[write], mode, workers)}
	r.run = func(n int) error {
		for n > 0 {
			start := next & (offsRing - 1)
			k := min(n, offsRing-start)
			var err error
			if write {
				err = fp.WriteBlocks(offs[start : start+k])
			} else {
				err = fp.ReadBlocks(offs[start : start+k])
			}
			if err != nil {
				return err
			}
			next += k
			n -= k
		}
		if !direct && write {
			// Buffered writes only reach the page cache; the run
			// pays for writing them back, once, as a program that
			// wants its data on disk does.
			return f.Sync()
		}
		return nil
	}
	return r, nil
}

// setupFio runs fio on the same file: 4 KiB random I/O, O_DIRECT, queue
// depth 64 (io_uring with fixedbufs and registerfiles), or psync (one
// pwrite/pread per I/O, queue depth 1).
func setupFio(o *options, op, ioengine string, stable bool) (*runner, error) {
	fio, err := fioPath()
	if err != nil {
		return nil, err
	}
	path, size, err := targetPath(o, stable)
	if err != nil {
		return nil, err
	}
	r := &runner{per: 1, bytes: fileBlock, close: func() error { return nil },
		desc: "fio " + ioengine + " " + op + " bs=4k direct=1"}
	if ioengine == "io_uring" {
		r.desc += " iodepth=64 fixedbufs registerfiles"
	}
	r.timed = func(d time.Duration) (float64, int, error) {
		args := fioArgs(path, size, op, ioengine, d)
		out, err := exec.Command(fio, args...).Output()
		if err != nil {
			return 0, 0, fmt.Errorf("fio %v: %w", args, err)
		}
		iops, ios, err := parseFio(out, op)
		r.timedCPU = parseFioCPU(out, ios)
		if err != nil {
			return 0, 0, err
		}
		return 1e9 / iops, ios, nil
	}
	return r, nil
}

func fioArgs(path string, size int64, op, ioengine string, d time.Duration) []string {
	a := []string{"--name=hcomm", "--filename=" + path, "--rw=" + op, "--bs=4k", "--direct=1",
		"--size=" + strconv.FormatInt(size, 10), "--ioengine=" + ioengine,
		"--time_based", "--runtime=" + strconv.Itoa(int(max(d, 100*time.Millisecond)/time.Millisecond)) + "ms",
		"--randrepeat=0", "--norandommap", "--output-format=json"}
	if ioengine == "io_uring" {
		a = append(a, "--iodepth=64", "--fixedbufs", "--registerfiles")
	}
	return a
}

// parseFioCPU returns fio's job CPU time (usr_cpu+sys_cpu, percentages of
// job_runtime) per I/O, or 0 when fio did not say.
func parseFioCPU(out []byte, ios int) float64 {
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var j struct {
		Jobs []struct {
			Usr     float64 `json:"usr_cpu"`
			Sys     float64 `json:"sys_cpu"`
			Runtime float64 `json:"job_runtime"` // ms
		} `json:"jobs"`
	}
	if json.Unmarshal(out, &j) != nil || len(j.Jobs) == 0 || ios <= 0 {
		return 0
	}
	jb := j.Jobs[0]
	return (jb.Usr + jb.Sys) / 100 * jb.Runtime * 1e6 / float64(ios)
}

func parseFio(out []byte, op string) (iops float64, ios int, err error) {
	// fio may print warnings before the JSON object.
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var j struct {
		Jobs []struct {
			Read, Write struct {
				IOPS     float64 `json:"iops"`
				TotalIOs int     `json:"total_ios"`
			}
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &j); err != nil || len(j.Jobs) == 0 {
		return 0, 0, fmt.Errorf("parse fio output: %v", err)
	}
	s := j.Jobs[0].Read
	if op == "randwrite" {
		s = j.Jobs[0].Write
	}
	if s.IOPS <= 0 {
		return 0, 0, fmt.Errorf("fio reported no %s I/O", op)
	}
	return s.IOPS, s.TotalIOs, nil
}

// fioAndFile finds fio and lays out the data file it reads and writes.
func fioAndFile(o *options) (fio, path string, err error) {
	if fio, err = fioPath(); err != nil {
		return "", "", err
	}
	path, err = prepareFile(o)
	return fio, path, err
}

func fioPath() (string, error) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		return "", fmt.Errorf("fio not installed (make bench installs it: apt-get install fio)")
	}
	return fio, nil
}
