package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/internal/baseline"
	"github.com/hcomm-go/hcomm/ring"
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
		reg("fio-io_uring", func(o *options) (*runner, error) { return setupFio(o, op, "io_uring") }, false)
		reg("fio-psync", func(o *options) (*runner, error) { return setupFio(o, op, "psync") }, false)
	}
}

// offsets returns a fixed pseudo-random sequence of block offsets.
func offsets(o *options, n int) []int64 {
	blocks := fileSize(o) / fileBlock
	rng := rand.New(rand.NewPCG(42, 4242))
	offs := make([]int64, n)
	for i := range offs {
		offs[i] = rng.Int64N(blocks) * fileBlock
	}
	return offs
}

func openDirect(o *options) (*os.File, error) {
	path, err := prepareFile(o)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s O_DIRECT: %w", path, err)
	}
	return f, nil
}

const offsRing = 1 << 16

// setupEngineFile: random 4 KiB I/O at queue depth 64 through the engine's
// file target (io_uring with the pool as registered buffers and the file
// registered, O_DIRECT), poll mode, refilled 32 at a time, completions
// busy-polled (Poll, yielding when a poll finds nothing): the engine-spin
// row, informational — on 2 vCPUs the spinning thread competes with the
// kernel's completion work (the poll-mode goal row is setupEngineFileWait's).
func setupEngineFile(o *options, write bool) (*runner, error) {
	// The engine's staging ring releases slots in submission order; file
	// I/O completes out of order, so the engine gets twice the depth the
	// workload keeps in flight, and a straggler never stalls the refill.
	fe, err := openFileEngineBlocks(o, engine.Config{PoolSize: 4 << 20, QueueDepth: 2 * fileQD,
		Alignment: 4096, Mode: engine.ModePoll, Populate: true, Logger: quietLogger()}, fileQD)
	if err != nil {
		return nil, err
	}
	e, blocks := fe.e, fe.blocks
	offs := offsets(o, offsRing)
	var failed, done int
	var firstErr error
	// Completions hand their block back through User (an index).
	freeIdx := make([]int, 0, fileQD)
	for i := range blocks {
		freeIdx = append(freeIdx, i)
	}
	cb := func(r engine.Result) {
		done++
		freeIdx = append(freeIdx, int(r.User))
		if r.Err != nil {
			failed++
			if firstErr == nil {
				firstErr = r.Err
			}
		}
	}
	ts := make([]engine.Transfer, fileQD)
	next := 0
	r := &runner{per: 1, bytes: fileBlock,
		desc:  "engine: io_uring, registered pool buffers and file, O_DIRECT, queue depth 64 refilled 32 at a time, completions polled",
		close: fe.close,
		check: func() error {
			if failed > 0 {
				return fmt.Errorf("%d I/Os failed, first: %w", failed, firstErr)
			}
			return nil
		},
	}
	r.run = func(n int) error {
		start := done
		submitted := 0
		for done-start < n {
			inflight := submitted - (done - start)
			room := fileQD - inflight
			if left := n - submitted; left > 0 && (room >= fileRefill || room >= left) {
				k := min(room, left, len(freeIdx))
				if k == 0 {
					e.Poll()
					continue
				}
				base := len(freeIdx) - k
				for i := range k {
					bi := freeIdx[base+i]
					off := offs[next&(offsRing-1)]
					next++
					if write {
						ts[i] = engine.Transfer{Src: engine.Host(blocks[bi]), Dst: engine.FileAt(off), Len: fileBlock, Callback: cb, User: uint64(bi)}
					} else {
						ts[i] = engine.Transfer{Src: engine.FileAt(off), Dst: engine.Host(blocks[bi]), Len: fileBlock, Callback: cb, User: uint64(bi)}
					}
				}
				got, err := e.SubmitBatch(ts[:k], nil)
				submitted += got
				// Blocks of transfers the engine did not take stay free
				// (its staging ring releases slots in order, so an
				// out-of-order completion can leave it full for a while).
				freeIdx = append(freeIdx[:base], freeIdx[base+got:]...)
				next -= k - got
				if err != nil && !errors.Is(err, engine.ErrQueueFull) {
					return err
				}
				if got < k {
					e.Poll()
				}
				continue
			}
			// An empty poll yields: a goroutine that runs for 10 ms
			// without rescheduling makes the runtime's monitor thread
			// preempt it and poll again every 20 µs (nanosleep, futex,
			// tgkill), which would be counted as this loop's system calls.
			if e.Poll() == 0 {
				runtime.Gosched()
			}
		}
		return nil
	}
	return r, nil
}

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
func setupFio(o *options, op, ioengine string) (*runner, error) {
	fio, path, err := fioAndFile(o)
	if err != nil {
		return nil, err
	}
	r := &runner{per: 1, bytes: fileBlock, close: func() error { return nil },
		desc: "fio " + ioengine + " " + op + " bs=4k direct=1"}
	if ioengine == "io_uring" {
		r.desc += " iodepth=64 fixedbufs registerfiles"
	}
	r.timed = func(d time.Duration) (float64, int, error) {
		args := fioArgs(o, path, op, ioengine, d)
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

func fioArgs(o *options, path, op, ioengine string, d time.Duration) []string {
	a := []string{"--name=hcomm", "--filename=" + path, "--rw=" + op, "--bs=4k", "--direct=1",
		"--size=" + strconv.FormatInt(fileSize(o), 10), "--ioengine=" + ioengine,
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

// setupEngineFileWait is the same workload written as an application would
// with the public API, in either mode: the completion callbacks hand
// blocks back; when fewer than 32 are free, the submitter Waits for its
// oldest I/O in flight — and, waiting, reaps for itself (the engine's
// waiter runs the completion cycles and sleeps in io_uring_enter until a
// batch has completed) — then stages what is free with one SubmitBatch.
// Nobody busy-polls while the disk works. Default (reaper) mode: the
// reaper goroutine stands aside while the submitter reaps. ModePoll: the
// loop first Polls (harvesting what is done without blocking) and Waits
// only when that found nothing; callbacks run on the submitter.
func setupEngineFileWait(o *options, write bool, mode engine.Mode) (*runner, error) {
	fe, err := openFileEngineBlocks(o, engine.Config{PoolSize: 4 << 20, QueueDepth: 2 * fileQD,
		Alignment: 4096, Mode: mode, Populate: true, Logger: quietLogger()}, fileQD)
	if err != nil {
		return nil, err
	}
	e, blocks, closeAll := fe.e, fe.blocks, fe.close
	offs := offsets(o, offsRing)
	// Completed blocks come back through a single-producer (whoever runs
	// the callbacks: the waiting submitter, or the reaper) single-consumer
	// (the submitter) ring.SPSC of 4-byte block indices: no lock.
	free, err := ring.NewSPSC(make([]byte, 2*fileQD*4), 4)
	if err != nil {
		closeAll()
		return nil, err
	}
	var (
		failed   atomic.Int64
		firstErr atomic.Pointer[error]
	)
	pushFree := func(bi uint64) error {
		b, err := free.Reserve(1) // never full: it holds twice the blocks
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(b.Entry(0), uint32(bi))
		return free.Commit(b)
	}
	for i := range blocks {
		if err := pushFree(uint64(i)); err != nil {
			closeAll()
			return nil, err
		}
	}
	cb := func(r engine.Result) {
		if err := pushFree(r.User); err != nil && r.Err == nil {
			r.Err = fmt.Errorf("returning block %d to the free ring: %w", r.User, err)
		}
		if r.Err != nil {
			failed.Add(1)
			err := r.Err
			firstErr.CompareAndSwap(nil, &err)
		}
	}
	ts := make([]engine.Transfer, fileQD)
	// The IDs of the I/Os submitted, oldest first: at most fileQD are in
	// flight (one per block), so the oldest that may be is ids[tail-fileQD].
	var ids, batch [2 * fileQD]engine.ID
	var head, tail uint64
	next := 0
	ctx := context.Background()
	poll := mode == engine.ModePoll
	desc := "engine in the default (reaper) mode: io_uring, registered buffers and file, O_DIRECT, 64 in flight refilled 32 at a time; the submitter Waits for its oldest I/O when fewer than 32 blocks are free"
	if poll {
		desc = "engine in poll mode: io_uring, registered buffers and file, O_DIRECT, 64 in flight refilled 32 at a time; when fewer than 32 blocks are free the submitter Polls, and Waits for its oldest I/O (reaping, asleep in io_uring_enter) when a Poll found nothing"
	}
	return &runner{per: 1, bytes: fileBlock, close: closeAll,
		desc: desc,
		check: func() error {
			if n := failed.Load(); n > 0 {
				return fmt.Errorf("%d I/Os failed, first: %w", n, *firstErr.Load())
			}
			return nil
		},
		run: func(n int) error {
			for submitted := 0; submitted < n; {
				fb := free.Peek(n - submitted)
				k := fb.Len()
				if k < fileRefill && k < n-submitted {
					if poll && e.Poll() > 0 {
						continue
					}
					head = max(head, tail-min(tail, fileQD))
					if head == tail {
						return fmt.Errorf("%d blocks free and nothing in flight", k)
					}
					// The transfer's own error is counted by its callback.
					if err := e.Wait(ctx, ids[head%uint64(len(ids))]); err != nil && !errors.Is(err, engine.ErrIO) && !errors.Is(err, engine.ErrShortIO) {
						return err
					}
					head++
					continue
				}
				for i := range k {
					bi := int(binary.LittleEndian.Uint32(fb.Entry(i)))
					off := offs[(next+i)&(offsRing-1)]
					if write {
						ts[i] = engine.Transfer{Src: engine.Host(blocks[bi]), Dst: engine.FileAt(off), Len: fileBlock, Callback: cb, User: uint64(bi)}
					} else {
						ts[i] = engine.Transfer{Src: engine.FileAt(off), Dst: engine.Host(blocks[bi]), Len: fileBlock, Callback: cb, User: uint64(bi)}
					}
				}
				got, err := e.SubmitBatchContext(ctx, ts[:k], batch[:k])
				for i := range got {
					ids[(tail+uint64(i))%uint64(len(ids))] = batch[i]
				}
				tail += uint64(got)
				if rerr := free.Release(got); rerr != nil { // the rest stay free
					return rerr
				}
				next += got
				submitted += got
				if err != nil {
					return err
				}
			}
			return e.Drain(ctx)
		}}, nil
}

// setupEngineFilePipe is the workload as a callback-driven pipeline, in
// either mode: 64 reads or writes are submitted, and each completion's
// callback submits the next I/O on its block (Submit from a callback); the
// submitting goroutine waits for the pipeline to empty with WaitIdle —
// and, waiting, reaps (callbacks run on it, in ModePoll always, in the
// default mode unless the reaper got there first). A round of the waiter
// is one io_uring_enter: the callbacks' submissions are deferred within
// it (engine: lazyDoorbell) and started by the same system call that
// waits for the next completions. A callback that finds the engine's
// staging ring full (in-order release behind a straggler: it holds four
// times the depth) parks its block; the loop submits parked blocks once
// WaitIdle returns.
func setupEngineFilePipe(o *options, write bool, mode engine.Mode) (*runner, error) {
	// A callback submits before its own slot is released (the frontier
	// moves after the callbacks), and slots are released in order: four
	// times the depth in flight, so that a straggler rarely fills the
	// staging ring (a full ring parks blocks and drains the pipeline).
	fe, err := openFileEngineBlocks(o, engine.Config{PoolSize: 4 << 20, QueueDepth: 4 * fileQD,
		Alignment: 4096, Mode: mode, Populate: true, Logger: quietLogger()}, fileQD)
	if err != nil {
		return nil, err
	}
	e, blocks := fe.e, fe.blocks
	offs := offsets(o, offsRing)
	var (
		next, left   atomic.Int64 // offsets used; I/Os still to submit in this run
		failed       atomic.Int64
		firstErr     atomic.Pointer[error]
		mu           sync.Mutex // parked (rare: the staging ring was full)
		parked       []int
		cb           func(engine.Result)
		submitFailed atomic.Pointer[error]
	)
	transfer := func(bi int) engine.Transfer {
		off := offs[(next.Add(1)-1)&(offsRing-1)]
		if write {
			return engine.Transfer{Src: engine.Host(blocks[bi]), Dst: engine.FileAt(off), Len: fileBlock, Callback: cb, User: uint64(bi)}
		}
		return engine.Transfer{Src: engine.FileAt(off), Dst: engine.Host(blocks[bi]), Len: fileBlock, Callback: cb, User: uint64(bi)}
	}
	cb = func(r engine.Result) {
		if r.Err != nil {
			failed.Add(1)
			err := r.Err
			firstErr.CompareAndSwap(nil, &err)
		}
		bi := int(r.User)
		if left.Add(-1) >= 0 {
			_, err := e.Submit(transfer(bi))
			if err == nil {
				return
			}
			next.Add(-1)
			if !errors.Is(err, engine.ErrQueueFull) {
				failure := err // escapes only on this path
				submitFailed.CompareAndSwap(nil, &failure)
			}
		}
		// Nothing left to submit in this run, or no room: the block waits
		// for the loop (or the next run).
		left.Add(1)
		mu.Lock()
		parked = append(parked, bi)
		mu.Unlock()
	}
	ts := make([]engine.Transfer, 0, fileQD)
	ctx := context.Background()
	for i := range blocks {
		parked = append(parked, i)
	}
	desc := "engine in the default (reaper) mode, a callback-driven pipeline: 64 I/Os in flight (io_uring, registered buffers and file, O_DIRECT), each completion's callback submits the next; the submitter waits with WaitIdle (reaping; one io_uring_enter per round starts the callbacks' submissions and waits for the next completions)"
	if mode == engine.ModePoll {
		desc = "engine in poll mode, the same callback-driven pipeline: callbacks (run by WaitIdle's polling on the submitter) submit the next I/O; one io_uring_enter per round starts them and waits for the next completions"
	}
	return &runner{per: 1, bytes: fileBlock, close: fe.close, desc: desc,
		check: func() error {
			if n := failed.Load(); n > 0 {
				return fmt.Errorf("%d I/Os failed, first: %w", n, *firstErr.Load())
			}
			return nil
		},
		run: func(n int) error {
			left.Store(int64(n))
			for {
				if p := submitFailed.Load(); p != nil {
					return *p
				}
				mu.Lock()
				k := min(len(parked), int(left.Load()))
				ts = ts[:0]
				for _, bi := range parked[len(parked)-k:] {
					ts = append(ts, transfer(bi))
				}
				parked = parked[:len(parked)-k]
				mu.Unlock()
				if k == 0 && left.Load() == 0 {
					return nil
				}
				if k == 0 && e.Stats().InFlight == 0 { // left > 0, nothing parked
					return fmt.Errorf("%d I/Os left to submit, no block free and none in flight", left.Load())
				}
				left.Add(-int64(k))
				got, err := e.SubmitBatch(ts, nil)
				if got < k {
					// Not taken: their blocks stay parked.
					next.Add(-int64(k - got))
					left.Add(int64(k - got))
					mu.Lock()
					for _, t := range ts[got:] {
						parked = append(parked, int(t.User))
					}
					mu.Unlock()
				}
				if err != nil && !errors.Is(err, engine.ErrQueueFull) {
					return err
				}
				if err := e.WaitIdle(ctx); err != nil {
					return err
				}
			}
		}}, nil
}

// fioAndFile finds fio and lays out the data file it reads and writes.
func fioAndFile(o *options) (fio, path string, err error) {
	if fio, err = exec.LookPath("fio"); err != nil {
		return "", "", fmt.Errorf("fio not installed (make bench installs it: apt-get install fio)")
	}
	path, err = prepareFile(o)
	return fio, path, err
}
