package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hcomm-go/hcomm/hugepage"
)

// arenaTable records the pool's arenas by backend slot and the address the
// backend gave each. Alloc reads it (under the read lock) to give a block
// its backend address; the pool's growth and release hooks write it.
type arenaTable struct {
	mu   sync.RWMutex
	a    [MaxArenas]*hugepage.Arena
	addr [MaxArenas]uint64
}

// lookup returns the slot and backend address of arena a.
func (t *arenaTable) lookup(a *hugepage.Arena) (slot int, addr uint64, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for i := range t.a {
		if t.a[i] == a {
			return i, t.addr[i], true
		}
	}
	return 0, 0, false
}

// mapArena maps arena a into the backend (the first arena at Open; later
// ones from the pool's growth hook, before any of their blocks is handed
// out). It holds the owner flag: MapArena never runs beside Forward or Reap.
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
		return fmt.Errorf("engine: map a %d-byte arena into the %s backend: at most %d arenas: %w",
			a.Len(), e.desc.Name, MaxArenas, ErrNotSupported)
	}
	e.lock()
	addr, err := e.be.MapArena(slot, a)
	e.unlock()
	if err != nil {
		return fmt.Errorf("engine: map a %d-byte arena (%v) into the %s backend: %w", a.Len(), a.Backing(), e.desc.Name, err)
	}
	e.arenas.a[slot], e.arenas.addr[slot] = a, addr
	if slot > 0 {
		e.log.Debug("engine: pool grew", "arena", slot, "bytes", a.Len(), "backend", e.desc.Name)
	}
	return nil
}

// unmapArena takes an idle arena out of the backend (the pool's release
// hook: the arena holds no live block).
func (e *Engine) unmapArena(a *hugepage.Arena) {
	e.arenas.mu.Lock()
	defer e.arenas.mu.Unlock()
	for i := range e.arenas.a {
		if e.arenas.a[i] != a {
			continue
		}
		e.lock()
		err := e.be.UnmapArena(i)
		e.unlock()
		if err != nil {
			e.log.Warn("engine: unmap an idle arena from the backend", "arena", i, "backend", e.desc.Name, "err", err)
		}
		e.arenas.a[i], e.arenas.addr[i] = nil, 0
		return
	}
}

// unmapArenas takes every arena out of the backend (Close, failed Open).
func (e *Engine) unmapArenas() error {
	e.arenas.mu.Lock()
	defer e.arenas.mu.Unlock()
	var errs []error
	for i := range e.arenas.a {
		if e.arenas.a[i] == nil {
			continue
		}
		if err := e.be.UnmapArena(i); err != nil {
			errs = append(errs, fmt.Errorf("engine: unmap arena %d from the %s backend: %w", i, e.desc.Name, err))
		}
		e.arenas.a[i], e.arenas.addr[i] = nil, 0
	}
	return errors.Join(errs...)
}

// Backing says what memory the pool's first arena got (hugetlb 2 MiB,
// THP, 4 KiB pages...); Fallbacks says why, when it is not the first
// preference.
func (e *Engine) Backing() hugepage.Backing { return e.backing }
