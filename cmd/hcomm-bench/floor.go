package main

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/uring"
)

// The floor row of file-4k on the stable device: the least CPU per I/O an
// io_uring program spends on the same 4 KiB random O_DIRECT I/O, so that
// the engine's CPU goal can be judged against what is reachable at all on
// a device whose cost is the kernel's (docs/engine.md, "The floor on a
// device whose speed is the CPU's"). One goroutine on its own OS thread
// owns a ring bound to that thread (SINGLE_ISSUER, DEFER_TASKRUN and
// COOP_TASKRUN where the kernel has them), a fixed buffer and the device as
// a fixed file; it keeps fileQD I/Os in flight at the same offsets as the
// engine's rows, and waits for fileRefill completions per io_uring_enter
// (the engine's refill point), re-arming each one and doing nothing else.

// floorRing is the loop's state, owned by its goroutine.
type floorRing struct {
	u     *uring.Ring
	mem   []byte
	offs  []int64
	next  int
	write bool
	cqes  []uring.CQE
}

func (f *floorRing) issue(slot int) {
	sqe := f.u.GetSQE()
	buf := f.mem[slot*fileBlock : (slot+1)*fileBlock]
	off := uint64(f.offs[f.next%len(f.offs)])
	f.next++
	if f.write {
		sqe.PrepWriteFixed(0, buf, off, 0)
	} else {
		sqe.PrepReadFixed(0, buf, off, 0)
	}
	sqe.SetFlags(uring.SQEFixedFile)
	sqe.SetUserData(uint64(slot))
}

// run does n I/Os: fileQD in flight while more are left, then the last
// ones drained.
func (f *floorRing) run(n int) error {
	inflight := 0
	for inflight < fileQD && inflight < n {
		f.issue(inflight)
		inflight++
	}
	issued, done := inflight, 0
	for done < n {
		if _, err := f.u.SubmitAndWait(min(fileRefill, inflight)); err != nil {
			return err
		}
		k, err := f.u.PeekCQEs(f.cqes)
		if err != nil {
			return err
		}
		for _, c := range f.cqes[:k] {
			if c.Res() != fileBlock {
				return fmt.Errorf("floor: an I/O returned %d, want %d (%v)", c.Res(), fileBlock, c.Err())
			}
			done++
			inflight--
			if issued < n {
				f.issue(int(c.UserData()))
				issued++
				inflight++
			}
		}
	}
	return nil
}

// setupFloorUring starts the loop's goroutine on the stable device (or
// the data file) and returns a runner that hands it each run.
func setupFloorUring(o *options, write, stable bool) (*runner, error) {
	path, size, err := targetPath(o, stable)
	if err != nil {
		return nil, err
	}
	type job struct {
		n    int
		done chan error
	}
	jobs := make(chan job)
	ready := make(chan error, 1)
	go func() {
		// The ring binds this goroutine to its OS thread (uring.New
		// locks it; Close unlocks it).
		f, closeFn, err := openFloorRing(path, size, write)
		ready <- err
		if err != nil {
			return
		}
		for j := range jobs {
			if j.n < 0 {
				j.done <- closeFn()
				return
			}
			j.done <- f.run(j.n)
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	do := func(n int) error {
		j := job{n: n, done: make(chan error, 1)}
		jobs <- j
		return <-j.done
	}
	op := "reads"
	if write {
		op = "writes"
	}
	return &runner{per: 1, bytes: fileBlock,
		desc: fmt.Sprintf("floor: a bare io_uring loop, the least any io_uring program spends: 4 KiB random O_DIRECT %s, %d in flight, one goroutine on its own OS thread, the ring bound to it (SINGLE_ISSUER|DEFER_TASKRUN|COOP_TASKRUN), a fixed buffer and file, %d completions per io_uring_enter, nothing done per completion but re-arming it", op, fileQD, fileRefill),
		run:  do,
		close: func() error {
			err := do(-1)
			close(jobs)
			return err
		}}, nil
}

// openFloorRing opens the target O_DIRECT, makes the bound ring, and
// registers a hugepage buffer of fileQD blocks and the file. Called on
// the loop's goroutine.
func openFloorRing(path string, size int64, write bool) (*floorRing, func() error, error) {
	flags := unix.O_RDONLY
	if write {
		flags = unix.O_RDWR
	}
	fd, err := unix.Open(path, flags|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("floor: open %s O_DIRECT: %w", path, err)
	}
	u, err := uring.New(uring.Config{Entries: 2 * fileQD})
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("floor: %w", err)
	}
	arena, err := hugepage.NewArena(hugepage.ArenaConfig{Size: fileQD * fileBlock, Populate: true})
	if err != nil {
		u.Close()
		unix.Close(fd)
		return nil, nil, fmt.Errorf("floor: %w", err)
	}
	closeFn := func() error {
		return errors.Join(u.Close(), arena.Close(), unix.Close(fd))
	}
	mem := arena.Bytes()
	if err := u.RegisterBuffers([][]byte{mem}); err != nil {
		_ = closeFn()
		return nil, nil, fmt.Errorf("floor: %w", err)
	}
	if err := u.RegisterFiles([]int32{int32(fd)}); err != nil {
		_ = closeFn()
		return nil, nil, fmt.Errorf("floor: %w", err)
	}
	if write {
		for i := range mem {
			mem[i] = byte(i * 7)
		}
	}
	return &floorRing{u: u, mem: mem, offs: offsetsIn(size, offsRing), write: write, cqes: make([]uring.CQE, 2*fileQD)}, closeFn, nil
}
