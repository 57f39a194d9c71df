package engine

import (
	"fmt"
	"math"
)

// validate checks t against the engine's target and builds its staging
// entry. It makes no system call and allocates only on error.
func (e *Engine) validate(t *Transfer, r *req) error {
	if t.Len <= 0 || t.Len > math.MaxUint32 {
		return fmt.Errorf("engine: transfer %v → %v of %d bytes: length must be 1..%d: %w", t.Src, t.Dst, t.Len, uint32(math.MaxUint32), ErrBadTransfer)
	}
	r.n = uint32(t.Len)
	switch e.cfg.Target {
	case TargetDevice:
		return e.validateDevice(t, r)
	case TargetFile:
		return e.validateFile(t, r)
	case TargetMemory:
		return e.validateMemory(t, r)
	}
	return ErrUnsupported
}

// checkHost verifies that l names Len live bytes of one of this engine's
// blocks: one atomic load of the block's generation, no lock.
func (e *Engine) checkHost(l *Loc, n int, what string) error {
	b := &l.b
	if b.e != e {
		return fmt.Errorf("engine: %s %v: %w", what, *l, ErrForeignBlock)
	}
	if !e.blocks.live(b.idx, b.gen) {
		return fmt.Errorf("engine: %s %v: %w", what, *l, ErrFreedBlock)
	}
	if l.off > uint64(b.Len()) || uint64(n) > uint64(b.Len())-l.off {
		return fmt.Errorf("engine: %s %v: %d bytes at offset %d do not fit the %d-byte block: %w", what, *l, n, int64(l.off), b.Len(), ErrOutOfBounds)
	}
	return nil
}

// execute runs a transfer the submitter performs itself (CPU path, memory
// target) and returns its packed result.
func (e *Engine) execute(t *Transfer, r *req) uint64 {
	switch r.op {
	case opH2D:
		return e.dev.cpuWrite(t)
	case opMemCopy:
		src := t.Src.b.hb.Bytes()[t.Src.off : t.Src.off+uint64(t.Len)]
		dst := t.Dst.b.hb.Bytes()[t.Dst.off : t.Dst.off+uint64(t.Len)]
		return packRes(codeOK, uint32(copy(dst, src)))
	}
	return packRes(codeNoRoute, 0)
}

// hostBytes is the host side of a host↔file transfer.
func (t *Transfer) hostBytes() []byte {
	l := &t.Src
	if l.kind != locHost {
		l = &t.Dst
	}
	return l.b.hb.Bytes()[l.off : l.off+uint64(t.Len)]
}

func (e *Engine) validateMemory(t *Transfer, r *req) error {
	if t.Src.kind != locHost || t.Dst.kind != locHost {
		return fmt.Errorf("engine: %v → %v: the memory target copies host blocks to host blocks: %w", t.Src, t.Dst, ErrBadTransfer)
	}
	if err := e.checkHost(&t.Src, t.Len, "source"); err != nil {
		return err
	}
	if err := e.checkHost(&t.Dst, t.Len, "destination"); err != nil {
		return err
	}
	r.op, r.path, r.done = opMemCopy, uint8(PathMemory), 1
	return nil
}
