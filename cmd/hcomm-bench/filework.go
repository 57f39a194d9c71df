package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/ring"
)

// fileWork is what the engine's three file-4k workloads share: the engine
// over the benchmark file and its fileQD blocks, the offsets, the
// direction, and the I/Os that failed.
type fileWork struct {
	fe     *fileEngine
	offs   []int64
	write  bool
	failed atomic.Int64
	first  atomic.Pointer[error]
}

// newFileWork opens the engine in mode with the given queue depth (a
// multiple of fileQD: the engine's staging ring releases slots in
// submission order while file I/O completes out of order, so the engine
// has room beyond what the workload keeps in flight).
func newFileWork(o *options, write bool, mode engine.Mode, depth int) (*fileWork, error) {
	return newFileWorkOn(o, write, mode, depth, false)
}

// newFileWorkOn is newFileWork on file-4k's target: the data file, or with
// stable the stable device.
func newFileWorkOn(o *options, write bool, mode engine.Mode, depth int, stable bool) (*fileWork, error) {
	fe, err := openTargetEngineBlocks(o, stable, engine.Config{PoolSize: 4 << 20, QueueDepth: depth,
		Alignment: 4096, Mode: mode, Populate: true, Logger: quietLogger()}, fileQD)
	if err != nil {
		return nil, err
	}
	return &fileWork{fe: fe, offs: offsetsIn(fe.size, offsRing), write: write}, nil
}

// transfer is the I/O of block bi at the i-th offset.
func (w *fileWork) transfer(bi, i int, cb func(engine.Result)) engine.Transfer {
	off := w.offs[i&(offsRing-1)]
	if w.write {
		return engine.Transfer{Src: engine.Host(w.fe.blocks[bi]), Dst: engine.FileAt(off), Len: fileBlock, Callback: cb, User: uint64(bi)}
	}
	return engine.Transfer{Src: engine.FileAt(off), Dst: engine.Host(w.fe.blocks[bi]), Len: fileBlock, Callback: cb, User: uint64(bi)}
}

// fail counts a failed I/O (the first error is kept).
func (w *fileWork) fail(err error) {
	w.failed.Add(1)
	w.first.CompareAndSwap(nil, &err)
}

func (w *fileWork) check() error {
	if n := w.failed.Load(); n > 0 {
		return fmt.Errorf("%d I/Os failed, first: %w", n, *w.first.Load())
	}
	return nil
}

func (w *fileWork) runner(desc string, run func(n int) error) *runner {
	return &runner{per: 1, bytes: fileBlock, desc: desc, close: w.fe.close, check: w.check, run: run}
}

// spinFile: random 4 KiB I/O at queue depth 64 through the engine's file
// target (io_uring with the pool as registered buffers and the file
// registered, O_DIRECT), poll mode, refilled 32 at a time, completions
// busy-polled (Poll, yielding when a poll finds nothing): the engine-spin
// row, informational — on 2 vCPUs the spinning thread competes with the
// kernel's completion work (the poll-mode goal rows are waitFile's and
// pipeFile's).
type spinFile struct {
	*fileWork
	e          *engine.Engine
	freeIdx    []int // blocks not in flight; completions hand theirs back through User
	ts         []engine.Transfer
	next, done int
	cb         func(engine.Result)
}

func setupEngineFile(o *options, write bool) (*runner, error) {
	w, err := newFileWork(o, write, engine.ModePoll, 2*fileQD)
	if err != nil {
		return nil, err
	}
	s := &spinFile{fileWork: w, e: w.fe.e, freeIdx: make([]int, 0, fileQD), ts: make([]engine.Transfer, fileQD)}
	for i := range w.fe.blocks {
		s.freeIdx = append(s.freeIdx, i)
	}
	s.cb = s.complete
	return w.runner("engine: io_uring, registered pool buffers and file, O_DIRECT, queue depth 64 refilled 32 at a time, completions polled", s.run), nil
}

