package engine

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/internal/span"
)

// MaxBackends is the most backends one engine holds at once (Config.Backends
// plus AddBackend).
const MaxBackends = 8

// member is one backend of the engine: the backend, what it said of itself,
// its counters and the address it gave each arena.
type member struct {
	be   backend.Backend
	desc backend.Description
	idx  uint8  // its index in Engine.members
	gen  uint16 // its generation: a Target of an earlier occupant of idx is refused
	// ctr is the backend's Env.Counters (owner flag); transfers and bytes
	// are the engine's count of what it forwarded to it (owner flag).
	ctr              backend.Counters
	transfers, bytes uint64
	// addr[slot] is the backend's address of arena slot's first byte,
	// written before any block of the arena is handed out (or, for a
	// member added later, before the member is published).
	addr   [MaxArenas]atomic.Uint64 // atomic: submitters with blocks of a closed engine read it
	mapped uint64                   // bit slot: arena slot is mapped into it (under the arena table's lock)
	devMem *span.Space              // AllocDevice's ranges (nil: no device memory)
	fd     int                      // ReadyFD (-1: none)
	efd    bool
	// gate switches the backend's completion signal (nil: it cannot);
	// gateFailed: a switch failed, the signal stays on (reaper only).
	gate       backend.InterruptGate
	gateFailed bool
	// removing: RemoveBackend began; submissions to it are refused.
	removing atomic.Bool
}

// Target names one backend of an engine, for the Locs that belong to it
// (its device memory, its files, its peers) and for its description. The
// zero Target names nothing.
type Target struct {
	e   *Engine
	idx uint8 // member index + 1
	gen uint16
}

// DeviceAt names the target's device memory from offset off.
func (t Target) DeviceAt(off uint64) Loc {
	return Loc{kind: LocDevice, be: t.idx, bgen: t.gen, off: off}
}

// FileAt names byte off of the target's first file (file 0).
func (t Target) FileAt(off int64) Loc { return t.File(0, off) }

// File names byte off of the target's file file (a file backend serving
// several: the index its AddFile returned).
func (t Target) File(file uint32, off int64) Loc {
	l := Loc{kind: LocFile, be: t.idx, bgen: t.gen, obj: file, off: uint64(off)}
	if off < 0 {
		l.off = ^uint64(0) // refused by the backend's bounds check
	}
	return l
}

// Remote names byte off of the pool remote peer exported, through the
// target (a backend that reaches other hosts).
func (t Target) Remote(peer uint32, off uint64) Loc {
	return Loc{kind: LocRemote, be: t.idx, bgen: t.gen, obj: peer, off: off}
}

// Describe is the target backend's description (the zero Description for a
// removed or zero Target).
func (t Target) Describe() backend.Description {
	if m := t.member(); m != nil {
		return m.desc
	}
	return backend.Description{}
}

// Backend is the target's backend, for its control plane (a UCX backend's
// Connect, a file backend's AddFile): methods that each backend documents
// as safe beside the engine's use of it. The data-plane methods of the
// contract (Prepare, Forward, Reap, ...) are the engine's alone.
func (t Target) Backend() backend.Backend {
	if m := t.member(); m != nil {
		return m.be
	}
	return nil
}

func (t Target) String() string {
	if m := t.member(); m != nil {
		return fmt.Sprintf("%s backend %d (%s)", m.desc.Name, m.idx, m.desc.Device)
	}
	return "no backend"
}

func (t Target) member() *member {
	if t.e == nil || t.idx == 0 || int(t.idx) > MaxBackends {
		return nil
	}
	m := t.e.members[t.idx-1].Load()
	if m == nil || m.gen != t.gen {
		return nil
	}
	return m
}

// Targets lists the engine's backends in the order they were given (Config
// order, then AddBackend's).
func (e *Engine) Targets() []Target {
	var ts []Target
	for i := range e.members {
		if m := e.members[i].Load(); m != nil {
			ts = append(ts, Target{e: e, idx: m.idx + 1, gen: m.gen})
		}
	}
	return ts
}

// Route table entries (Engine.route, one byte per LocKind): the index of
// the one backend that serves a kind, or one of these.
const (
	routeNone      = 0xff // no backend serves it
	routeAmbiguous = 0xfe // several do: the Loc must name one (Target)
)

