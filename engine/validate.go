package engine

import (
	"fmt"
	"math"
)

// validate checks t and builds its staging entry op (an entry of the
// staging ring: heap memory, see Backend.Prepare): the engine checks the
// host ends (live block of this engine, bounds) and the Loc kinds the
// backend accepts; the backend checks the rest and fills in op. No system
// call; it allocates only on error.
func (e *Engine) validate(t *Transfer, op *Op) error {
	if t.Len <= 0 || t.Len > math.MaxUint32 {
		return fmt.Errorf("engine: transfer %v → %v of %d bytes: length must be 1..%d: %w", t.Src, t.Dst, t.Len, uint32(math.MaxUint32), ErrBadTransfer)
	}
	if max := e.desc.MaxTransfer; max != 0 && uint64(t.Len) > uint64(max) {
		return fmt.Errorf("engine: %v → %v: %d bytes, the %s backend moves at most %d per transfer: %w", t.Src, t.Dst, t.Len, e.desc.Name, max, ErrOutOfBounds)
	}
	var src, dst Endpoint
	if err := e.endpoint(&t.Src, t.Len, "source", &src); err != nil {
		return err
	}
	if err := e.endpoint(&t.Dst, t.Len, "destination", &dst); err != nil {
		return err
	}
	*op = Op{}
	if err := e.be.Prepare(src, dst, uint32(t.Len), op); err != nil {
		return err
	}
	op.Len = uint32(t.Len)
	if op.Inline {
		op.done = opDone
	}
	return nil
}

// endpoint resolves l for the backend. A host Loc must name n live bytes of
// one of this engine's blocks: one atomic load of the block's generation,
// no lock.
func (e *Engine) endpoint(l *Loc, n int, what string, ep *Endpoint) error {
	ep.Kind, ep.Off, ep.Peer = l.kind, l.off, l.peer
	switch {
	case l.kind == LocNone:
		return fmt.Errorf("engine: %s is the zero Loc: build it with Host, HostAt, DeviceAt, FileAt or Remote: %w", what, ErrBadTransfer)
	case l.kind != LocHost:
		if e.desc.Locs&(1<<l.kind) == 0 {
			return fmt.Errorf("engine: %s %v: the %s backend moves no %v bytes: %w", what, *l, e.desc.Name, l.kind, ErrBadTransfer)
		}
		return nil
	}
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
	ep.Off = uint64(b.hb.Offset()) + l.off
	ep.Addr = b.addr + l.off
	ep.Arena = int(b.arena)
	return nil
}
