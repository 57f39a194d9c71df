// Package memory is the engine backend that copies host blocks to host
// blocks: the submitter performs the copy (memmove) itself, so a transfer
// costs what the copy costs, the bandwidth ceiling every other backend is
// measured against. Completions still go through the engine's reaper, so
// callbacks, Wait and the hooks behave as for every backend.
//
//	eng, err := engine.Open(engine.Config{Backend: memory.New()})
package memory

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// Backend copies between host blocks. Create it with New.
type Backend struct {
	attached atomic.Bool
	// arenas are the pool's arenas by slot. MapArena writes a slot before
	// the engine hands out any block of it; Execute reads it.
	arenas [engine.MaxArenas][]byte
}

var _ engine.Backend = (*Backend)(nil)

// New returns a memory backend for one engine.
func New() *Backend { return &Backend{} }

// slotShift places the arena slot above every offset in an arena (arenas
// are at most 1 TiB): a host end's address is slot<<slotShift | offset.
const slotShift = 40

// Describe implements engine.Backend.
func (b *Backend) Describe() engine.Description {
	return engine.Description{Name: "memory", Device: "host memory", Align: 1, CPUThreshold: -1}
}

// Attach implements engine.Backend.
func (b *Backend) Attach(engine.Env) error {
	if !b.attached.CompareAndSwap(false, true) {
		return errors.New("memory: backend already attached to an engine")
	}
	return nil
}

// MapArena implements engine.Backend: nothing to map, the address encodes
// the slot.
func (b *Backend) MapArena(slot int, a *hugepage.Arena) (uint64, error) {
	b.arenas[slot] = a.Bytes()
	return uint64(slot) << slotShift, nil
}

// UnmapArena implements engine.Backend.
func (b *Backend) UnmapArena(slot int) error {
	b.arenas[slot] = nil
	return nil
}

// Prepare implements engine.Backend: host to host only, carried out inline.
func (b *Backend) Prepare(src, dst engine.Endpoint, n uint32, op *engine.Op) error {
	if src.Kind != engine.LocHost || dst.Kind != engine.LocHost {
		return fmt.Errorf("memory: %v → %v: the memory backend copies host blocks to host blocks: %w", src.Kind, dst.Kind, engine.ErrBadTransfer)
	}
	op.Path, op.Inline = engine.PathMemory, true
	op.Src, op.Dst = src.Addr, dst.Addr
	return nil
}

// Execute implements engine.Backend: one copy.
func (b *Backend) Execute(op *engine.Op) (uint32, engine.Status) {
	src, dst := b.bytes(op.Src, op.Len), b.bytes(op.Dst, op.Len)
	if src == nil || dst == nil {
		return 0, engine.StatusCanceled // the arena is gone (engine closed)
	}
	return uint32(copy(dst, src)), engine.StatusOK
}

func (b *Backend) bytes(addr uint64, n uint32) []byte {
	mem := b.arenas[addr>>slotShift&(engine.MaxArenas-1)]
	off := addr & (1<<slotShift - 1)
	if off+uint64(n) > uint64(len(mem)) {
		return nil
	}
	return mem[off : off+uint64(n)]
}

// Forward implements engine.Backend; nothing is ever forwarded.
func (b *Backend) Forward(uint64, *engine.Op, bool) bool { return false }

// Flush implements engine.Backend.
func (b *Backend) Flush() {}

// Reap implements engine.Backend.
func (b *Backend) Reap([]engine.Completion) int { return 0 }

// Check implements engine.Backend.
func (b *Backend) Check() {}

// Outstanding implements engine.Backend.
func (b *Backend) Outstanding() int { return 0 }

// ReadyFD implements engine.Backend: nothing completes asynchronously.
func (b *Backend) ReadyFD() (int, bool) { return -1, false }

// Cancel implements engine.Backend.
func (b *Backend) Cancel([]engine.Completion) int { return 0 }

// Close implements engine.Backend.
func (b *Backend) Close() error { return nil }

// Err implements engine.Backend: the memory backend has no statuses of its
// own.
func (b *Backend) Err(engine.Status) error { return nil }