// updateRoutes recomputes which backend serves each kind of Loc that names
// none (engine.DeviceAt, FileAt, Remote; host → host). Called with
// Engine.memberMu held, after the members changed.
func (e *Engine) updateRoutes() {
	var r uint64
	n, only := 0, 0
	for i := range e.members {
		if m := e.members[i].Load(); m != nil && !m.removing.Load() {
			n, only = n+1, i
		}
	}
	for k := LocHost; k <= LocRemote; k++ {
		v := uint64(routeNone)
		for i := range e.members {
			m := e.members[i].Load()
			if m == nil || m.removing.Load() || m.desc.Locs&(1<<k) == 0 {
				continue
			}
			if v == routeNone {
				v = uint64(i)
			} else {
				v = routeAmbiguous
			}
		}
		if k == LocHost && v == routeNone && n == 1 {
			// One backend: host → host goes to it, whatever it says
			// of it (its Prepare refuses what it cannot do).
			v = uint64(only)
		}
		r |= v << (8 * k)
	}
	e.route.Store(r)
	if n == 1 {
		e.single.Store(e.members[only].Load())
	} else {
		e.single.Store(nil)
	}
}

// memberFor returns the backend a non-host Loc belongs to, or nil.
func (e *Engine) memberFor(l *Loc) *member {
	if l.be != 0 {
		if int(l.be) > MaxBackends {
			return nil
		}
		m := e.members[l.be-1].Load()
		if m == nil || m.gen != l.bgen || m.removing.Load() {
			return nil
		}
		return m
	}
	i := e.route.Load() >> (8 * l.kind) & 0xff
	if i >= MaxBackends {
		return nil
	}
	return e.members[i].Load()
}

// pick routes a transfer: the backend of its non-host end (both ends, when
// neither is a host block, must belong to the same one), or the host → host
// backend. nil: refused (routeErr says why).
func (e *Engine) pick(s, d *Loc) *member {
	if m := e.single.Load(); m != nil && s.be|d.be == 0 {
		return m // one backend, and the Locs name none: it (its Locs are checked next)
	}
	switch {
	case d.kind != LocHost && s.kind != LocHost:
		m := e.memberFor(d)
		if m == nil || e.memberFor(s) != m {
			return nil
		}
		return m
	case d.kind != LocHost:
		return e.memberFor(d)
	case s.kind != LocHost:
		return e.memberFor(s)
	}
	i := e.route.Load() >> (8 * LocHost) & 0xff
	if i >= MaxBackends {
		return nil
	}
	return e.members[i].Load()
}

// routeErr says why pick refused t (the slow path: it allocates).
func (e *Engine) routeErr(t Transfer) error {
	s, d := &t.Src, &t.Dst
	for _, x := range [2]struct {
		l    *Loc
		what string
	}{{d, "destination"}, {s, "source"}} {
		if x.l.kind == LocNone {
			return fmt.Errorf("engine: %s is the zero Loc: build it with Host, HostAt, DeviceAt, FileAt, Remote or a Target's: %w", x.what, ErrBadTransfer)
		}
	}
	if s.kind != LocHost && d.kind != LocHost {
		ms, md := e.memberFor(s), e.memberFor(d)
		if ms != nil && md != nil && ms != md {
			return fmt.Errorf("engine: %v → %v: the ends belong to two backends (%s, %s): a transfer between backends is a path: use Copy: %w",
				*s, *d, ms.desc.Name, md.desc.Name, ErrBadTransfer)
		}
	}
	for _, l := range [2]*Loc{d, s} {
		if l.kind == LocHost {
			continue
		}
		if err := e.locErr(l); err != nil {
			return fmt.Errorf("engine: %v → %v: %w", *s, *d, err)
		}
	}
	return fmt.Errorf("engine: %v → %v: no backend of this engine moves host memory to host memory (backends: %s): %w",
		*s, *d, e.memberNames(), ErrBadTransfer)
}

// locErr says why a non-host Loc has no backend (nil: it has one).
func (e *Engine) locErr(l *Loc) error {
	if l.be != 0 {
		if e.memberFor(l) == nil {
			return fmt.Errorf("%v names a backend that was removed from the engine (or another engine's Target): %w", *l, ErrBadTransfer)
		}
		return nil
	}
	switch e.route.Load() >> (8 * l.kind) & 0xff {
	case routeNone:
		return fmt.Errorf("no backend of this engine serves %v (backends: %s): %w", l.kind, e.memberNames(), ErrBadTransfer)
	case routeAmbiguous:
		return fmt.Errorf("%v: several backends serve %v (%s): name one with its Target (Engine.Targets, AddBackend): %w", *l, l.kind, e.memberNames(), ErrBadTransfer)
	}
	return nil
}

