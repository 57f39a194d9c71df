package engine

import (
	"fmt"
)

// DeviceRange is a range of device memory from AllocDevice: [Off, Off+Len).
// Name it in a transfer with DeviceAt(r.Off) (or DeviceAt(r.Off+k) for a
// part of it).
type DeviceRange struct {
	Off, Len uint64
}

// Device memory (backend.Description.DeviceMemory: an HDMA device's BAR2, as much
// of it as is both reported and mapped) is handed out first fit, aligned to
// max(Config.Alignment, 64). Transfers address device memory by offset and
// need no allocation; the allocator is for callers that share device
// memory among users (the C ABI refuses device addresses nobody allocated).

// AllocDevice allocates n bytes of the backend's device memory. It is
// ErrNotSupported when the backend has none and ErrOutOfBounds when no
// free range is large enough.
//
// It allocates from the one backend that DeviceAt names (the only one
// with device memory); with several, use the Target's AllocDevice.
func (e *Engine) AllocDevice(n uint64) (DeviceRange, error) {
	return e.allocDevice(e.deviceMember(), n)
}

// AllocDevice allocates n bytes of the target backend's device memory, as
// Engine.AllocDevice does; name them with t.DeviceAt(r.Off).
func (t Target) AllocDevice(n uint64) (DeviceRange, error) {
	m := t.member()
	if m == nil {
		return DeviceRange{}, fmt.Errorf("engine: alloc %d bytes of device memory of %v: not a backend of the engine: %w", n, t, ErrBadTransfer)
	}
	return t.e.allocDevice(m, n)
}

// deviceMember is the backend DeviceAt names (nil: none, or ambiguous).
func (e *Engine) deviceMember() *member {
	l := Loc{kind: LocDevice}
	return e.memberFor(&l)
}

func (e *Engine) allocDevice(m *member, n uint64) (DeviceRange, error) {
	if e.closing.Load() {
		return DeviceRange{}, fmt.Errorf("engine: alloc %d bytes of device memory: %w", n, ErrClosed)
	}
	if m == nil || m.devMem == nil {
		return DeviceRange{}, fmt.Errorf("engine: alloc %d bytes of device memory: %w", n, e.noDeviceMemory())
	}
	r, ok := m.devMem.Alloc(n)
	if !ok {
		return DeviceRange{}, fmt.Errorf("engine: alloc %d bytes of device memory: no free range of the %s backend's %d bytes fits: %w", n, m.desc.Name, m.devMem.Size(), ErrOutOfBounds)
	}
	return DeviceRange{Off: r.Off, Len: r.Len}, nil
}

// FreeDevice returns the AllocDevice range that starts at off. An offset
// that starts no live range (freed twice, never allocated, inside a range)
// is ErrFreedBlock and changes nothing.
func (e *Engine) FreeDevice(off uint64) error {
	if m := e.deviceMember(); m == nil || m.devMem == nil || !m.devMem.Free(off) {
		return fmt.Errorf("engine: free device memory at %#x: not the start of a live allocation: %w", off, ErrFreedBlock)
	}
	return nil
}

// DeviceAllocated reports whether [off, off+n) lies inside one live
// AllocDevice range (no lock, no allocation: for checks on a submit path).
func (e *Engine) DeviceAllocated(off, n uint64) bool {
	m := e.deviceMember()
	return m != nil && m.devMem != nil && m.devMem.Contains(off, n)
}

// noDeviceMemory says why AllocDevice found no device memory to allocate.
func (e *Engine) noDeviceMemory() error {
	l := Loc{kind: LocDevice}
	if err := e.locErr(&l); err != nil {
		return err
	}
	return fmt.Errorf("the %s backend has none: %w", e.deviceMember().desc.Name, ErrNotSupported)
}

// DeviceAllocated reports whether [off, off+n) lies inside one live
// AllocDevice range of the target backend's device memory.
func (t Target) DeviceAllocated(off, n uint64) bool {
	m := t.member()
	return m != nil && m.devMem != nil && m.devMem.Contains(off, n)
}

// FreeDevice returns the target's AllocDevice range that starts at off.
func (t Target) FreeDevice(off uint64) error {
	if m := t.member(); m == nil || m.devMem == nil || !m.devMem.Free(off) {
		return fmt.Errorf("engine: free device memory at %#x of %v: not the start of a live allocation: %w", off, t, ErrFreedBlock)
	}
	return nil
}
