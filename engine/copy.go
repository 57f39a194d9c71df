package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// Defaults of CopySpec.
const (
	DefaultCopyChunk = 1 << 20
	DefaultCopyDepth = 4
)

// CopySpec describes a path: Len bytes from Src to Dst, two non-host
// locations of (usually different) backends — a file into device memory,
// device memory to a file or a peer, a peer's pool into device memory.
type CopySpec struct {
	Src, Dst Loc
	// Len is the number of bytes, > 0.
	Len int64
	// Chunk is the bytes each pool block carries per step (default
	// DefaultCopyChunk, rounded up to the engine's Alignment; the last
	// chunk may be shorter). The backends' alignment rules apply to every
	// chunk: an O_DIRECT file needs 4096-byte chunks, offsets and length.
	Chunk int
	// Depth is the chunks in flight at once (default DefaultCopyDepth; at
	// least 2, so that one chunk is read while the one before is written).
	// The copy holds Depth blocks of Chunk bytes of the pool: its whole
	// use of host memory. At most Depth - max(1, Depth/4) of them read at
	// once; the others are being written, or free to start the next read
	// the moment one ends.
	Depth int
	// Callback, when not nil, runs exactly once when the copy ends
	// (done, failed or canceled), on the copy's own goroutine; it may
	// block.
	Callback func(CopyResult)
}

// CopyResult is the outcome of a copy.
type CopyResult struct {
	// Bytes is how many bytes reached Dst (whole chunks, from the start
	// and out of order: after a failure, the chunks before Failed's range
	// are all there only if Err says nothing else).
	Bytes int64
	// Err is nil, ErrCopyFailed (wrapping the failed transfer's error and
	// naming the byte range and the side), or the context's error.
	Err error
}

// ErrCopyFailed: a chunk of a copy failed; the error says which byte range
// and which side (reading from Src, writing to Dst) and wraps the cause.
var ErrCopyFailed = errors.New("engine: copy failed")

// Copy is a path in progress: Copy streams Len bytes from Src to Dst
// through pool blocks, each chunk read into a block by Src's backend and
// written from the same block by Dst's backend — the bytes never pass
// through the CPU — with Depth chunks in flight.
type Copy struct {
	e        *Engine
	spec     CopySpec
	done     atomic.Int64
	finished chan struct{}
	res      CopyResult
	events   chan copyEvent
}

type copyEvent struct {
	user uint64
	n    int
	err  error
}

// Copy starts a path copy and returns at once; Wait waits for its end,
// Done reports progress. The copy runs on a goroutine of its own, which
// submits through the engine like any caller (its transfers count in
// Stats, its blocks in the pool); ctx cancels it: no chunk starts after
// ctx ends, those in flight finish, and the result is ctx's error.
func (e *Engine) Copy(ctx context.Context, spec CopySpec) (*Copy, error) {
	if spec.Chunk == 0 {
		spec.Chunk = DefaultCopyChunk
	}
	if spec.Depth == 0 {
		spec.Depth = DefaultCopyDepth
	}
	bad := func(format string, args ...any) (*Copy, error) {
		return nil, fmt.Errorf("engine: copy %v → %v: "+format+": %w", append([]any{spec.Src, spec.Dst}, append(args, ErrBadTransfer)...)...)
	}
	switch {
	case spec.Len <= 0:
		return bad("length %d: want > 0", spec.Len)
	case spec.Chunk < 0 || spec.Chunk > 1<<30:
		return bad("Chunk %d: want 1..1 GiB (0 = %d)", spec.Chunk, DefaultCopyChunk)
	case spec.Depth < 2 || spec.Depth > e.depth:
		return bad("Depth %d: want 2..QueueDepth %d (0 = %d)", spec.Depth, e.depth, DefaultCopyDepth)
	case spec.Src.kind == LocHost || spec.Dst.kind == LocHost || spec.Src.kind == LocNone || spec.Dst.kind == LocNone:
		return bad("both ends must be device, file or remote locations (a host block is a Transfer's end)")
	}
	for _, l := range [2]*Loc{&spec.Src, &spec.Dst} {
		if err := e.locErr(l); err != nil {
			return nil, fmt.Errorf("engine: copy %v → %v: %w", spec.Src, spec.Dst, err)
		}
	}
	if e.closing.Load() {
		return nil, errClosedWhile("copy")
	}
	a := int64(e.cfg.Alignment)
	spec.Chunk = int((int64(spec.Chunk) + a - 1) / a * a)
	if c := int64(spec.Chunk); c > spec.Len {
		spec.Chunk = int((spec.Len + a - 1) / a * a)
	}
	blocks := make([]Block, spec.Depth)
	for i := range blocks {
		b, err := e.Alloc(spec.Chunk)
		if err != nil {
			for _, b := range blocks[:i] {
				_ = e.Free(b)
			}
			return nil, fmt.Errorf("engine: copy %v → %v: %d chunks of %d bytes in flight: %w", spec.Src, spec.Dst, spec.Depth, spec.Chunk, err)
		}
		blocks[i] = b
	}
	c := &Copy{e: e, spec: spec, finished: make(chan struct{}), events: make(chan copyEvent, spec.Depth)}
	go c.run(ctx, blocks)
	return c, nil
}