func (s *spinFile) complete(r engine.Result) {
	s.done++
	s.freeIdx = append(s.freeIdx, int(r.User))
	if r.Err != nil {
		s.fail(r.Err)
	}
}

func (s *spinFile) run(n int) error {
	start := s.done
	submitted := 0
	for s.done-start < n {
		room := fileQD - (submitted - (s.done - start))
		if left := n - submitted; left > 0 && (room >= fileRefill || room >= left) {
			got, err := s.refill(min(room, left, len(s.freeIdx)))
			submitted += got
			if err != nil {
				return err
			}
			continue
		}
		// An empty poll yields: a goroutine that runs for 10 ms
		// without rescheduling makes the runtime's monitor thread
		// preempt it and poll again every 20 µs (nanosleep, futex,
		// tgkill), which would be counted as this loop's system calls.
		if s.e.Poll() == 0 {
			runtime.Gosched()
		}
	}
	return nil
}

// refill submits k I/Os on free blocks, polling when it could not submit
// them all.
func (s *spinFile) refill(k int) (int, error) {
	if k == 0 {
		s.e.Poll()
		return 0, nil
	}
	base := len(s.freeIdx) - k
	for i := range k {
		s.ts[i] = s.transfer(s.freeIdx[base+i], s.next, s.cb)
		s.next++
	}
	got, err := s.e.SubmitBatch(s.ts[:k], nil)
	// Blocks of transfers the engine did not take stay free (its staging
	// ring releases slots in order, so an out-of-order completion can
	// leave it full for a while).
	s.freeIdx = append(s.freeIdx[:base], s.freeIdx[base+got:]...)
	s.next -= k - got
	if err != nil && !errors.Is(err, engine.ErrQueueFull) {
		return got, err
	}
	if got < k {
		s.e.Poll()
	}
	return got, nil
}

// waitFile is the same workload written as an application would with the
// public API, in either mode: the completion callbacks hand blocks back;
// when fewer than 32 are free, the submitter Waits for its oldest I/O in
// flight — and, waiting, reaps for itself (the engine's waiter runs the
// completion cycles and sleeps in io_uring_enter until a batch has
// completed) — then stages what is free with one SubmitBatch. Nobody
// busy-polls while the disk works. Default (reaper) mode: the reaper
// goroutine stands aside while the submitter reaps. ModePoll: the loop
// first Polls (harvesting what is done without blocking) and Waits only
// when that found nothing; callbacks run on the submitter.
type waitFile struct {
	*fileWork
	e *engine.Engine
	// Completed blocks come back through a single-producer (whoever runs
	// the callbacks: the waiting submitter, or the reaper) single-consumer
	// (the submitter) ring.SPSC of 4-byte block indices: no lock.
	free *ring.SPSC
	ts   []engine.Transfer
	// The IDs of the I/Os submitted, oldest first: at most fileQD are in
	// flight (one per block), so the oldest that may be is ids[tail-fileQD].
	ids, batch [2 * fileQD]engine.ID
	head, tail uint64
	next       int
	poll       bool
	cb         func(engine.Result)
}

func setupEngineFileWait(o *options, write bool, mode engine.Mode) (*runner, error) {
	w, err := newFileWork(o, write, mode, 2*fileQD)
	if err != nil {
		return nil, err
	}
	free, err := ring.NewSPSC(make([]byte, 2*fileQD*4), 4)
	if err != nil {
		w.fe.close()
		return nil, err
	}
	s := &waitFile{fileWork: w, e: w.fe.e, free: free, ts: make([]engine.Transfer, fileQD), poll: mode == engine.ModePoll}
	s.cb = s.complete
	for i := range w.fe.blocks {
		if err := s.pushFree(uint64(i)); err != nil {
			w.fe.close()
			return nil, err
		}
	}
	desc := "engine in the default (reaper) mode: io_uring, registered buffers and file, O_DIRECT, 64 in flight refilled 32 at a time; the submitter Waits for its oldest I/O when fewer than 32 blocks are free"
	if s.poll {
		desc = "engine in poll mode: io_uring, registered buffers and file, O_DIRECT, 64 in flight refilled 32 at a time; when fewer than 32 blocks are free the submitter Polls, and Waits for its oldest I/O (reaping, asleep in io_uring_enter) when a Poll found nothing"
	}
	return w.runner(desc, s.run), nil
}

