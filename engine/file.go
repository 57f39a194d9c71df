package engine

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/uring"
)

// fileTarget moves host blocks to and from one file through io_uring, with
// the pool registered as fixed buffers and the file as a fixed file. The
// ring is Unbound (any one goroutine at a time: the engine's owner) and
// uses no DEFER_TASKRUN/COOP_TASKRUN, so completions are posted without
// waiting for the submitting thread to enter the kernel again.
type fileTarget struct {
	fd        int
	direct    bool
	u         *uring.Ring
	fixedBuf  bool
	fixedFile bool
	cqes      []uring.CQE
	queued    int
	inFlight  int
}

// directAlign is the alignment O_DIRECT needs of addresses, lengths and
// offsets (the logical block size of common devices and file systems).
const directAlign = 4096

func openFile(e *Engine) (_ *fileTarget, err error) {
	f := &fileTarget{fd: int(e.cfg.File.Fd())}
	defer func() {
		if err != nil {
			_ = f.close(e)
		}
	}()
	fl, err := unix.FcntlInt(uintptr(f.fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("engine: File %s: fcntl(F_GETFL): %w", e.cfg.File.Name(), err)
	}
	f.direct = fl&unix.O_DIRECT != 0
	if f.direct && e.cfg.Alignment < directAlign {
		return nil, fmt.Errorf("engine: File %s is O_DIRECT: Alignment %d must be ≥ %d: %w", e.cfg.File.Name(), e.cfg.Alignment, directAlign, ErrBadConfig)
	}
	entries := uint32(max(8, 2*e.depth))
	f.u, err = uring.New(uring.Config{Entries: entries, Unbound: true, NoModernFlags: true})
	if err != nil {
		return nil, fmt.Errorf("engine: io_uring for %s: %w", e.cfg.File.Name(), err)
	}
	f.cqes = make([]uring.CQE, f.u.CQEntries())
	var bufs [][]byte
	for _, a := range e.pool.Arenas() {
		bufs = append(bufs, a.Bytes())
	}
	if err := f.u.RegisterBuffers(bufs); err != nil {
		e.fallbacks = append(e.fallbacks, fmt.Errorf("engine: registered buffers refused, using plain READ/WRITE: %w", err))
	} else {
		f.fixedBuf = true
	}
	if err := f.u.RegisterFiles([]int32{int32(f.fd)}); err != nil {
		e.fallbacks = append(e.fallbacks, fmt.Errorf("engine: registered file refused, using the fd: %w", err))
	} else {
		f.fixedFile = true
	}
	e.file = f
	return f, nil
}

func (e *Engine) validateFile(t *Transfer, r *req) error {
	f := e.file
	var host, file *Loc
	switch {
	case t.Src.kind == locHost && t.Dst.kind == locFile:
		r.op, host, file = opFileWrite, &t.Src, &t.Dst
	case t.Src.kind == locFile && t.Dst.kind == locHost:
		r.op, host, file = opFileRead, &t.Dst, &t.Src
	default:
		return fmt.Errorf("engine: %v → %v: the file target moves host↔file: %w", t.Src, t.Dst, ErrBadTransfer)
	}
	if err := e.checkHost(host, t.Len, "host side"); err != nil {
		return err
	}
	if file.off > 1<<62 {
		return fmt.Errorf("engine: %v: negative or huge file offset: %w", *file, ErrOutOfBounds)
	}
	if f.direct {
		addr := uint64(host.b.Addr()) + host.off
		if addr%directAlign != 0 || uint64(t.Len)%directAlign != 0 || file.off%directAlign != 0 {
			return fmt.Errorf("engine: %v → %v, %d bytes: memory address %#x, length and file offset must be multiples of %d on an O_DIRECT file: %w",
				t.Src, t.Dst, t.Len, addr, directAlign, ErrAlignment)
		}
	}
	r.path = uint8(PathFile)
	r.src = file.off // the file offset, either direction
	return nil
}

// forward prepares one READ/WRITE (fixed buffer, fixed file) SQE.
func (f *fileTarget) forward(e *Engine, pos uint64, r *req, last bool) bool {
	sqe := f.u.GetSQE()
	if sqe == nil {
		return false
	}
	buf := e.slots[pos&e.mask].host
	fd := f.fd
	if f.fixedFile {
		fd = 0
	}
	switch {
	case r.op == opFileWrite && f.fixedBuf:
		sqe.PrepWriteFixed(fd, buf, r.src, 0)
	case r.op == opFileWrite:
		sqe.PrepWrite(fd, buf, r.src)
	case f.fixedBuf:
		sqe.PrepReadFixed(fd, buf, r.src, 0)
	default:
		sqe.PrepRead(fd, buf, r.src)
	}
	if f.fixedFile {
		sqe.SetFlags(uring.SQEFixedFile)
	}
	sqe.SetUserData(pos)
	f.queued++
	return true
}

// flush submits the batch with one io_uring_enter.
func (f *fileTarget) flush(e *Engine) {
	if f.queued == 0 {
		return
	}
	before := f.u.Stats().Enters
	n, err := f.u.Submit()
	e.ctr.syscalls += f.u.Stats().Enters - before
	e.ctr.doorbells++
	if err != nil {
		e.log.Warn("engine: io_uring submit", "err", err, "submitted", n)
	}
	f.inFlight += f.queued
	f.queued = 0
}

// reap takes ready CQEs (no system call unless the kernel has deferred work).
func (f *fileTarget) reap(e *Engine, out []completion) int {
	before := f.u.Stats().Enters
	n, err := f.u.PeekCQEs(f.cqes[:min(len(out), len(f.cqes))])
	e.ctr.syscalls += f.u.Stats().Enters - before
	if err != nil {
		e.log.Warn("engine: io_uring reap", "err", err)
	}
	for i := range n {
		c := &f.cqes[i]
		pos := c.UserData()
		want := e.reqs[pos&e.mask].n
		res := c.Res()
		switch {
		case res < 0:
			out[i] = completion{pos: pos, res: packRes(codeErrnoBase+uint32(-res), 0)}
		case uint32(res) != want:
			out[i] = completion{pos: pos, res: packRes(codeShort, uint32(res))}
		default:
			out[i] = completion{pos: pos, res: packRes(codeOK, uint32(res))}
		}
	}
	f.inFlight -= n
	return n
}

func (f *fileTarget) check(e *Engine) {}

func (f *fileTarget) outstanding() int { return f.inFlight }

func (f *fileTarget) sleepFd() (int, bool) { return f.u.Fd(), false }

// cancel waits for the kernel to finish what it started (file I/O cannot be
// taken back from the device; it completes quickly) and collects it.
func (f *fileTarget) cancel(e *Engine, out []completion) int {
	n := 0
	for f.inFlight > 0 && n < len(out) {
		if _, err := f.u.SubmitAndWait(1); err != nil {
			break
		}
		n += f.reap(e, out[n:])
	}
	return n
}

func (f *fileTarget) close(e *Engine) error {
	if f.u == nil {
		return nil
	}
	err := f.u.Close()
	f.u = nil
	if err != nil && !errors.Is(err, uring.ErrClosed) {
		return fmt.Errorf("engine: close io_uring: %w", err)
	}
	return nil
}
