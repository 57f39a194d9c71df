package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hcomm-go/hcomm/hugepage"
)

// arenaTable records the pool's arenas (and Register'ed regions) by slot;
// each backend keeps the address it gave each slot (member.addr). Alloc
// reads it (under the read lock); the pool's growth and release hooks,
// Register and AddBackend write it.
type arenaTable struct {
	mu sync.RWMutex
	a  [MaxArenas]*hugepage.Arena
}

// lookup returns the slot of arena a.
func (t *arenaTable) lookup(a *hugepage.Arena) (slot int, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for i := range t.a {
		if t.a[i] == a {
			return i, true
		}
	}
	return 0, false
}

// mapArena maps arena a into every backend, all or nothing (the first
// arena at Open; later ones from the pool's growth hook, before any of
// their blocks is handed out; Register's regions). Each MapArena runs
// under the owner flag: never beside Forward or Reap.
func (e *Engine) mapArena(a *hugepage.Arena) error {
	e.arenas.mu.Lock()
	defer e.arenas.mu.Unlock()
	slot := -1
	for i := range e.arenas.a {
		if e.arenas.a[i] == nil {
			slot = i
			break
		}
	}
	if slot < 0 {
		return fmt.Errorf("engine: map a %d-byte arena: at most %d arenas: %w", a.Len(), MaxArenas, ErrNotSupported)
	}
	var done []*member
	var err error
	e.forEach(func(m *member) {
		if err != nil {
			return
		}
		e.lock()
		addr, merr := m.be.MapArena(slot, a)
		e.unlock()
		if merr != nil {
			err = fmt.Errorf("engine: map a %d-byte arena (%v) into the %s backend: %w", a.Len(), a.Backing(), m.desc.Name, merr)
			return
		}
		m.addr[slot].Store(addr)
		m.mapped |= 1 << slot
		done = append(done, m)
	})
	if err != nil {
		for _, m := range done {
			e.lock()
			uerr := m.be.UnmapArena(slot)
			e.unlock()
			if uerr != nil {
				e.log.Warn("engine: undo an arena's mapping", "arena", slot, "backend", m.desc.Name, "err", uerr)
			}
			m.addr[slot].Store(0)
			m.mapped &^= 1 << slot
		}
		return err
	}
	e.arenas.a[slot] = a
	if slot > 0 {
		e.log.Debug("engine: pool grew", "arena", slot, "bytes", a.Len(), "backends", e.memberNames())
	}
	return nil
}

// mapAllInto maps every arena into m, a backend being added, all or
// nothing. It holds the arena table's lock: the pool neither grows nor
// releases meanwhile.
func (e *Engine) mapAllInto(m *member) error {
	var done []int
	for slot, a := range e.arenas.a {
		if a == nil {
			continue
		}
		addr, err := m.be.MapArena(slot, a)
		if err != nil {
			for _, s := range done {
				_ = m.be.UnmapArena(s)
			}
			return fmt.Errorf("engine: add the %s backend: map arena %d (%d bytes): %w", m.desc.Name, slot, a.Len(), err)
		}
		m.addr[slot].Store(addr)
		done = append(done, slot)
	}
	return nil
}

// unmapArena takes an idle arena out of every backend (the pool's release
// hook: the arena holds no live block; Unregister).
func (e *Engine) unmapArena(a *hugepage.Arena) {
	e.arenas.mu.Lock()
	defer e.arenas.mu.Unlock()
	for i := range e.arenas.a {
		if e.arenas.a[i] != a {
			continue
		}
		e.forEach(func(m *member) {
			e.lock()
			err := m.be.UnmapArena(i)
			e.unlock()
			if err != nil {
				e.log.Warn("engine: unmap an idle arena from the backend", "arena", i, "backend", m.desc.Name, "err", err)
			}
			m.addr[i].Store(0)
			m.mapped &^= 1 << i
		})
		e.arenas.a[i] = nil
		return
	}
}

// unmapArenas takes every arena out of every backend (Close, failed Open).
func (e *Engine) unmapArenas() error {
	e.arenas.mu.Lock()
	defer e.arenas.mu.Unlock()
	var errs []error
	for i := range e.arenas.a {
		if e.arenas.a[i] == nil {
			continue
		}
		e.forEach(func(m *member) {
			if err := m.be.UnmapArena(i); err != nil {
				errs = append(errs, fmt.Errorf("engine: unmap arena %d from the %s backend: %w", i, m.desc.Name, err))
			}
			m.addr[i].Store(0)
			m.mapped &^= 1 << i
		})
		e.arenas.a[i] = nil
	}
	return errors.Join(errs...)
}

// Backing says what memory the pool's first arena got (hugetlb 2 MiB,
// THP, 4 KiB pages...); Fallbacks says why, when it is not the first
// preference.
func (e *Engine) Backing() hugepage.Backing { return e.backing }
