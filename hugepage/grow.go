package hugepage

import (
	"fmt"
	"slices"
	"time"
)

// Growth and release: the pool adds an arena when no arena has room and
// MaxSize allows (OnGrow sees it before its first block is handed out), and
// closes an added arena that holds no live block after IdleRelease or on
// Trim (OnRelease sees it first). The first arena stays until Close.

// addArena puts a mapped arena under the pool's allocators.
func (p *Pool) addArena(a *Arena) *poolArena {
	units := uint32(a.Len() >> unitShift)
	ar := &poolArena{a: a, pool: p, t: newTLSF(a.Addr(), units), own: make([]uint32, units)}
	p.arenas = append(p.arenas, ar)
	p.total += int64(a.Len())
	return ar
}

// grow maps and adds an arena that can hold need bytes.
func (p *Pool) grow(need int64) (*poolArena, error) {
	if p.cfg.MaxSize <= p.total {
		return nil, fmt.Errorf("%w: %d bytes in use of %d and the pool may not grow (MaxSize %d)", ErrPoolExhausted, p.inUse, p.total, p.cfg.MaxSize)
	}
	size := max(p.growBy, need)
	if p.total+size > p.cfg.MaxSize {
		return nil, fmt.Errorf("%w: growing by %d bytes would exceed MaxSize %d (%d mapped)", ErrPoolExhausted, size, p.cfg.MaxSize, p.total)
	}
	ac := p.cfg.Arena
	ac.Size = int(size)
	a, err := newArena(ac)
	if err != nil {
		return nil, fmt.Errorf("grow by %d bytes: %w", size, err)
	}
	if p.total+int64(a.Len()) > p.cfg.MaxSize {
		a.Close()
		return nil, fmt.Errorf("%w: an arena of %d bytes (rounded to its pages) would exceed MaxSize %d", ErrPoolExhausted, a.Len(), p.cfg.MaxSize)
	}
	if p.cfg.OnGrow != nil {
		if err := p.cfg.OnGrow(a); err != nil {
			a.Close()
			return nil, fmt.Errorf("%w: OnGrow refused a new %s arena of %d bytes: %w", ErrPoolExhausted, a.Backing(), a.Len(), err)
		}
	}
	p.grows++
	p.logArena("pool grew by an arena", a)
	return p.addArena(a), nil
}

// blockTaken counts a block handed out from ar; the first one stops the
// arena's idle-release timer.
func (p *Pool) blockTaken(ar *poolArena) {
	if ar.live == 0 {
		p.cancelIdle(ar)
	}
	ar.live++
}

// blockFreed counts a block of ar freed; when it was the last one of an
// added arena, the idle-release timer starts.
func (p *Pool) blockFreed(ar *poolArena) {
	ar.live--
	if ar.live == 0 && !ar.first && p.cfg.IdleRelease > 0 {
		p.armIdle(ar)
	}
}

// armIdle starts (or restarts) the idle-release timer of an added arena
// whose last block was just freed. p.timers counts every callback that is
// scheduled or running, so that Close can wait for them.
func (p *Pool) armIdle(ar *poolArena) {
	ar.idleAt = time.Now()
	if ar.idle == nil {
		p.timers.Add(1)
		ar.idle = time.AfterFunc(p.cfg.IdleRelease, func() { p.idleExpired(ar) })
		return
	}
	if !ar.idle.Reset(p.cfg.IdleRelease) { // the previous callback had started: a new one is scheduled
		p.timers.Add(1)
	}
}

// cancelIdle stops the idle-release timer of an arena that gets a block
// again. A callback already started finds the arena busy and does nothing.
func (p *Pool) cancelIdle(ar *poolArena) {
	if ar.idle != nil && ar.idle.Stop() {
		p.timers.Done()
	}
}

// idleExpired is the idle-release timer's callback: it re-checks, under the
// lock, that the arena is still idle and has been for IdleRelease.
func (p *Pool) idleExpired(ar *poolArena) {
	defer p.timers.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || ar.dead.Load() || ar.live != 0 {
		return
	}
	if rest := p.cfg.IdleRelease - time.Since(ar.idleAt); rest > 0 {
		if !ar.idle.Reset(rest) {
			p.timers.Add(1)
		}
		return
	}
	p.releaseArena(ar)
}

// releaseArena closes an added arena that holds no live block.
func (p *Pool) releaseArena(ar *poolArena) {
	p.cancelIdle(ar)
	p.releaseSlabs(ar)
	if p.cfg.OnRelease != nil {
		p.cfg.OnRelease(ar.a)
	}
	ar.dead.Store(true)
	if err := ar.a.Close(); err != nil && p.log != nil {
		p.log.Warn("closing idle pool arena", "err", err)
	}
	if i := slices.Index(p.arenas, ar); i >= 0 {
		p.arenas = slices.Delete(p.arenas, i, i+1)
	}
	p.total -= int64(ar.a.Len())
	p.releases++
	if p.log != nil {
		p.log.Info("pool released an idle arena", "bytes", ar.a.Len())
	}
}

// Trim closes every added arena (never the first) that holds no live block,
// calling OnRelease for each, and returns how many it closed.
func (p *Pool) Trim() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	n := 0
	for _, ar := range slices.Clone(p.arenas) {
		if ar.live == 0 && !ar.first {
			p.releaseArena(ar)
			n++
		}
	}
	return n
}
