package engine

import (
	"context"
	"fmt"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/ring"
)

// Submit stages one transfer and returns its ID without waiting for it. It
// takes no lock, makes no system call and does not allocate: it validates t,
// reserves a staging slot (one CAS), fills it, publishes it (one CAS) and,
// unless another goroutine is already draining the staging ring, drains it
// into the backend with one doorbell (group commit). ErrQueueFull when
// QueueDepth transfers are in flight; SubmitContext waits instead.
//
// The transfer starts at once, with one exception: called while a
// goroutine reaps completions (from a callback, or beside a goroutine in
// Wait, Drain, WaitIdle or Poll), on a backend that defers its doorbell
// (backend/uringfile), it starts when that goroutine goes to wait in the
// backend (in the same system call) or ends its round — microseconds
// later (docs/engine.md, "The deferred doorbell").
func (e *Engine) Submit(t Transfer) (ID, error) {
	b, err := e.stage.Reserve(1)
	if err != nil {
		if e.closing.Load() {
			return 0, errClosedWhile("submit")
		}
		e.queueFull.Add(1)
		return 0, ErrQueueFull
	}
	// Validate straight into the reserved entry (heap memory: the
	// backend's Prepare takes a pointer to it without an allocation). An
	// invalid transfer becomes a no-op, released without a callback.
	pos := b.Start()
	ent := &e.ents[pos&e.mask]
	var id ID
	if err = e.validate(&t, ent); err != nil {
		e.fillNoop(pos)
	} else {
		id, err = e.fill(pos, &t, ent)
	}
	// Release: the entry and its slot are written before this CAS; the
	// drainer's Peek (acquire) sees them.
	_ = e.stage.Commit(b)
	e.kick(1)
	return id, err
}

// fill completes staged entry pos, whose ent (e.ents[pos&mask]) validate
// built: the Go slot (callback, state), executing an Inline transfer on the
// way. After Close began it stages a no-op instead and reports ErrClosed.
func (e *Engine) fill(pos uint64, t *Transfer, ent *entry) (ID, error) {
	s := &e.slots[pos&e.mask]
	// The slot was released by the frontier (its previous transfer done);
	// nobody else touches it until Commit publishes it. Its state keeps
	// showing that previous transfer until this one completes (see
	// lookup): no store here (a locked instruction, ~5 ns).
	// Checked after Reserve: Close sets closing before it looks at the
	// ring, so either Close sees this reservation or we see closing.
	if e.closing.Load() {
		e.fillNoop(pos)
		return 0, errClosedWhile("submit")
	}
	// A slot's callback is nil once it ran (complete, fillNoop), and User
	// reaches nobody without one: nothing to store for a transfer
	// without a callback.
	if t.Callback != nil {
		s.cb, s.user = t.Callback, t.User
	}
	if e.reg.mask.Load() != 0 && !e.holdRegistered(s, t) {
		e.fillNoop(pos)
		return 0, errUnregistering
	}
	if ent.done == opDone {
		// Its backend is there: a RemoveBackend waits for this
		// reservation (Drain) unless its context ended first.
		if m := e.members[ent.be&(MaxBackends-1)].Load(); m != nil {
			n, st := m.be.Execute(&ent.op)
			ent.res = packRes(st, n)
		} else {
			ent.res = packRes(backend.StatusCanceled, 0)
		}
	}
	return e.makeID(pos), nil
}

// fillNoop stages a no-op at pos: it is released without a callback.
func (e *Engine) fillNoop(pos uint64) {
	s := &e.slots[pos&e.mask]
	s.state.Store((pos + 1) << 1)
	s.cb, s.user = nil, 0
	e.ents[pos&e.mask] = entry{done: opNoop, res: packRes(statusNoop, 0)}
}

// SubmitBatch stages ts with one reservation and one doorbell and writes
// their IDs into ids (when ids is not nil it must be as long as ts). It
// returns how many it staged: all of them, or fewer with the error that
// stopped it (ErrQueueFull when the queue filled up; a validation error for
// ts[n]). Batches longer than QueueDepth go in several reservations. The
// transfers start as Submit's do (at once, or within the completion
// round they were submitted in).
func (e *Engine) SubmitBatch(ts []Transfer, ids []ID) (int, error) {
	if ids != nil && len(ids) < len(ts) {
		return 0, fmt.Errorf("engine: submit batch of %d with %d ID slots: %w", len(ts), len(ids), ErrBadTransfer)
	}
	n := 0
	for n < len(ts) {
		k := min(len(ts)-n, e.depth)
		b, err := e.stage.Reserve(k)
		if err != nil {
			if e.closing.Load() {
				return n, errClosedWhile("submit batch")
			}
			free := e.depth - e.stage.Len()
			if free <= 0 {
				e.queueFull.Add(1)
				return n, ErrQueueFull
			}
			if b, err = e.stage.Reserve(min(k, free)); err != nil {
				e.queueFull.Add(1)
				return n, ErrQueueFull
			}
		}
		got, err := e.fillBatch(b, ts[n:n+b.Len()], idsFrom(ids, n))
		_ = e.stage.Commit(b)
		e.kick(b.Len())
		n += got
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func idsFrom(ids []ID, n int) []ID {
	if ids == nil {
		return nil
	}
	return ids[n:]
}

// fillBatch fills a reservation from ts. When ts[i] is invalid, it and the
// rest become no-ops (released without a callback) and i is returned with
// the error.
func (e *Engine) fillBatch(b ring.Batch, ts []Transfer, ids []ID) (int, error) {
	start := b.Start()
	for i := range ts {
		pos := start + uint64(i)
		r := &e.ents[pos&e.mask]
		t := &ts[i]
		err := e.validate(t, r)
		var id ID
		switch {
		case err != nil:
		case !e.closing.Load() && e.reg.mask.Load() == 0 && r.done != opDone:
			// fill's common case, inline (a call per transfer saved):
			// the callback (no state store: see fill).
			if t.Callback != nil {
				s := &e.slots[pos&e.mask]
				s.cb, s.user = t.Callback, t.User
			}
			id = e.makeID(pos)
		default:
			id, err = e.fill(pos, t, r)
		}
		if err != nil {
			for j := i; j < len(ts); j++ {
				e.fillNoop(start + uint64(j))
			}
			if err != nil && i < len(ts) {
				err = fmt.Errorf("engine: batch entry %d: %w", i, err)
			}
			return i, err
		}
		if ids != nil {
			ids[i] = id
		}
	}
	return len(ts), nil
}

// SubmitContext is Submit that waits for room while the queue is full,
// until ctx ends.
func (e *Engine) SubmitContext(ctx context.Context, t Transfer) (ID, error) {
	for {
		seen := e.released.Load()
		id, err := e.Submit(t)
		if err != ErrQueueFull {
			return id, err
		}
		if err := e.waitReleased(ctx, seen+1); err != nil {
			return 0, err
		}
	}
}

// SubmitBatchContext is SubmitBatch that waits for room while the queue is
// full, until ctx ends.
func (e *Engine) SubmitBatchContext(ctx context.Context, ts []Transfer, ids []ID) (int, error) {
	n := 0
	for {
		seen := e.released.Load()
		k, err := e.SubmitBatch(ts[n:], idsFrom(ids, n))
		n += k
		if err != ErrQueueFull {
			return n, err
		}
		if err := e.waitReleased(ctx, seen+1); err != nil {
			return n, err
		}
	}
}
