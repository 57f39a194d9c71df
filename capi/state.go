package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/span"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// Targets (hcomm_target_t).
const (
	targetMock   = 0
	targetFile   = 1
	targetVFIO   = 2
	targetMemory = 3
	targetRemote = 4
)

// remoteShm is HCOMM_REMOTE_SHM (config flags).
const remoteShm = 1

// devAddrBase is HCOMM_DEV_ADDR_BASE: device address = base + offset. It is
// non-canonical on x86-64 (bits 63..47 differ), so no host pointer has it.
const devAddrBase uintptr = 0x4000000000000000

// Defaults of the C configuration that the engine does not have.
const (
	defaultFileSpace = 1 << 30
	maxDevSpace      = 1 << 46 // keeps base+offset below 2^63
)

// config is hcomm_config_t in Go types.
type config struct {
	PoolSize   uint64
	QueueDepth uint32
	Align      uint32
	Target     int32
	Flags      uint32 // HCOMM_REMOTE_* (the C field that was "reserved")
	Path       string
	DevMemSize uint64
	// Backings is the pool's backing preference (nil: the engine's
	// default); set in Go only, by hcomm_open_file (not a C field).
	Backings []hugepage.Backing
}

// detail receives the message of a failed call for hcomm_last_error (set
// by capi.go to the C thread-local store; nil in Go tests). It runs on the
// thread of the C call that failed.
var detail func(msg string)

// fail records a failed call's message and returns its code.
func fail(code int32, format string, args ...any) int32 {
	if detail != nil {
		detail(fmt.Sprintf(format, args...))
	}
	return code
}

// failErr records err's message and returns its code.
func failErr(err error) int32 {
	if detail != nil {
		detail(err.Error())
	}
	return codeOf(err)
}

// invokeFunc runs a transfer's C callback (cgo in the library; a Go
// function in tests).
type invokeFunc func(cb, ud uintptr, id uint64, status int32)

// state is one initialized handle.
type state struct {
	handle uint64
	target int32
	eng    *engine.Engine
	mock   *mock.Device // the mock target's device (fault hooks); the backend closes it
	ucx    *ucx.Backend // the remote target's backend (Connect); the engine closes it
	file   *os.File     // the file target's file, closed after the engine
	host   hostIndex
	// fileSpace hands out the file target's "device addresses" (file
	// offsets); device targets use the engine's device-memory allocator.
	fileSpace *span.Space
	regMu     sync.Mutex // registerHost, unregisterHost
	cbs       *cbTable
	invoke    invokeFunc
	onDone    func(engine.Result) // s.complete as a method value, made once
	depth     int
	log       *slog.Logger
	scratch   sync.Pool // *batchScratch for submit_batch
	// t0 is the first target's engine Target (the engine's first
	// backend); targets[1..] are those hcomm_add_target added (targets.go).
	t0       engine.Target
	targets  [maxTargets]atomic.Pointer[target]
	targetMu sync.Mutex // addTarget
	copies   copyTable
	// maxLen is the most bytes one transfer may move (the device's MAX_LEN
	// register; the engine's 32-bit limit for other targets), checked
	// with the pointers so that a batch is refused whole, never after a
	// prefix went to the engine.
	maxLen uint64
}

type batchScratch struct {
	ts  []engine.Transfer
	ids []engine.ID
	cbs []uint32
}

// The handle table: handle = sequence<<16 | slot+1. A lookup is one atomic
// load and a compare, so a finalized handle (its slot cleared, or reused
// under a new sequence number) is refused, never confused with another.
const maxHandles = 1024

var handles struct {
	mu    sync.Mutex // init and finalize
	seq   uint64
	slots [maxHandles]atomic.Pointer[state]
}

func lookup(h uint64) *state {
	i := h & 0xffff
	if i == 0 || i > maxHandles {
		return nil
	}
	s := handles.slots[i-1].Load()
	if s == nil || s.handle != h {
		return nil
	}
	return s
}