func (s *waitFile) pushFree(bi uint64) error {
	b, err := s.free.Reserve(1) // never full: it holds twice the blocks
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(b.Entry(0), uint32(bi))
	return s.free.Commit(b)
}

func (s *waitFile) complete(r engine.Result) {
	if err := s.pushFree(r.User); err != nil && r.Err == nil {
		r.Err = fmt.Errorf("returning block %d to the free ring: %w", r.User, err)
	}
	if r.Err != nil {
		s.fail(r.Err)
	}
}

func (s *waitFile) run(n int) error {
	ctx := context.Background()
	for submitted := 0; submitted < n; {
		fb := s.free.Peek(n - submitted)
		if k := fb.Len(); k < fileRefill && k < n-submitted {
			if err := s.waitOldest(ctx, k); err != nil {
				return err
			}
			continue
		}
		got, err := s.submit(ctx, fb)
		submitted += got
		if err != nil {
			return err
		}
	}
	return s.e.Drain(ctx)
}

// waitOldest, with k blocks free: a Poll in poll mode, and when that found
// nothing a Wait for the oldest I/O in flight.
func (s *waitFile) waitOldest(ctx context.Context, k int) error {
	if s.poll && s.e.Poll() > 0 {
		return nil
	}
	s.head = max(s.head, s.tail-min(s.tail, fileQD))
	if s.head == s.tail {
		return fmt.Errorf("%d blocks free and nothing in flight", k)
	}
	// The transfer's own error is counted by its callback.
	if err := s.e.Wait(ctx, s.ids[s.head%uint64(len(s.ids))]); err != nil && !errors.Is(err, engine.ErrIO) && !errors.Is(err, engine.ErrShortIO) {
		return err
	}
	s.head++
	return nil
}

// submit stages the free blocks fb with one SubmitBatch; those the engine
// did not take stay free.
func (s *waitFile) submit(ctx context.Context, fb ring.Batch) (int, error) {
	k := fb.Len()
	for i := range k {
		s.ts[i] = s.transfer(int(binary.LittleEndian.Uint32(fb.Entry(i))), s.next+i, s.cb)
	}
	got, err := s.e.SubmitBatchContext(ctx, s.ts[:k], s.batch[:k])
	for i := range got {
		s.ids[(s.tail+uint64(i))%uint64(len(s.ids))] = s.batch[i]
	}
	s.tail += uint64(got)
	if rerr := s.free.Release(got); rerr != nil {
		return got, rerr
	}
	s.next += got
	return got, err
}

// pipeFile is the workload as a callback-driven pipeline, in either mode:
// 64 reads or writes are submitted, and each completion's callback submits
// the next I/O on its block (Submit from a callback); the submitting
// goroutine waits for the pipeline to empty with WaitIdle — and, waiting,
// reaps (callbacks run on it, in ModePoll always, in the default mode
// unless the reaper got there first). A round of the waiter is one
// io_uring_enter: the callbacks' submissions are deferred within it
// (engine: lazyDoorbell) and started by the same system call that waits
// for the next completions. A callback that finds the engine's staging
// ring full (in-order release behind a straggler: it holds four times the
// depth) parks its block; the loop submits parked blocks once WaitIdle
// returns.
type pipeFile struct {
	*fileWork
	e            *engine.Engine
	next, left   atomic.Int64 // offsets used; I/Os still to submit in this run
	mu           sync.Mutex   // parked (rare: the staging ring was full)
	parked       []int
	submitFailed atomic.Pointer[error]
	ts           []engine.Transfer
	cb           func(engine.Result)
}

