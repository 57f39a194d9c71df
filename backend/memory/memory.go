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

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/hugepage"
)

// Backend copies between host blocks. Create it with New.
type Backend struct {
	attached atomic.Bool
	// arenas are the pool's arenas by slot. MapArena writes a slot before
	// the engine hands out any block of it; Execute reads it.
	arenas [backend.MaxArenas][]byte
}

var _ backend.Backend = (*Backend)(nil)

// New returns a memory backend for one engine.
func New() *Backend { return &Backend{} }

// slotShift places the arena slot above every offset in an arena (arenas
// are at most 1 TiB): a host end's address is slot<<slotShift | offset.
const slotShift = 40

// Describe implements backend.Backend.
func (b *Backend) Describe() backend.Description {
	return backend.Description{Name: "memory", Device: "host memory", Locs: 1 << backend.LocHost, Align: 1, CPUThreshold: -1}
}

// Attach implements backend.Backend.
func (b *Backend) Attach(backend.Env) error {
	if !b.attached.CompareAndSwap(false, true) {
		return errors.New("memory: backend already attached to an engine")
	}
	return nil
}

// MapArena implements backend.Backend: nothing to map, the address encodes
// the slot.
func (b *Backend) MapArena(slot int, a *hugepage.Arena) (uint64, error) {
	b.arenas[slot] = a.Bytes()
	return uint64(slot) << slotShift, nil
}

// UnmapArena implements backend.Backend.
func (b *Backend) UnmapArena(slot int) error {
	b.arenas[slot] = nil
	return nil
}

// Prepare implements backend.Backend: host to host only, carried out inline.
func (b *Backend) Prepare(src, dst backend.Endpoint, n uint32, op *backend.Op) error {
	if src.Kind != backend.LocHost || dst.Kind != backend.LocHost {
		return fmt.Errorf("memory: %v → %v: the memory backend copies host blocks to host blocks: %w", src.Kind, dst.Kind, backend.ErrBadTransfer)
	}
	op.Path, op.Inline = backend.PathMemory, true
	op.Src, op.Dst = src.Addr, dst.Addr
	return nil
}

// Execute implements backend.Backend: one copy.
func (b *Backend) Execute(op *backend.Op) (uint32, backend.Status) {
	src, dst := b.bytes(op.Src, op.Len), b.bytes(op.Dst, op.Len)
	if src == nil || dst == nil {
		return 0, backend.StatusCanceled // the arena is gone (engine closed)
	}
	return uint32(copy(dst, src)), backend.StatusOK
}

func (b *Backend) bytes(addr uint64, n uint32) []byte {
	mem := b.arenas[addr>>slotShift&(backend.MaxArenas-1)]
	off := addr & (1<<slotShift - 1)
	if off+uint64(n) > uint64(len(mem)) {
		return nil
	}
	return mem[off : off+uint64(n)]
}

// Forward implements backend.Backend; nothing is ever forwarded.
func (b *Backend) Forward(uint64, *backend.Op, bool) bool { return false }

// Flush implements backend.Backend.
func (b *Backend) Flush() {}

// Reap implements backend.Backend.
func (b *Backend) Reap([]backend.Completion) int { return 0 }

// Check implements backend.Backend.
func (b *Backend) Check() {}

// Outstanding implements backend.Backend.
func (b *Backend) Outstanding() int { return 0 }

// ReadyFD implements backend.Backend: nothing completes asynchronously.
func (b *Backend) ReadyFD() (int, bool) { return -1, false }

// Cancel implements backend.Backend.
func (b *Backend) Cancel([]backend.Completion) int { return 0 }

// Close implements backend.Backend.
func (b *Backend) Close() error { return nil }

// Err implements backend.Backend: the memory backend has no statuses of its
// own.
func (b *Backend) Err(backend.Status) error { return nil }