func (e *Engine) memberNames() string {
	var names []string
	for i := range e.members {
		if m := e.members[i].Load(); m != nil {
			names = append(names, m.desc.Name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// setMember stores m (nil: none) as backend i, and its bit in memberSet.
// Under memberMu (AddBackend and RemoveBackend also hold the owner flag).
func (e *Engine) setMember(i int, m *member) {
	e.members[i].Store(m)
	if m != nil {
		e.memberSet.Or(1 << i)
	} else {
		e.memberSet.And(^uint32(1 << i))
	}
}

// forEach calls f for every backend of the engine.
func (e *Engine) forEach(f func(m *member)) {
	for set := e.memberSet.Load(); set != 0; set &= set - 1 {
		if m := e.members[bits.TrailingZeros32(set)].Load(); m != nil {
			f(m)
		}
	}
}

// outstanding is the transfers forwarded to the backends and not yet
// reaped (owner flag).
func (e *Engine) outstanding() int {
	n := 0
	for set := e.memberSet.Load(); set != 0; set &= set - 1 {
		if m := e.members[bits.TrailingZeros32(set)].Load(); m != nil {
			n += m.be.Outstanding()
		}
	}
	return n
}

// attachMember attaches be as the engine's member idx: its environment,
// its description, its device memory. It does not map arenas.
func (e *Engine) attachMember(be backend.Backend, idx int) (*member, error) {
	e.memberGen[idx]++
	m := &member{be: be, idx: uint8(idx), gen: e.memberGen[idx], fd: -1}
	err := be.Attach(backend.Env{QueueDepth: e.depth, Alignment: e.cfg.Alignment, Counters: &m.ctr, Logger: e.log})
	if err != nil {
		return nil, fmt.Errorf("engine: attach backend %d: %w", idx, err)
	}
	m.desc = be.Describe()
	if m.desc.Align > e.cfg.Alignment && m.desc.Align <= MaxAlignment {
		e.log.Debug("engine: blocks are aligned less than the backend needs", "alignment", e.cfg.Alignment, "backend", m.desc.Name, "needs", m.desc.Align)
	}
	if m.desc.DeviceMemory > 0 {
		grain := uint64(max(e.cfg.Alignment, 64))
		if m.desc.DeviceMemory < grain {
			return nil, fmt.Errorf("engine: the %s backend's device memory is %d bytes, smaller than one device allocation (%d bytes: the larger of Alignment %d and 64): %w",
				m.desc.Name, m.desc.DeviceMemory, grain, e.cfg.Alignment, ErrBadConfig)
		}
		m.devMem = span.New(m.desc.DeviceMemory, grain)
	}
	m.fd, m.efd = be.ReadyFD()
	if m.fd >= 0 {
		m.gate, _ = be.(backend.InterruptGate)
	}
	return m, nil
}

// AddBackend gives the running engine one more backend and returns its
// Target. Every arena of the pool (and every Register'ed region) is mapped
// into it first, all or nothing; the engine owns it from then on (Close,
// RemoveBackend, or a failed AddBackend close it). At most MaxBackends.
// Locs that name no backend (DeviceAt, FileAt, Remote) keep going where
// they went only while one backend serves their kind: add a second device
// and both must be named through their Targets.
func (e *Engine) AddBackend(be backend.Backend) (Target, error) {
	if be == nil {
		return Target{}, fmt.Errorf("engine: add backend: nil: %w", ErrBadConfig)
	}
	e.memberMu.Lock()
	defer e.memberMu.Unlock()
	if e.closing.Load() {
		_ = be.Close()
		return Target{}, errClosedWhile("add backend")
	}
	idx := -1
	for i := range e.members {
		if e.members[i].Load() == nil {
			idx = i
			break
		}
	}
	if idx < 0 {
		_ = be.Close()
		return Target{}, fmt.Errorf("engine: add backend: the engine holds %d already (MaxBackends): %w", MaxBackends, ErrBadConfig)
	}
	m, err := e.attachMember(be, idx)
	if err != nil {
		_ = be.Close()
		return Target{}, err
	}
	if m.desc.Align > e.cfg.Alignment {
		_ = be.Close()
		return Target{}, fmt.Errorf("engine: add the %s backend: it needs %d-byte aligned blocks, the pool's are %d (open the engine with Alignment %d): %w",
			m.desc.Name, m.desc.Align, e.cfg.Alignment, m.desc.Align, ErrBadConfig)
	}
	if err := e.mapAllInto(m); err != nil {
		_ = be.Close()
		return Target{}, err
	}
	e.setMember(idx, m)
	e.updateRoutes()
	e.addFallback(m.desc.Fallbacks...)
	e.membersChanged()
	return Target{e: e, idx: uint8(idx + 1), gen: m.gen}, nil
}

// RemoveBackend takes t's backend out of the engine: submissions to it are
// refused from now on (ErrBadTransfer), the transfers already submitted
// (to every backend: the staging ring is one queue) are waited for until
// ctx ends and then those still in t's backend are canceled (each callback
// once, ErrCanceled), the arenas are unmapped from it and it is closed.
// The other backends go on serving meanwhile.
func (e *Engine) RemoveBackend(ctx context.Context, t Target) error {
	e.memberMu.Lock()
	defer e.memberMu.Unlock()
	m := t.member()
	if t.e != e || m == nil {
		return fmt.Errorf("engine: remove %v: not a backend of this engine: %w", t, ErrBadTransfer)
	}
	if e.closing.Load() {
		return errClosedWhile("remove backend")
	}
	m.removing.Store(true)
	e.updateRoutes()
	e.membersChanged() // the reaper stops watching its fd
	// Every transfer reserved before this point is released in order;
	// those after it were refused (removing is set) or went elsewhere.
	drainErr := e.Drain(ctx)
	// Out of the engine: drains no longer forward to it (what is staged
	// for it completes canceled), cycles no longer reap it.
	e.arenas.mu.Lock()
	e.lock()
	e.setMember(int(m.idx), nil)
	e.retired = append(e.retired, memberTotals{m.desc.Name, m.transfers, m.bytes, m.ctr})
	e.unlock()
	e.arenas.mu.Unlock()
	if m.be.Outstanding() > 0 {
		e.cancelMember(m)
	}
	var errs []error
	for slot := range MaxArenas {
		if m.mapped&(1<<slot) != 0 {
			if err := m.be.UnmapArena(slot); err != nil {
				errs = append(errs, fmt.Errorf("engine: unmap arena %d from the %s backend: %w", slot, m.desc.Name, err))
			}
		}
	}
	m.mapped = 0
	errs = append(errs, m.be.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: remove the %s backend: %w", m.desc.Name, err)
	}
	if drainErr != nil {
		e.log.Info("engine: remove backend canceled its transfers", "backend", m.desc.Name, "reason", drainErr)
	}
	return nil
}

// cancelMember cancels what m still holds (RemoveBackend after its ctx
// ended) and completes it, each callback once, then waits for whatever it
// could not take back.
func (e *Engine) cancelMember(m *member) {
	for {
		// The completion side runs cycles beside us; take the reaping
		// flag so that the canceled completions are delivered once,
		// here (the reaper or a waiter may hold it for a while).
		for i := 0; !e.reaping.CompareAndSwap(0, 1); i++ {
			backoff(i)
		}
		e.lock()
		n := m.be.Cancel(e.batch)
		e.countLocked(e.batch[:n])
		held := m.be.Outstanding()
		e.unlock()
		if n > 0 {
			e.cycling = true
			e.complete(e.batch[:n])
			e.cycling = false
			e.lock()
			e.advanceLocked()
			e.unlock()
			e.notify()
		}
		e.reaping.Store(0)
		if held == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// memberTotals keeps a removed backend's counts for Stats.
type memberTotals struct {
	name             string
	transfers, bytes uint64
	ctr              backend.Counters
}

// membersChanged tells the reaper to rebuild its sleep over the backends'
// readiness fds, and wakes it.
func (e *Engine) membersChanged() {
	e.readyFD.Store(false)
	e.sleepStale.Store(true)
	if e.cfg.Mode == ModeReaper && e.wakeFd >= 0 {
		e.wakeReaper(false)
	}
}

// allReady reports whether every backend has a readiness fd.
func (e *Engine) allReady() bool {
	ok := true
	e.forEach(func(m *member) {
		if m.fd < 0 {
			ok = false
		}
	})
	return ok
}
