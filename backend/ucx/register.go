package ucx

/*
#include "hc.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/hcomm-go/hcomm/backend"
)

// RegisterRegions registers memory regions with UCX in one call, into the
// backend's registration cache: the regions are sorted, adjacent or
// overlapping ones merged into runs, and each run is registered once
// (ucp_mem_map) unless registrations already in the cache hold each of
// its regions. Later registrations of memory the cache holds — MapArena
// of an arena inside a registered run (the engine's Register, a pool
// arena), or RegisterRegions again — take a reference: no UCX call and no
// system call. Each region holds one reference until UnregisterRegions; a
// registration is unmapped (ucp_mem_unmap) with its last reference. All
// or nothing: on an error nothing is registered.
//
// Runs that lie close together in one mapping of the process are
// registered as one covering range, the gaps between them included, when
// each gap is at most Config.RegisterGap and the gaps together at most an
// eighth of the runs' bytes (docs/remote.md, "Covering registrations"):
// one ucp_mem_map instead of one per run. The gaps are then registered
// too (pinned over RDMA, and reachable with the registration's key), but
// the cache holds only the runs: a later registration of memory in a gap
// is one of its own. A cover UCX refuses is registered run by run
// instead, and the refusal is kept (RegistrationFallbacks).
//
// An arena exported from a cached registration is exported with the
// registration's remote key: on RDMA a peer's key covers the whole
// registered run, not only the arena (docs/remote.md, Security). Without
// SharedMemory only: with it, exported arenas become UCX-allocated
// segments of their own.
func (b *Backend) RegisterRegions(regions [][]byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errBackendClosed
	}
	addrs, lens, err := b.spans(regions)
	if err != nil {
		return err
	}
	if st := C.hc_reg_batch(b.be, ptr64(addrs), ptr64(lens), C.uint32_t(len(regions))); st != 0 {
		return fmt.Errorf("ucx: register %d regions: %s: %w", len(regions), ucsString(st), ErrUCX)
	}
	return nil
}

// UnregisterRegions drops the references RegisterRegions took for regions
// (the same slices, or the same address ranges). Each reference is dropped
// from the registration it was taken on, also where cached registrations
// overlap: RegisterRegions takes it on the oldest cached registration
// that holds the region (a new one only when none does), and the release
// finds that same one (docs/remote.md, "What a release refers to"). A
// region no registration holds is an error (ErrBadConfig); the others are
// released all the same.
func (b *Backend) UnregisterRegions(regions [][]byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errBackendClosed
	}
	addrs, lens, err := b.spans(regions)
	if err != nil {
		return err
	}
	if n := C.hc_reg_release(b.be, ptr64(addrs), ptr64(lens), C.uint32_t(len(regions))); n != 0 {
		return fmt.Errorf("ucx: unregister: %d of %d regions were not registered: %w", n, len(regions), backend.ErrBadConfig)
	}
	return nil
}

// RegistrationStats says how many ucp_mem_map calls the cache made and how
// many registrations it answered from what it held.
func (b *Backend) RegistrationStats() (maps, hits uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, 0
	}
	return uint64(b.be.nreg_maps), uint64(b.be.nreg_hits)
}

// CoverStats counts the covering registrations RegisterRegions made
// since New.
type CoverStats struct {
	Covers   uint64 // covering registrations (each one ucp_mem_map, in RegistrationStats' maps too)
	Gaps     uint64 // gaps they bridged
	GapBytes uint64 // bytes of those gaps: registered though no region asked for them
	Refused  uint64 // covers not made (RegistrationFallbacks says why): their runs were registered one by one
}

// RegistrationCovers says what covering registrations RegisterRegions
// made (CoverStats).
func (b *Backend) RegistrationCovers() CoverStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return CoverStats{}
	}
	return CoverStats{
		Covers:   uint64(b.be.ncovers),
		Gaps:     uint64(b.be.ncover_gaps),
		GapBytes: uint64(b.be.ncover_gapbytes),
		Refused:  uint64(b.be.refusal_n),
	}
}

// RegistrationFallbacks says why the most recent covering registrations
// (up to 8, oldest first) were not made: UCX refused the range (the error
// wraps ErrUCX and names UCX's status), or the process's mappings could
// not be read (it wraps the system error). Their regions were registered
// run by run instead, as without covers.
func (b *Backend) RegistrationFallbacks() []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	n := uint64(b.be.refusal_n)
	first := uint64(0)
	if n > C.HC_REFUSALS {
		first = n - C.HC_REFUSALS
	}
	var errs []error
	for i := first; i < n; i++ {
		f := b.be.refusals[i%C.HC_REFUSALS]
		if f.len == 0 {
			errs = append(errs, fmt.Errorf("ucx: covering registration: read /proc/self/maps: %w", syscall.Errno(f.errnum)))
			continue
		}
		errs = append(errs, fmt.Errorf("ucx: covering registration %#x+%d of %d runs refused (registered run by run): %s: %w",
			uint64(f.addr), uint64(f.len), uint32(f.runs), ucsString(C.int(f.status)), ErrUCX))
	}
	return errs
}

// refuseCovers makes every covering registration fail before UCX sees
// it, as a refused pin would (tests: the fallback run by run).
func (b *Backend) refuseCovers(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.be.reg_refuse = 0
	if on {
		b.be.reg_refuse = 1
	}
}

// RegisterUncached registers mem with UCX directly — one ucp_mem_map and
// one ucp_rkey_pack on the backend's context — outside the registration
// cache: nothing cached answers it, and later registrations do not find
// it. These are the calls a program using UCX itself makes to export
// memory; hcomm-bench's grow scenario sets them beside the engine's
// MapArena as the bare side. release unregisters (ucp_rkey_buffer_release,
// ucp_mem_unmap); Close releases what is still registered, and a release
// after Close does nothing. A second release is ErrBadConfig.
func (b *Backend) RegisterUncached(mem []byte) (release func() error, err error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("ucx: register uncached: empty memory: %w", backend.ErrBadConfig)
	}
	addr := uint64(uintptr(unsafe.Pointer(&mem[0])))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errBackendClosed
	}
	var st C.ucs_status_t
	r := C.hc_reg_uncached(b.be, C.uint64_t(addr), C.uint64_t(len(mem)), &st)
	if r == nil {
		return nil, fmt.Errorf("ucx: ucp_mem_map %#x+%d: %s: %w", addr, len(mem), ucsString(C.int(st)), ErrUCX)
	}
	if b.uncached == nil {
		b.uncached = map[*C.hc_reg]struct{}{}
	}
	b.uncached[r] = struct{}{}
	return func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.closed {
			return nil
		}
		if _, ok := b.uncached[r]; !ok {
			return fmt.Errorf("ucx: uncached registration %#x+%d released twice: %w", addr, len(mem), backend.ErrBadConfig)
		}
		delete(b.uncached, r)
		C.hc_reg_uncached_free(b.be, r)
		return nil
	}, nil
}

// spans are the regions' addresses and lengths for C, in b's reused
// buffers (one entry more than regions: never empty). Under b.mu.
func (b *Backend) spans(regions [][]byte) (addrs, lens []uint64, err error) {
	if n := len(regions) + 1; cap(b.regAddrs) < n {
		b.regAddrs, b.regLens = make([]uint64, n), make([]uint64, n)
	}
	addrs, lens = b.regAddrs[:len(regions)+1], b.regLens[:len(regions)+1]
	for i, r := range regions {
		if len(r) == 0 {
			return nil, nil, fmt.Errorf("ucx: register: region %d is empty: %w", i, backend.ErrBadConfig)
		}
		addrs[i], lens[i] = uint64(uintptr(unsafe.Pointer(&r[0]))), uint64(len(r))
	}
	return addrs, lens, nil
}

func ptr64(s []uint64) *C.uint64_t { return (*C.uint64_t)(unsafe.Pointer(&s[0])) }

// benchMemMap registers and unregisters n regions of size bytes, stride
// apart from mem's start, with direct ucp_mem_map calls in C: the
// registration benchmarks' yardstick. cold: UCX's own registration cache
// (verbs) forgets them after each round (hc_bench_mem_map).
func (b *Backend) benchMemMap(mem []byte, size, stride uint64, n int, cold bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := C.int(0)
	if cold {
		c = 1
	}
	if st := C.hc_bench_mem_map(b.be, C.uint64_t(uintptr(unsafe.Pointer(&mem[0]))), C.uint64_t(size), C.uint64_t(stride), C.uint32_t(n), c); st != 0 {
		return ucxErr("ucp_mem_map", st)
	}
	return nil
}

// benchRegHits registers and releases mem n times through the cache in one
// call into C, between two marker system calls (TestRegisterNoSyscall).
func (b *Backend) benchRegHits(mem []byte, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := C.hc_bench_reg_hits(b.be, C.uint64_t(uintptr(unsafe.Pointer(&mem[0]))), C.uint64_t(len(mem)), C.uint32_t(n)); st != 0 {
		return ucxErr("registration cache", st)
	}
	return nil
}

// benchRegHitsWindow is benchRegHits between two snapshots of a tracer on
// another thread, synchronised through flag (hc_bench_reg_hits_window);
// probes getppid calls come first. flag must not move (C memory, or
// pinned), as it is written from both sides while C runs.
func (b *Backend) benchRegHitsWindow(mem []byte, n, probes int, flag *uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := C.hc_bench_reg_hits_window(b.be, C.uint64_t(uintptr(unsafe.Pointer(&mem[0]))), C.uint64_t(len(mem)), C.uint32_t(n), C.uint32_t(probes), (*C.uint32_t)(unsafe.Pointer(flag))); st != 0 {
		return ucxErr("registration cache", st)
	}
	return nil
}