func setupEngineFilePipe(o *options, write bool, mode engine.Mode) (*runner, error) {
	return setupEngineFilePipeOn(o, write, mode, false)
}

// setupEngineFilePipeOn is setupEngineFilePipe on the data file, or with
// stable on the stable device.
func setupEngineFilePipeOn(o *options, write bool, mode engine.Mode, stable bool) (*runner, error) {
	// A callback submits before its own slot is released (the frontier
	// moves after the callbacks), and slots are released in order: four
	// times the depth in flight, so that a straggler rarely fills the
	// staging ring (a full ring parks blocks and drains the pipeline).
	w, err := newFileWorkOn(o, write, mode, 4*fileQD, stable)
	if err != nil {
		return nil, err
	}
	s := &pipeFile{fileWork: w, e: w.fe.e, ts: make([]engine.Transfer, 0, fileQD)}
	s.cb = s.complete
	for i := range w.fe.blocks {
		s.parked = append(s.parked, i)
	}
	desc := "engine in the default (reaper) mode, a callback-driven pipeline: 64 I/Os in flight (io_uring, registered buffers and file, O_DIRECT), each completion's callback submits the next; the submitter waits with WaitIdle (reaping; one io_uring_enter per round starts the callbacks' submissions and waits for the next completions)"
	if mode == engine.ModePoll {
		desc = "engine in poll mode, the same callback-driven pipeline: callbacks (run by WaitIdle's polling on the submitter) submit the next I/O; one io_uring_enter per round starts them and waits for the next completions"
	}
	return w.runner(desc, s.run), nil
}

func (s *pipeFile) transferNext(bi int) engine.Transfer {
	return s.transfer(bi, int(s.next.Add(1)-1), s.cb)
}

func (s *pipeFile) complete(r engine.Result) {
	if r.Err != nil {
		s.fail(r.Err)
	}
	bi := int(r.User)
	if s.left.Add(-1) >= 0 {
		_, err := s.e.Submit(s.transferNext(bi))
		if err == nil {
			return
		}
		s.next.Add(-1)
		if !errors.Is(err, engine.ErrQueueFull) {
			failure := err // escapes only on this path
			s.submitFailed.CompareAndSwap(nil, &failure)
		}
	}
	// Nothing left to submit in this run, or no room: the block waits for
	// the loop (or the next run).
	s.left.Add(1)
	s.park(bi)
}

func (s *pipeFile) park(bis ...int) {
	s.mu.Lock()
	s.parked = append(s.parked, bis...)
	s.mu.Unlock()
}

func (s *pipeFile) run(n int) error {
	ctx := context.Background()
	s.left.Store(int64(n))
	for {
		if p := s.submitFailed.Load(); p != nil {
			return *p
		}
		s.mu.Lock()
		k := min(len(s.parked), int(s.left.Load()))
		s.ts = s.ts[:0]
		for _, bi := range s.parked[len(s.parked)-k:] {
			s.ts = append(s.ts, s.transferNext(bi))
		}
		s.parked = s.parked[:len(s.parked)-k]
		s.mu.Unlock()
		if k == 0 && s.left.Load() == 0 {
			return nil
		}
		if k == 0 && s.e.Stats().InFlight == 0 { // left > 0, nothing parked
			return fmt.Errorf("%d I/Os left to submit, no block free and none in flight", s.left.Load())
		}
		s.left.Add(-int64(k))
		got, err := s.e.SubmitBatch(s.ts, nil)
		if got < k {
			// Not taken: their blocks stay parked.
			s.next.Add(-int64(k - got))
			s.left.Add(int64(k - got))
			for _, t := range s.ts[got:] {
				s.park(int(t.User))
			}
		}
		if err != nil && !errors.Is(err, engine.ErrQueueFull) {
			return err
		}
		if err := s.e.WaitIdle(ctx); err != nil {
			return err
		}
	}
}