// logger is the library's: warnings and errors to stderr by default;
// HCOMM_LOG=debug|info|warn|error|off changes the level.
var logger = func() *slog.Logger {
	lvl := slog.LevelWarn
	switch strings.ToLower(os.Getenv("HCOMM_LOG")) {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "error":
		lvl = slog.LevelError
	case "off", "none", "0":
		lvl = slog.LevelError + 100
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}()

// open initializes an engine per c and registers it as a handle.
func open(c config, invoke invokeFunc) (_ *state, code int32, err error) {
	if code, err := c.check(); err != nil {
		return nil, code, err
	}
	s := &state{target: c.Target, invoke: invoke, log: logger}
	defer func() {
		if err != nil {
			s.closeFile()
		}
	}()
	be, code, err := s.newBackend(c)
	if err != nil {
		return nil, code, err
	}
	if code, err := s.openEngine(c, be); err != nil {
		return nil, code, err
	}
	if code, err := s.register(); err != nil {
		_ = s.eng.Close()
		return nil, code, err
	}
	return s, codeOK, nil
}

// check refuses what no target accepts.
func (c config) check() (int32, error) {
	switch {
	case c.Flags != 0 && c.Target != targetRemote:
		return codeEINVAL, fmt.Errorf("flags = %#x: must be 0 (flags are for HCOMM_TARGET_REMOTE)", c.Flags)
	case c.Flags&^remoteShm != 0:
		return codeEINVAL, fmt.Errorf("flags = %#x: unknown bits (HCOMM_REMOTE_SHM is %#x)", c.Flags, remoteShm)
	case c.PoolSize > math.MaxInt64:
		return codeEINVAL, fmt.Errorf("mem_pool_size %d: too large", c.PoolSize)
	case c.QueueDepth > engine.MaxQueueDepth:
		return codeEINVAL, fmt.Errorf("queue_depth %d: at most %d", c.QueueDepth, engine.MaxQueueDepth)
	case c.Align > engine.MaxAlignment:
		return codeEINVAL, fmt.Errorf("align_size %d: at most %d", c.Align, engine.MaxAlignment)
	case c.DevMemSize > maxDevSpace:
		return codeEINVAL, fmt.Errorf("dev_mem_size %d: at most %d", c.DevMemSize, uint64(maxDevSpace))
	}
	return codeOK, nil
}

// newBackend opens the target's device or file and its engine backend.
func (s *state) newBackend(c config) (backend.Backend, int32, error) {
	bad := func(format string, args ...any) (backend.Backend, int32, error) {
		return nil, codeEINVAL, fmt.Errorf(format, args...)
	}
	var dev vfio.Device
	switch c.Target {
	case targetMock:
		if c.Path != "" {
			return bad("target_path %q: the mock target takes none", c.Path)
		}
		m, err := mock.New(mock.Config{DevMemSize: int(c.DevMemSize), Logger: logger})
		if err != nil {
			return nil, codeOf(err), fmt.Errorf("vfio-mock: %w", err)
		}
		dev, s.mock = m, m
	case targetVFIO:
		if c.Path == "" || c.DevMemSize != 0 {
			return bad("the VFIO target needs target_path (a PCI address) and dev_mem_size 0")
		}
		d, err := vfio.OpenPCI(c.Path)
		if err != nil {
			return nil, codeENODEV, fmt.Errorf("VFIO device %s: %w", c.Path, err)
		}
		dev = d
	case targetFile:
		if c.Path == "" {
			return bad("the file target needs target_path")
		}
		f, err := os.OpenFile(c.Path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, noDevice(codeOf(err)), err
		}
		s.file = f
		size := c.DevMemSize
		if size == 0 {
			size = defaultFileSpace
		}
		s.fileSpace = span.New(size, uint64(max(c.Align, 64)))
		be, err := uringfile.New(f, uringfile.Config{Logger: logger})
		if err != nil {
			return nil, noDevice(codeOf(err)), err
		}
		return be, codeOK, nil
	case targetMemory:
		if c.Path != "" || c.DevMemSize != 0 {
			return bad("the memory target takes no target_path and no dev_mem_size")
		}
		return memory.New(), codeOK, nil
	case targetRemote:
		if c.DevMemSize != 0 {
			return bad("the remote target takes no dev_mem_size")
		}
		return s.newRemote(c)
	default:
		return bad("target %d: want HCOMM_TARGET_MOCK, _FILE, _VFIO, _MEMORY or _REMOTE", c.Target)
	}
	be, err := hdmadev.New(dev, hdmadev.Config{Logger: logger, CloseDevice: true})
	if err != nil {
		_ = dev.Close()
		return nil, codeOf(err), err
	}
	return be, codeOK, nil
}

// noDevice reports an I/O failure to open a target as ENODEV.
func noDevice(code int32) int32 {
	if code == codeEIO {
		return codeENODEV
	}
	return code
}

// openEngine opens the engine over be (which it then owns) and reads the
// limits the C side checks before the engine sees a transfer.
func (s *state) openEngine(c config, be backend.Backend) (int32, error) {
	var err error
	s.eng, err = engine.Open(engine.Config{
		Backend:  be,
		PoolSize: int64(c.PoolSize), QueueDepth: int(c.QueueDepth), Alignment: int(c.Align),
		Backings: c.Backings,
		Logger:   logger,
	})
	if err != nil {
		return noDevice(codeOf(err)), err
	}
	if s.mock != nil {
		// After Open: the backend's own descriptors (the CPU-path
		// measurement) do not count towards N.
		if err := mockFaults(s.mock); err != nil {
			_ = s.eng.Close()
			return codeEINVAL, err
		}
	}
	// The device's MAX_LEN (the engine refuses longer transfers with
	// ErrOutOfBounds), checked with the pointers so that a batch is
	// refused whole, never after a prefix went to the engine.
	s.maxLen = math.MaxUint32
	if ml := s.eng.Backend().MaxTransfer; ml != 0 {
		s.maxLen = uint64(ml)
	}
	s.depth = s.eng.Config().QueueDepth
	s.t0 = s.eng.Targets()[0]
	// Indexes in use ≤ transfers in flight (≤ depth) + submits between
	// taking an index and handing the transfer to the engine.
	s.cbs = newCBTable(2*s.depth + 64)
	s.onDone = s.complete
	s.scratch.New = func() any { return new(batchScratch) }
	return codeOK, nil
}

// register gives s a handle.
func (s *state) register() (int32, error) {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	for i := range handles.slots {
		if handles.slots[i].Load() == nil {
			handles.seq++
			s.handle = handles.seq<<16 | uint64(i+1)
			handles.slots[i].Store(s)
			return codeOK, nil
		}
	}
	return codeEMFILE, fmt.Errorf("%d handles open", maxHandles)
}

// mockFaults applies HCOMM_MOCK_FAULT, a test hook for the mock target:
// "stall:N" makes the Nth descriptor the device fetches never complete
// (until a reset), "error:N" fails it with a device error.
func mockFaults(m *mock.Device) error {
	v := os.Getenv("HCOMM_MOCK_FAULT")
	if v == "" {
		return nil
	}
	kind, nth, ok := strings.Cut(v, ":")
	n, err := strconv.ParseUint(nth, 10, 64)
	if !ok || err != nil || n == 0 {
		return fmt.Errorf("HCOMM_MOCK_FAULT=%q: want stall:N or error:N with N ≥ 1", v)
	}
	f := mock.Fault{Nth: n}
	switch kind {
	case "stall":
		f.Kind = mock.FaultStall
	case "error":
		f.Kind = mock.FaultError
	default:
		return fmt.Errorf("HCOMM_MOCK_FAULT=%q: unknown kind %q (stall, error)", v, kind)
	}
	return m.InjectFault(f)
}

// closeFile closes the file target's file (the engine's backend closes
// devices itself).
func (s *state) closeFile() {
	if s.file != nil {
		if err := s.file.Close(); err != nil {
			s.log.Warn("hcomm: close file", "err", err)
		}
		s.file = nil
	}
}

// allocHost returns the address of a new pool block.
func (s *state) allocHost(n uint64) (uintptr, int32) {
	if n == 0 || n > math.MaxInt64 {
		return 0, fail(codeEINVAL, "hcomm_alloc_host_mem: size %d: want 1..%d", n, uint64(math.MaxInt64))
	}
	b, err := s.eng.Alloc(int(n))
	if err != nil {
		return 0, failErr(err)
	}
	s.host.add(b, false)
	return b.Addr(), codeOK
}

func (s *state) freeHost(p uintptr) int32 {
	if _, reg, ok := s.host.at(p); ok && reg {
		return fail(codeEINVAL, "hcomm_free_host_mem(%#x): registered memory: use hcomm_unregister_host_mem", p)
	}
	b, ok := s.host.remove(p)
	if !ok {
		return fail(codeEFAULT, "hcomm_free_host_mem(%#x): not a pointer hcomm_alloc_host_mem returned (or freed already)", p)
	}
	if err := s.eng.Free(b); err != nil {
		return failErr(err)
	}
	return codeOK
}

// registerHost registers n bytes of caller memory at p (page aligned, not
// overlapping pool memory or another registration) with the engine.
func (s *state) registerHost(p unsafe.Pointer, n uintptr) int32 {
	ps := uintptr(os.Getpagesize())
	addr := uintptr(p)
	switch {
	case p == nil || n == 0:
		return fail(codeEINVAL, "hcomm_register_host_mem(%#x, %d): NULL or empty", addr, n)
	case addr%ps != 0 || n%ps != 0:
		return fail(codeEINVAL, "hcomm_register_host_mem(%#x, %d): want a page-aligned pointer and a multiple of %d bytes", addr, n, ps)
	case n > math.MaxInt64 || addr+n < addr:
		return fail(codeEINVAL, "hcomm_register_host_mem(%#x, %d): range wraps", addr, n)
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.host.overlaps(addr, n) {
		return fail(codeEINVAL, "hcomm_register_host_mem(%#x, %d): overlaps pool memory or another registration", addr, n)
	}
	b, err := s.eng.Register(unsafe.Slice((*byte)(p), n))
	if err != nil {
		return failErr(err)
	}
	s.host.add(b, true)
	return codeOK
}

// unregisterHost undoes registerHost for the registration that starts at p.
func (s *state) unregisterHost(p uintptr) int32 {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	b, reg, ok := s.host.at(p)
	switch {
	case !ok:
		return fail(codeEFAULT, "hcomm_unregister_host_mem(%#x): not the start of a registration", p)
	case !reg:
		return fail(codeEINVAL, "hcomm_unregister_host_mem(%#x): pool memory: use hcomm_free_host_mem", p)
	}
	// Unregister first: while it refuses (transfers in flight), the
	// memory stays in the index and usable. After it succeeded, a submit
	// that still finds it in the index is refused by the engine.
	if err := s.eng.Unregister(b); err != nil {
		return failErr(err)
	}
	s.host.remove(p)
	return codeOK
}

// allocDev returns a device address of n fresh bytes: device memory from
// the engine, or file space for the file target.
func (s *state) allocDev(n uint64) (uintptr, int32) {
	if n == 0 {
		return 0, fail(codeEINVAL, "hcomm_alloc_dev_mem: size 0")
	}
	if s.fileSpace != nil {
		r, ok := s.fileSpace.Alloc(n)
		if !ok {
			return 0, fail(codeENOMEM, "hcomm_alloc_dev_mem(%d): no free range of the file's %d bytes (dev_mem_size) fits", n, s.fileSpace.Size())
		}
		return devAddrBase + uintptr(r.Off), codeOK
	}
	if s.eng.Backend().DeviceMemory == 0 {
		return 0, fail(codeEOPNOTSUPP, "hcomm_alloc_dev_mem: the %s target has no device memory", s.eng.Backend().Name)
	}
	if n > maxDevSpace {
		return 0, fail(codeENOMEM, "hcomm_alloc_dev_mem(%d): larger than any device memory", n)
	}
	r, err := s.t0.AllocDevice(n)
	if err != nil {
		if errors.Is(err, engine.ErrOutOfBounds) {
			return 0, fail(codeENOMEM, "hcomm_alloc_dev_mem: %v", err)
		}
		return 0, failErr(err)
	}
	return devAddrBase + uintptr(r.Off), codeOK
}

func (s *state) freeDev(p uintptr) int32 {
	if p < devAddrBase || p >= devAddrEnd {
		return fail(codeEFAULT, "hcomm_free_dev_mem(%#x): not a device address", p)
	}
	k, off := devTarget(p)
	if k != 0 {
		return s.freeTarget(k, off, p)
	}
	if off >= maxDevSpace {
		return fail(codeEFAULT, "hcomm_free_dev_mem(%#x): not a device address", p)
	}
	if s.fileSpace != nil {
		if !s.fileSpace.Free(off) {
			return fail(codeEFAULT, "hcomm_free_dev_mem(%#x): not the start of a live allocation", p)
		}
		return codeOK
	}
	if err := s.t0.FreeDevice(off); err != nil {
		return fail(codeEFAULT, "hcomm_free_dev_mem(%#x): %v", p, err)
	}
	return codeOK
}

// Kinds of a resolved address.
const (
	locHost   = 1
	locDev    = 2
	locRemote = 3
)

// resolve turns p (with n bytes) into an engine location: a live host block
// or allocated device space. Anything else is EFAULT.
func (s *state) resolve(p, n uintptr) (engine.Loc, int, int32) {
	if p >= remoteAddrBase && p < remoteAddrEnd {
		if s.ucx == nil {
			return engine.Loc{}, 0, codeEFAULT
		}
		peer, off := remoteDecode(p)
		return s.t0.Remote(peer, off), locRemote, codeOK
	}
	if p >= notifyAddrBase && p < notifyAddrEnd {
		peer, ok := notifyDecode(p)
		if s.ucx == nil || !ok {
			return engine.Loc{}, 0, codeEFAULT
		}
		return s.t0.Remote(peer, ucx.Notify), locRemote, codeOK
	}
	if p >= devAddrEnd {
		return engine.Loc{}, 0, codeEFAULT
	}
	if p >= devAddrBase {
		k, off := devTarget(p)
		if k != 0 {
			l, code := s.resolveTarget(k, off, uint64(n))
			return l, locDev, code
		}
		if s.fileSpace != nil {
			if !s.fileSpace.Contains(off, uint64(n)) {
				return engine.Loc{}, 0, codeEFAULT
			}
			return s.t0.FileAt(int64(off)), locDev, codeOK
		}
		if !s.t0.DeviceAllocated(off, uint64(n)) {
			return engine.Loc{}, 0, codeEFAULT
		}
		return s.t0.DeviceAt(off), locDev, codeOK
	}
	b, off, ok := s.host.find(p, n)
	if !ok {
		return engine.Loc{}, 0, codeEFAULT
	}
	return engine.HostAt(*b, off), locHost, codeOK
}

// transfer builds the engine transfer for src → dst, n bytes.
func (s *state) transfer(t *engine.Transfer, src, dst, n uintptr) int32 {
	if n == 0 || n > math.MaxUint32 {
		return fail(codeEINVAL, "transfer of %d bytes: want 1..%d", n, uint32(math.MaxUint32))
	}
	if ml := s.maxLenOf(src, dst); uint64(n) > ml {
		// As the engine would refuse it (ErrOutOfBounds → EFAULT).
		return fail(codeEFAULT, "transfer of %d bytes: the target moves at most %d per transfer", n, ml)
	}
	var sk, dk int
	var code int32
	if t.Src, sk, code = s.resolve(src, n); code != codeOK {
		return fail(code, "src_ptr %#x + %d bytes: not inside one live allocation (hcomm_alloc_host_mem, a registration, hcomm_alloc_dev_mem%s)", src, n, s.remoteHint())
	}
	if t.Dst, dk, code = s.resolve(dst, n); code != codeOK {
		return fail(code, "dst_ptr %#x + %d bytes: not inside one live allocation (hcomm_alloc_host_mem, a registration, hcomm_alloc_dev_mem%s)", dst, n, s.remoteHint())
	}
	if code := s.direction(t, src, dst, sk, dk, n); code != codeOK {
		return code
	}
	t.Len = int(n)
	return codeOK
}

// submit submits one transfer; cb == 0: no callback.
func (s *state) submit(src, dst, n, cb, ud uintptr) (uint64, int32) {
	var t engine.Transfer
	if code := s.transfer(&t, src, dst, n); code != codeOK {
		return 0, code
	}
	var ci uint32
	if cb != 0 {
		var ok bool
		if ci, ok = s.cbs.get(cb, ud); !ok {
			return 0, codeEAGAIN
		}
		t.Callback, t.User = s.onDone, uint64(ci)
	}
	id, err := s.eng.Submit(t)
	if err != nil {
		// The engine runs no callback for a transfer it refused.
		if cb != 0 {
			s.cbs.put(ci)
		}
		if err == engine.ErrQueueFull {
			return 0, codeEAGAIN // hot: no message (hcomm.c gives the code's text)
		}
		return 0, failErr(err)
	}
	return uint64(id), codeOK
}

// cTransfer is hcomm_transfer_t with every pointer as uintptr (capi.go
// checks the layout against the C struct at compile time).
type cTransfer struct {
	Src, Dst, Size, Callback, UserData uintptr
	ID                                 uint64
}

// submitBatch validates all of ts, then submits them with one doorbell per
// queue_depth transfers. IDs are written back into ts.
func (s *state) submitBatch(ts []cTransfer) int32 {
	for i := range ts {
		ts[i].ID = 0
	}
	sc := s.scratch.Get().(*batchScratch)
	defer s.scratch.Put(sc)
	if cap(sc.ts) < len(ts) {
		sc.ts = make([]engine.Transfer, len(ts))
		sc.ids = make([]engine.ID, len(ts))
		sc.cbs = make([]uint32, len(ts))
	}
	ets, ids, cbs := sc.ts[:len(ts)], sc.ids[:len(ts)], sc.cbs[:len(ts)]
	clear(ets)
	for i := range ts {
		if code := s.transfer(&ets[i], ts[i].Src, ts[i].Dst, ts[i].Size); code != codeOK {
			return code
		}
	}
	// One engine batch (one doorbell) per queue_depth transfers; callback
	// indexes are taken per chunk, so that a long batch never needs more
	// than the table holds.
	for start := 0; start < len(ts); {
		end := min(start+s.depth, len(ts))
		short := false
		for i := start; i < end; i++ {
			if ts[i].Callback == 0 {
				continue
			}
			ci, ok := s.cbs.get(ts[i].Callback, ts[i].UserData)
			if !ok {
				end, short = i, true
				break
			}
			cbs[i] = ci
			ets[i].Callback, ets[i].User = s.onDone, uint64(ci)
		}
		if end == start {
			return codeEAGAIN
		}
		n, err := s.eng.SubmitBatch(ets[start:end], ids[start:end])
		// Transfers from start+n on were not submitted (or became
		// no-ops): no callback will run for them.
		for i := start + n; i < end; i++ {
			if ts[i].Callback != 0 {
				s.cbs.put(cbs[i])
			}
		}
		for i := start; i < start+n; i++ {
			ts[i].ID = uint64(ids[i])
		}
		clear(ets[start:end]) // drop Block references
		if err != nil {
			return codeOf(err)
		}
		if short {
			return codeEAGAIN
		}
		start = end
	}
	return codeOK
}

// complete is every transfer's engine callback: it frees the callback
// index and runs the C callback.
func (s *state) complete(r engine.Result) {
	cb, ud := s.cbs.take(uint32(r.User))
	s.invoke(cb, ud, uint64(r.ID), codeOf(r.Err))
}

// wait waits for id; timeoutMs < 0: no limit.
func (s *state) wait(id uint64, timeoutMs int) int32 {
	ctx := context.Background()
	if timeoutMs >= 0 {
		// Not context.WithTimeout: a timed wait allocates nothing.
		d := newDeadline(time.Duration(timeoutMs) * time.Millisecond)
		defer d.release()
		ctx = d
	}
	if code, ok := s.waitCopy(ctx, id); ok {
		return code
	}
	err := s.eng.Wait(ctx, engine.ID(id))
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		return codeEINPROGRESS
	}
	return codeOf(err)
}

// finalize unregisters h and closes its engine (waiting for transfers in
// flight up to timeoutMs, < 0: no limit), then its target.
func finalize(h uint64, timeoutMs int) int32 {
	handles.mu.Lock()
	s := lookup(h)
	if s == nil {
		handles.mu.Unlock()
		return codeEBADF
	}
	handles.slots[h&0xffff-1].Store(nil)
	handles.mu.Unlock()
	return s.close(timeoutMs)
}

func (s *state) close(timeoutMs int) int32 {
	ctx := context.Background()
	if timeoutMs >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
		defer cancel()
	}
	err := s.eng.Shutdown(ctx)
	// Copies end once the engine refused or canceled their chunks: their
	// callbacks run before finalize returns.
	s.copies.wg.Wait()
	s.closeFile()
	s.closeTargets()
	if err != nil {
		s.log.Warn("hcomm: finalize", "err", err)
		return fail(codeEIO, "hcomm_finalize: %v", err)
	}
	return codeOK
}
