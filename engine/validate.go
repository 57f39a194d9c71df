package engine

import (
	"fmt"
	"math"
	"sync"

	"github.com/hcomm-go/hcomm/backend"
)

// validate checks t and builds its staging entry op (an entry of the
// staging ring: heap memory, see Backend.Prepare): the engine checks the
// host ends (live block of this engine, bounds) and the Loc kinds the
// backend accepts; the backend checks the rest and fills in op. No system
// call; it allocates only on error.
//
// The fast path resolves each end into plain values and builds the two
// Endpoints as literals in Prepare's argument slots: a backend.Endpoint built
// field by field in a local and then copied to the arguments (16-byte
// loads of 8- and 1-byte stores still in the store buffer) stalled on
// store forwarding, ~3 ns a transfer. Anything refused goes to the slow
// path (endpoint), which says why.
func (e *Engine) validate(t *Transfer, ent *entry) error {
	s, d := &t.Src, &t.Dst
	// The backend: the one the non-host end names (or the only one that
	// serves its kind), host → host's otherwise.
	m := e.pick(s, d)
	n := t.Len
	if m == nil {
		if n <= 0 || n > math.MaxUint32 {
			return e.badLen(t, nil)
		}
		return e.routeErr(*t)
	}
	if n <= 0 || n > math.MaxUint32 || m.desc.MaxTransfer != 0 && uint64(n) > uint64(m.desc.MaxTransfer) {
		return e.badLen(t, m)
	}
	// The destination first, into a local that Prepare's call copies to
	// its stack argument: built early, its stores have left the store
	// buffer by the time the copy (16-byte loads) reads them. Built just
	// before the call, the copy stalled on store forwarding (~4 ns).
	dst := backend.Endpoint{Kind: d.kind, Off: d.off, Peer: d.obj, File: d.obj}
	if d.kind == LocHost {
		// A live block of this engine (one atomic load of its
		// generation, no lock) and n bytes of it from d.off.
		if db := &d.b; db.e != e || !e.blocks.live(db.idx, db.gen) || d.off > uint64(db.hb.Len()) || uint64(n) > uint64(db.hb.Len())-d.off {
			return e.badEnd(m, d, n, "destination")
		}
		off := uint64(d.b.hb.Offset()) + d.off
		dst.Off, dst.Addr, dst.Arena = off, m.addr[d.b.arena].Load()+off, int(d.b.arena)
	} else if m.desc.Locs&(1<<d.kind) == 0 {
		return e.badEnd(m, d, n, "destination")
	}
	sOff := s.off
	var sAddr uint64
	var sArena int
	if s.kind == LocHost {
		if sb := &s.b; sb.e != e || !e.blocks.live(sb.idx, sb.gen) || s.off > uint64(sb.hb.Len()) || uint64(n) > uint64(sb.hb.Len())-s.off {
			return e.badEnd(m, s, n, "source")
		}
		sOff = uint64(s.b.hb.Offset()) + s.off
		sAddr, sArena = m.addr[s.b.arena].Load()+sOff, int(s.b.arena)
	} else if m.desc.Locs&(1<<s.kind) == 0 {
		return e.badEnd(m, s, n, "source")
	}
	*ent = entry{be: m.idx}
	op := &ent.op
	// src travels in registers (Go's register ABI), dst on the stack.
	if err := m.be.Prepare(backend.Endpoint{Kind: s.kind, Off: sOff, Addr: sAddr, Arena: sArena, Peer: s.obj, File: s.obj}, dst, uint32(n), op); err != nil {
		return err
	}
	op.Len = uint32(n)
	if op.Inline {
		ent.done = opDone
	}
	return nil
}

// badLen is validate's error for a length out of range.
func (e *Engine) badLen(t *Transfer, m *member) error {
	if t.Len <= 0 || t.Len > math.MaxUint32 || m == nil {
		return fmt.Errorf("engine: transfer %v → %v of %d bytes: length must be 1..%d: %w", t.Src, t.Dst, t.Len, uint32(math.MaxUint32), ErrBadTransfer)
	}
	return fmt.Errorf("engine: %v → %v: %d bytes, the %s backend moves at most %d per transfer: %w", t.Src, t.Dst, t.Len, m.desc.Name, m.desc.MaxTransfer, ErrOutOfBounds)
}

// badEnd is validate's error for an end the fast path refused.
func (e *Engine) badEnd(m *member, l *Loc, n int, what string) error {
	var ep backend.Endpoint
	if err := e.endpoint(m, l, n, what, &ep); err != nil {
		return err
	}
	return fmt.Errorf("engine: %s %v: refused: %w", what, *l, ErrBadTransfer) // unreachable: endpoint and the fast path agree
}

// endpoint resolves l for the backend. A host Loc must name n live bytes of
// one of this engine's blocks: one atomic load of the block's generation,
// no lock.
func (e *Engine) endpoint(m *member, l *Loc, n int, what string, ep *backend.Endpoint) error {
	ep.Kind, ep.Off, ep.Peer, ep.File = l.kind, l.off, l.obj, l.obj
	switch {
	case l.kind == LocNone:
		return fmt.Errorf("engine: %s is the zero Loc: build it with Host, HostAt, DeviceAt, FileAt or Remote: %w", what, ErrBadTransfer)
	case l.kind != LocHost:
		if m.desc.Locs&(1<<l.kind) == 0 {
			return fmt.Errorf("engine: %s %v: the %s backend moves no %v bytes: %w", what, *l, m.desc.Name, l.kind, ErrBadTransfer)
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
	ep.Addr = m.addr[b.arena].Load() + ep.Off
	ep.Arena = int(b.arena)
	return nil
}

// Check validates t as Submit would — its ends, their backend, the
// backend's own rules (bounds, alignment, a peer's window) — without
// submitting it: a caller that must refuse a whole batch before any of it
// starts checks each transfer first. It allocates nothing when t is valid.
func (e *Engine) Check(t Transfer) error {
	ent := checkEntries.Get().(*entry)
	err := e.validate(&t, ent)
	*ent = entry{}
	checkEntries.Put(ent)
	return err
}

// checkEntries are Check's scratch staging entries (heap memory, as the
// ring's: Prepare takes a pointer to one).
var checkEntries = sync.Pool{New: func() any { return new(entry) }}