// Done is how many bytes have reached Dst so far.
func (c *Copy) Done() int64 { return c.done.Load() }

// Wait waits until the copy ended and returns its error (nil: every byte
// reached Dst), or ctx's error if ctx ends first (the copy goes on).
func (c *Copy) Wait(ctx context.Context) error {
	select {
	case <-c.finished:
		return c.res.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Result is the copy's outcome once it ended (Wait returned nil or its
// error); before that it is the zero CopyResult.
func (c *Copy) Result() CopyResult {
	select {
	case <-c.finished:
		return c.res
	default:
		return CopyResult{}
	}
}

// A copy transfer's User: the block index, and whether it is the write.
const copyWrite = 1

// copyReads is how many of a copy's depth blocks may be reading at once:
// all but a quarter (at least one). The rest is slack for writes: a disk
// completes a round of reads together, and with every block reading, the
// next round could start only as the writes of the last one end, one by one
// — the disk would idle while the device writes. With slack, the blocks
// whose writes ended already start the next round at once. Depth 2 is plain
// double buffering: one block reads while the other writes.
func copyReads(depth int) int { return depth - max(1, depth/4) }

// run drives the copy: a free block reads the next chunk (while fewer than
// copyReads are reading), the block is written as soon as its read ends,
// and is free again when its write ends; until all are done or something
// failed. Then it frees the blocks and reports.
func (c *Copy) run(ctx context.Context, blocks []Block) {
	spec, e := &c.spec, c.e
	chunk := int64(spec.Chunk)
	nChunks := (spec.Len + chunk - 1) / chunk
	at := make([]int64, len(blocks)) // the chunk each block carries
	free := make([]int, 0, len(blocks))
	for i := len(blocks) - 1; i >= 0; i-- {
		free = append(free, i)
	}
	maxReads := copyReads(len(blocks))
	cb := func(r Result) { c.events <- copyEvent{user: r.User, n: r.N, err: r.Err} }
	var next int64
	var inflight, reads int
	var failed error
	stop := func(err error) {
		if failed == nil {
			failed = err
		}
	}
	submit := func(i int, write bool) bool {
		k := at[i]
		off := k * chunk
		n := min(chunk, spec.Len-off)
		t := Transfer{Src: spec.Src.plus(off), Dst: HostAt(blocks[i], 0), Len: int(n), Callback: cb, User: uint64(i) << 1}
		side := "reading from"
		if write {
			t.Src, t.Dst, t.User = HostAt(blocks[i], 0), spec.Dst.plus(off), t.User|copyWrite
			side = "writing to"
		}
		if _, err := e.SubmitContext(ctx, t); err != nil {
			stop(c.chunkErr(off, n, side, err))
			return false
		}
		inflight++
		return true
	}
	startReads := func() {
		for failed == nil && reads < maxReads && len(free) > 0 && next < nChunks {
			i := free[len(free)-1]
			free = free[:len(free)-1]
			at[i], next = next, next+1
			if !submit(i, false) {
				free = append(free, i)
				return
			}
			reads++
		}
	}
	startReads()
	for inflight > 0 {
		ev := <-c.events
		inflight--
		i, write := int(ev.user>>1), ev.user&copyWrite != 0
		off := at[i] * chunk
		n := min(chunk, spec.Len-off)
		if !write {
			reads--
		}
		switch {
		case ev.err != nil:
			side := "reading from"
			if write {
				side = "writing to"
			}
			stop(c.chunkErr(off, n, side, ev.err))
			free = append(free, i)
		case !write:
			if failed != nil || !submit(i, true) {
				free = append(free, i)
			}
		default:
			c.done.Add(n)
			free = append(free, i)
			if failed == nil && ctx.Err() != nil {
				stop(fmt.Errorf("engine: copy %v → %v canceled after %d bytes: %w", spec.Src, spec.Dst, c.done.Load(), ctx.Err()))
			}
		}
		startReads()
	}
	for _, b := range blocks {
		_ = e.Free(b) // ErrClosed after Close: the pool is gone anyway
	}
	c.res = CopyResult{Bytes: c.done.Load(), Err: failed}
	close(c.finished)
	if spec.Callback != nil {
		spec.Callback(c.res)
	}
}

// chunkErr names the byte range and the side of a failed chunk.
func (c *Copy) chunkErr(off, n int64, side string, err error) error {
	end := c.spec.Dst
	if side == "reading from" {
		end = c.spec.Src
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("engine: copy %v → %v canceled at bytes [%d, %d): %w", c.spec.Src, c.spec.Dst, off, off+n, err)
	}
	return fmt.Errorf("%w: %v → %v: bytes [%d, %d) %s %v: %w", ErrCopyFailed, c.spec.Src, c.spec.Dst, off, off+n, side, end, err)
}

// plus is l moved forward by d bytes (a non-host Loc).
func (l Loc) plus(d int64) Loc {
	l.off += uint64(d)
	return l
}
