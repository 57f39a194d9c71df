package main

/*
#include <stdint.h>
#include "hcomm.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/internal/span"
)

// A handle's targets: 0 is hcomm_config_t's, hcomm_add_target adds the
// others (each a backend of the handle's one engine, over its one pool).
// Target k's device addresses are devAddrBase | k<<targetShift | offset.
const (
	maxTargets  = engine.MaxBackends
	targetShift = 52
	devAddrEnd  = devAddrBase + maxTargets<<targetShift
)

var _ = [1]struct{}{}[targetShift-C.HCOMM_TARGET_SHIFT]
var _ = [1]struct{}{}[maxTargets-C.HCOMM_MAX_TARGETS]

// target is one of a handle's targets beyond the first.
type target struct {
	kind      int32
	t         engine.Target
	fileSpace *span.Space // file targets: the "device addresses" handed out
	closeFile func()      // file targets: closes the file after the engine
	maxLen    uint64
}

// targetConfig is hcomm_target_config_t in Go types.
type targetConfig struct {
	Target     int32
	Flags      uint32
	Path       string
	DevMemSize uint64
}

//export hcommgo_add_target
func hcommgo_add_target(h C.hcomm_handle_t, tc *C.hcomm_target_config_t, idx *C.uint32_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	c := targetConfig{Target: int32(tc.target), Flags: uint32(tc.flags), DevMemSize: uint64(tc.dev_mem_size)}
	if tc.target_path != nil {
		c.Path = C.GoString(tc.target_path)
	}
	k, code := s.addTarget(c)
	if code == codeOK && idx != nil {
		*idx = C.uint32_t(k)
	}
	return C.int(code)
}

//export hcommgo_alloc_target
func hcommgo_alloc_target(h C.hcomm_handle_t, k C.uint32_t, size C.size_t, code *C.int) C.uintptr_t {
	s := lookup(uint64(h))
	if s == nil {
		*code = C.int(codeEBADF)
		return 0
	}
	p, c := s.allocTarget(uint32(k), uint64(size))
	*code = C.int(c)
	return C.uintptr_t(p)
}

//export hcommgo_copy
func hcommgo_copy(h C.hcomm_handle_t, dst, src C.uintptr_t, size C.size_t, chunk C.size_t, depth C.uint32_t, cb, ud C.uintptr_t, id *C.uint64_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	cid, code := s.copy(uintptr(dst), uintptr(src), uint64(size), uint64(chunk), uint32(depth), uintptr(cb), uintptr(ud))
	if id != nil {
		*id = C.uint64_t(cid)
	}
	return C.int(code)
}

// addTarget opens one more backend and adds it to the handle's engine.
func (s *state) addTarget(c targetConfig) (uint32, int32) {
	if c.Target == targetRemote {
		return 0, fail(codeEINVAL, "hcomm_add_target: a remote target is a handle's first (hcomm_init)")
	}
	cc := config{Target: c.Target, Flags: c.Flags, Path: c.Path, DevMemSize: c.DevMemSize, Align: uint32(s.eng.Config().Alignment)}
	if code, err := cc.check(); err != nil {
		return 0, fail(code, "hcomm_add_target: %v", err)
	}
	s.targetMu.Lock()
	defer s.targetMu.Unlock()
	k := 0
	for i := 1; i < maxTargets; i++ {
		if s.targets[i].Load() == nil {
			k = i
			break
		}
	}
	if k == 0 {
		return 0, fail(codeEMFILE, "hcomm_add_target: the handle has %d targets (HCOMM_MAX_TARGETS)", maxTargets)
	}
	// newBackend fills the first target's fields of a state: give it a
	// scratch one and take what it opened.
	tmp := &state{log: s.log}
	be, code, err := tmp.newBackend(cc)
	if err != nil {
		tmp.closeFile()
		return 0, fail(code, "hcomm_add_target: %v", err)
	}
	t, err := s.eng.AddBackend(be)
	if err != nil {
		tmp.closeFile()
		return 0, fail(noDevice(codeOf(err)), "hcomm_add_target: %v", err)
	}
	tg := &target{kind: c.Target, t: t, fileSpace: tmp.fileSpace, closeFile: tmp.closeFile, maxLen: math.MaxUint32}
	if ml := t.Describe().MaxTransfer; ml != 0 {
		tg.maxLen = uint64(ml)
	}
	s.targets[k].Store(tg)
	return uint32(k), codeOK
}

// allocTarget returns a device address of n fresh bytes of target k.
func (s *state) allocTarget(k uint32, n uint64) (uintptr, int32) {
	if k == 0 {
		return s.allocDev(n)
	}
	tg := s.targetAt(k)
	switch {
	case tg == nil:
		return 0, fail(codeEINVAL, "hcomm_alloc_target_mem: target %d: the handle has no such target", k)
	case n == 0 || n > maxDevSpace:
		return 0, fail(codeEINVAL, "hcomm_alloc_target_mem: size %d: want 1..%d", n, uint64(maxDevSpace))
	}
	base := devAddrBase | uintptr(k)<<targetShift
	if tg.fileSpace != nil {
		r, ok := tg.fileSpace.Alloc(n)
		if !ok {
			return 0, fail(codeENOMEM, "hcomm_alloc_target_mem(%d, %d): no free range of the file's %d bytes (dev_mem_size) fits", k, n, tg.fileSpace.Size())
		}
		return base + uintptr(r.Off), codeOK
	}
	r, err := tg.t.AllocDevice(n)
	if err != nil {
		return 0, fail(codeOf(err), "hcomm_alloc_target_mem(%d, %d): %v", k, n, err)
	}
	return base + uintptr(r.Off), codeOK
}

// targetAt is target k (1..), or nil.
func (s *state) targetAt(k uint32) *target {
	if k == 0 || k >= maxTargets {
		return nil
	}
	return s.targets[k].Load()
}

// resolveTarget resolves a device address of target k ≥ 1.
func (s *state) resolveTarget(k uint32, off, n uint64) (engine.Loc, int32) {
	tg := s.targetAt(k)
	switch {
	case tg == nil:
		return engine.Loc{}, codeEFAULT
	case tg.fileSpace != nil:
		if !tg.fileSpace.Contains(off, n) {
			return engine.Loc{}, codeEFAULT
		}
		return tg.t.FileAt(int64(off)), codeOK
	case !tg.t.DeviceAllocated(off, n):
		return engine.Loc{}, codeEFAULT
	}
	return tg.t.DeviceAt(off), codeOK
}

// devTarget splits a device address into its target and offset.
func devTarget(p uintptr) (k uint32, off uint64) {
	d := uint64(p - devAddrBase)
	return uint32(d >> targetShift), d & (1<<targetShift - 1)
}

// freeTarget frees a device address of target k ≥ 1.
func (s *state) freeTarget(k uint32, off uint64, p uintptr) int32 {
	tg := s.targetAt(k)
	switch {
	case tg == nil:
		return fail(codeEFAULT, "hcomm_free_dev_mem(%#x): target %d does not exist", p, k)
	case tg.fileSpace != nil:
		if !tg.fileSpace.Free(off) {
			return fail(codeEFAULT, "hcomm_free_dev_mem(%#x): not the start of a live allocation", p)
		}
		return codeOK
	}
	if err := tg.t.FreeDevice(off); err != nil {
		return fail(codeEFAULT, "hcomm_free_dev_mem(%#x): %v", p, err)
	}
	return codeOK
}

// kindOf is the hcomm_target_t of target k (0: the first).
func (s *state) kindOf(k uint32) int32 {
	if k == 0 {
		return s.target
	}
	if tg := s.targetAt(k); tg != nil {
		return tg.kind
	}
	return -1
}

// hasMemoryTarget reports whether host → host has a backend.
func (s *state) hasMemoryTarget() bool {
	for k := uint32(0); k < maxTargets; k++ {
		if s.kindOf(k) == targetMemory {
			return true
		}
	}
	return false
}

// closeTargets closes what the added targets hold beyond their backends
// (files), after the engine.
func (s *state) closeTargets() {
	for k := 1; k < maxTargets; k++ {
		if tg := s.targets[k].Swap(nil); tg != nil && tg.closeFile != nil {
			tg.closeFile()
		}
	}
}

// Copies: hcomm_copy's IDs live beside the engine's transfer IDs. The
// engine never issues an ID with a zero tag (its top 16 bits), so copy IDs
// are a counter below 2^48.
type copyTable struct {
	mu     sync.Mutex
	seq    uint64
	active atomic.Int32 // copies not yet waited for: wait looks here first
	m      map[uint64]*engine.Copy
	wg     sync.WaitGroup // copies whose callback has not returned
}

// maxCopies bounds the copies a handle keeps (running, or done and not yet
// waited for).
const maxCopies = 4096

// copy starts a path copy between two device addresses (of two targets,
// usually): dst and src of size bytes, in chunks of chunk bytes (0: 1 MiB),
// depth in flight (0: 4). cb, if not 0, runs once at the end.
func (s *state) copy(dst, src uintptr, n, chunk uint64, depth uint32, cb, ud uintptr) (uint64, int32) {
	if n == 0 || n > math.MaxInt64 || chunk > 1<<30 || depth > uint32(s.depth) {
		return 0, fail(codeEINVAL, "hcomm_copy(%#x, %#x, %d): size 1..2^63, chunk at most 1 GiB, depth at most queue_depth %d", dst, src, n, s.depth)
	}
	var ends [2]engine.Loc
	for i, p := range [2]uintptr{src, dst} {
		if p < devAddrBase || p >= devAddrEnd {
			return 0, fail(codeEFAULT, "hcomm_copy: %#x is not a device address (both ends of a copy are device memory or file space of a target)", p)
		}
		l, _, code := s.resolve(p, uintptr(n))
		if code != codeOK {
			return 0, fail(code, "hcomm_copy: %#x + %d bytes: not inside one live allocation of a target (hcomm_alloc_dev_mem, hcomm_alloc_target_mem)", p, n)
		}
		ends[i] = l
	}
	s.copies.mu.Lock()
	defer s.copies.mu.Unlock()
	if len(s.copies.m) >= maxCopies {
		return 0, fail(codeEAGAIN, "hcomm_copy: %d copies not yet waited for", maxCopies)
	}
	s.copies.seq++
	id := s.copies.seq
	spec := engine.CopySpec{Src: ends[0], Dst: ends[1], Len: int64(n), Chunk: int(chunk), Depth: int(depth)}
	s.copies.wg.Add(1)
	spec.Callback = func(r engine.CopyResult) {
		defer s.copies.wg.Done()
		if cb != 0 {
			s.invoke(cb, ud, id, codeOf(r.Err))
		}
	}
	c, err := s.eng.Copy(context.Background(), spec)
	if err != nil {
		s.copies.wg.Done()
		return 0, failErr(err)
	}
	if s.copies.m == nil {
		s.copies.m = map[uint64]*engine.Copy{}
	}
	s.copies.m[id] = c
	s.copies.active.Add(1)
	return id, codeOK
}

// waitCopy waits for copy id (ok false: id is no copy of this handle).
func (s *state) waitCopy(ctx context.Context, id uint64) (code int32, ok bool) {
	if s.copies.active.Load() == 0 || id>>48 != 0 {
		return 0, false
	}
	s.copies.mu.Lock()
	c := s.copies.m[id]
	s.copies.mu.Unlock()
	if c == nil {
		return 0, false
	}
	if err := c.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return codeEINPROGRESS, true
		}
		s.forgetCopy(id)
		return failErr(err), true
	}
	s.forgetCopy(id)
	return codeOK, true
}

func (s *state) forgetCopy(id uint64) {
	s.copies.mu.Lock()
	if _, ok := s.copies.m[id]; ok {
		delete(s.copies.m, id)
		s.copies.active.Add(-1)
	}
	s.copies.mu.Unlock()
}

// String names a target for messages.
func (tg *target) String() string { return fmt.Sprintf("target %v", tg.t) }

// maxLenOf is the most bytes a transfer between src and dst may move: the
// limit of the target its device end belongs to.
func (s *state) maxLenOf(src, dst uintptr) uint64 {
	for _, p := range [2]uintptr{src, dst} {
		if p >= devAddrBase && p < devAddrEnd {
			if k, _ := devTarget(p); k != 0 {
				if tg := s.targetAt(k); tg != nil {
					return tg.maxLen
				}
			}
		}
	}
	return s.maxLen
}

// direction refuses, with the reason, a pair of ends no target moves data
// between; the remote target's pairs are checked by the engine.
func (s *state) direction(t *engine.Transfer, src, dst uintptr, sk, dk int, n uintptr) int32 {
	switch {
	case sk == locRemote || dk == locRemote:
		return s.checkRemote(t, src, dst, sk, dk, n)
	case sk == locHost && dk == locHost:
		if !s.hasMemoryTarget() {
			return fail(codeEOPNOTSUPP, "host to host: no target of the handle copies host memory (a device or file target moves data between host and device memory only; add an HCOMM_TARGET_MEMORY target)")
		}
	case sk == locDev && dk == locDev:
		ks, _ := devTarget(src)
		kd, _ := devTarget(dst)
		if ks != kd {
			return fail(codeEOPNOTSUPP, "device address %#x → %#x: two targets (%d, %d): a transfer between targets is a path: use hcomm_copy", src, dst, ks, kd)
		}
		if s.kindOf(ks) == targetFile {
			return fail(codeEOPNOTSUPP, "the file target moves data between host memory and file space only")
		}
	}
	return codeOK
}
