//go:build hcommfuzz

package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// FuzzABI drives the public C functions of hcomm.h (through abifuzz.go's
// C wrappers, as a C program calls them) with a program the fuzzer writes:
// a sequence of calls, each with handles, pointers, sizes, flags and
// timeouts that are live, stale, off by some bytes, foreign or random, and
// NULL where the prototype has a pointer. Whatever it does, every call
// returns HCOMM_OK or one of the header's codes (with a message in
// hcomm_last_error for a failure), the process does not crash, every
// callback of an accepted transfer or copy runs exactly once by the time
// its handle is finalized (a refused one's never), and each program ends
// with every handle finalized (TestABIFuzzNoLeak checks that this leaves
// no goroutine or descriptor behind).
//
// What the fuzzer may not do is what C forbids: pass a pointer to memory
// it does not own where the function reads or writes through it (a
// hcomm_config_t, a transfer array, an out-parameter), a callback that is
// not a function, or register memory it does not own. Pointers that
// hcomm only compares (src_ptr, dst_ptr, the pointers to free or
// unregister) are anything.
//
//	go test -tags hcommfuzz -run '^$' -fuzz '^FuzzABI$' -fuzztime 1m ./capi   (make fuzz)
func FuzzABI(f *testing.F) {
	for _, s := range abiSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		runABI(t, prog)
	})
}

// TestABIFuzzNoLeak runs the seed programs repeatedly: goroutines and file
// descriptors come back to where they started.
func TestABIFuzzNoLeak(t *testing.T) {
	runABI(t, abiSeeds()[0]) // first use: the runtime's and UCX's own threads and fds
	runtime.GC()
	g0 := runtime.NumGoroutine()
	fds0 := testutil.SnapshotFDs(t)
	for range 5 {
		for _, s := range abiSeeds() {
			runABI(t, s)
		}
	}
	var g1 int
	for range 100 {
		if g1 = runtime.NumGoroutine(); g1 <= g0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g1 > g0 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d → %d\n%s", g0, g1, buf[:runtime.Stack(buf, true)])
	}
	if leaked := fds0.Leaked(testutil.SnapshotFDs(t)); leaked != nil {
		t.Errorf("file descriptors leaked: %v", leaked)
	}
}

// Opcodes of a program.
const (
	opInit = iota
	opAlloc
	opFree
	opRegister
	opUnregister
	opSubmit
	opBatch
	opWait
	opConnect
	opListenAddr
	opRemoteOffset
	opOpenFile
	opAddTarget
	opAllocTarget
	opCopy
	opFinalize
	opMisc
	opCount
)

// abiSeeds are programs that reach each function with valid arguments
// (the fuzzer mutates from there), written with seedProg, which emits the
// bytes the decoder below reads.
func abiSeeds() [][]byte {
	var seeds [][]byte
	add := func(f func(b *seedProg)) {
		var b seedProg
		f(&b)
		seeds = append(seeds, b.b)
	}
	add(func(b *seedProg) { // mock: host → device → host, a callback, waits
		b.init(targetMock, 0)
		b.allocHost(0, 4096)
		b.allocHost(0, 4096)
		b.allocDev(0, 4096)
		b.submit(0, b.host(0), b.dev(0), 4096, true)
		b.submit(0, b.dev(0), b.host(1), 4096, true)
		b.wait(0, 0)
		b.wait(0, 1)
		b.finalize(0)
	})
	add(func(b *seedProg) { // memory: a batch host → host, finalize with a short timeout
		b.init(targetMemory, 0)
		b.allocHost(0, 8192)
		b.allocHost(0, 8192)
		b.batch(0, [][3][]byte{{b.host(0), b.host(1), size(4096)}, {b.host(1), b.host(0), size(4096)}})
		b.emit(opFinalize, 0, 2)
	})
	add(func(b *seedProg) { // file: foreign memory registered, written, unregistered
		b.init(targetFile, 0)
		b.allocDev(0, 65536)
		b.register(0, 4096*4)
		b.submit(0, b.foreign(), b.dev(0), 4096, true)
		b.wait(0, 0)
		b.emit(opUnregister, 0, 4, 0)
		b.finalize(0)
	})
	add(func(b *seedProg) { // mock + a file target + a memory target: copy file → device
		b.init(targetMock, 1)
		b.addTarget(0, targetFile)
		b.addTarget(0, targetMemory)
		b.emit(opAllocTarget, 0, 1, 1) // target 1 (the first added)
		b.emit(size(65536)...)
		b.allocDev(0, 65536)
		b.copy(0, b.dev(1), b.dev(0), 65536) // file space → device memory
		b.wait(0, 0)
		b.finalize(0)
	})
	add(func(b *seedProg) { // a file read handle into foreign memory
		b.emit(opOpenFile, 0, 6)    // the data file
		b.emit(make([]byte, 11)...) // flags 0, depth 0, sizes wanted, no raw values
		b.register(0, 4096*4)
		b.submit(0, b.dev(0), b.foreign(), 4096, true)
		b.wait(0, 0)
		b.finalize(0)
	})
	add(func(b *seedProg) { // remote: listen address, remote offset, a refused connect
		b.init(targetRemote, 0)
		b.allocHost(0, 4096)
		b.emit(opListenAddr, 0, 0, 64)
		b.emit(opRemoteOffset, 0)
		b.emit(b.host(0)...)
		b.emit(0)
		b.emit(opConnect, 0, 2, 50, 0)
		b.emit(opMisc, 3, 0, 0, 0, 0, 0) // hcomm_disconnect(h, 0)
		b.finalize(0)
	})
	add(func(b *seedProg) { // stale and forged handles, strerror, version
		b.init(targetMemory, 0)
		b.finalize(0)
		b.emit(opAlloc, 4, 2, 1, 0) // the finalized handle
		b.emit(opMisc, 0, 1, 2, 3, 4, opMisc, 1, 7, opMisc, 2, 0)
	})
	return seeds
}

// seedProg writes programs for the decoder (handle 0 = live[0], pointer
// host(i)/dev(i) = the i-th pool block or device address, exactly).
type seedProg struct{ b []byte }

func (p *seedProg) emit(b ...byte) { p.b = append(p.b, b...) }

// size encodes n (a multiple of 4096 below 1 MiB) as the decoder's page case.
func size(n int) []byte { return []byte{2, byte(n >> 12)} }

func (p *seedProg) host(i int) []byte { return []byte{byte(1 + 16*i), 0} }
func (p *seedProg) dev(i int) []byte  { return []byte{byte(5 + 16*i), 0} }
func (p *seedProg) foreign() []byte   { return []byte{4, 0} }

func (p *seedProg) init(target int32, align byte) {
	// nullH, nullCfg, pool 1 MiB, depth 8, target, align, flags 0, path, keep, dev_mem_size 0
	p.emit(opInit, 0, 0, 0, 1, byte(target))
	if align == 0 {
		p.emit(0)
	} else {
		p.emit(1)
	}
	p.emit(0)
	switch target {
	case targetFile:
		p.emit(0, 1) // target-1
	case targetRemote:
		p.emit(7) // 127.0.0.1:0
	default:
		p.emit(1, 1) // NULL
	}
	p.emit(0) // dev_mem_size 0
}

func (p *seedProg) allocHost(h byte, n int) { p.emit(opAlloc, h); p.emit(size(n)...); p.emit(0) }
func (p *seedProg) allocDev(h byte, n int)  { p.emit(opAlloc, h); p.emit(size(n)...); p.emit(1) }

func (p *seedProg) register(h byte, n int) {
	// foreign memory at offset 0, page aligned, n bytes
	p.emit(opRegister, h, 0, 0, 0, 1, byte(n>>12), 0)
}

func (p *seedProg) submit(h byte, src, dst []byte, n int, cb bool) {
	p.emit(opSubmit, h, 0)
	p.emit(src...)
	p.emit(dst...)
	p.emit(size(n)...)
	if cb {
		p.emit(1)
	} else {
		p.emit(0, 0, 0, 0, 0, 0, 0, 0, 0)
	}
}

func (p *seedProg) batch(h byte, ts [][3][]byte) {
	p.emit(opBatch, h, byte(len(ts)), 0, 0)
	for _, t := range ts {
		p.emit(t[0]...)
		p.emit(t[1]...)
		p.emit(t[2]...)
		p.emit(1)
	}
}

func (p *seedProg) wait(h byte, id int) { p.emit(opWait, h, byte(1+4*id), 1, 0) }

func (p *seedProg) addTarget(h byte, target int32) {
	p.emit(opAddTarget, h, 0, byte(target), 0)
	if target == targetFile {
		p.emit(0, 2) // target-2
	} else {
		p.emit(1) // NULL
	}
	p.emit(0, 0) // dev_mem_size 0, idx not NULL
}

func (p *seedProg) copy(h byte, dst, src []byte, n int) {
	p.emit(opCopy, h)
	p.emit(dst...)
	p.emit(src...)
	p.emit(size(n)...)
	p.emit(0, 0, 0, 0, 0, 0, 1, 0) // chunk 0, depth 0 (u32), no raw depth, callback, id not NULL
}

func (p *seedProg) finalize(h byte) { p.emit(opFinalize, h, 1) }

// prog reads a program's bytes; past the end everything is 0.
type prog struct {
	b   []byte
	pos int
}

func (p *prog) more() bool { return p.pos < len(p.b) }

func (p *prog) u8() byte {
	if p.pos >= len(p.b) {
		p.pos++
		return 0
	}
	p.pos++
	return p.b[p.pos-1]
}

func (p *prog) u16() uint16 { return uint16(p.u8()) | uint16(p.u8())<<8 }
func (p *prog) u32() uint32 { return uint32(p.u16()) | uint32(p.u16())<<16 }
func (p *prog) u64() uint64 { return uint64(p.u32()) | uint64(p.u32())<<32 }
func (p *prog) flag() bool  { return p.u8()&1 != 0 }

// size: 0, small, a page multiple, a power of two (±1), or any 64 bits.
func (p *prog) size() uint64 {
	switch k := p.u8(); k % 8 {
	case 0:
		return 0
	case 1:
		return uint64(p.u8()) << 8
	case 2:
		return uint64(p.u8()) << 12
	case 3:
		return 1 << (p.u8() % 64)
	case 4:
		return 1<<(p.u8()%64) - 1
	case 5:
		return math.MaxUint64 - uint64(p.u8())
	case 6:
		return uint64(p.u32())
	default:
		return p.u64()
	}
}

// abiRun is one program's state.
type abiRun struct {
	t       *testing.T
	p       prog
	dir     string
	live    []uint64 // handles not finalized
	dead    []uint64 // finalized handles
	remote  map[uint64]bool
	host    []uintptr // pool blocks and registrations
	dev     []uintptr // device addresses (any target)
	freed   []uintptr
	ids     []ident // IDs of accepted transfers and copies
	tokens  []token // callbacks expected
	peers   []uint32
	targets []uint32
}

type ident struct {
	h, id uint64
	copy  bool
}

// token is one call that asked for a callback: accepted ones expect one.
type token struct {
	h        uint64
	accepted bool
	what     string
}

func runABI(t *testing.T, b []byte) {
	fzReset()
	// No call may hang: a program that runs past this is a failure (the
	// fuzzer keeps the input), with every goroutine's stack.
	watchdog := time.AfterFunc(abiHang, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("ABI program hung for %v: %x", abiHang, b))
	})
	defer watchdog.Stop()
	if d := os.Getenv("HCOMM_ABIFUZZ_SLOW"); d != "" {
		t0 := time.Now()
		defer func() {
			if el := time.Since(t0); el > time.Second {
				os.WriteFile(filepath.Join(d, fmt.Sprintf("slow-%d", t0.UnixNano())), []byte(fmt.Sprintf("%v\n%x\n", el, b)), 0o644)
			}
		}()
	}
	r := &abiRun{t: t, p: prog{b: b}, dir: abiDir(t), remote: map[uint64]bool{}}
	defer r.finish()
	for steps := 0; r.p.more() && steps < 64; steps++ {
		r.step()
	}
}

var abiDirOnce struct {
	sync.Once
	dir string
	err error
}

// abiDir is one directory for the whole process (the fuzzer runs
// programs by the thousand; t.TempDir per program would be most of the
// time), with a small file for hcomm_open_file.
func abiDir(t *testing.T) string {
	abiDirOnce.Do(func() {
		d, err := os.MkdirTemp("", "hcomm-abifuzz-")
		if err == nil {
			buf := make([]byte, 256<<10)
			for i := range buf {
				buf[i] = byte(i * 7)
			}
			err = os.WriteFile(filepath.Join(d, "data"), buf, 0o644)
		}
		abiDirOnce.dir, abiDirOnce.err = d, err
	})
	if abiDirOnce.err != nil {
		t.Fatal(abiDirOnce.err)
	}
	return abiDirOnce.dir
}

// handle: a live one, a finalized one, 0, or a forged one.
func (r *abiRun) handle() uint64 {
	k := r.p.u8()
	switch k % 8 {
	case 0, 1, 2, 3:
		if len(r.live) > 0 {
			return r.live[int(k/8)%len(r.live)]
		}
	case 4:
		if len(r.dead) > 0 {
			return r.dead[int(k/8)%len(r.dead)]
		}
	case 5:
		return 0
	case 6:
		if len(r.live) > 0 {
			return r.live[0] ^ 1<<16 // the slot of a live handle, another sequence
		}
	}
	return r.p.u64()
}

// ptr: NULL, a pool block or device address (± some bytes), a freed one,
// foreign memory, a target or remote address, or any 64 bits.
func (r *abiRun) ptr() uintptr {
	k := r.p.u8()
	off := uintptr(int8(r.p.u8()))
	pick := func(ps []uintptr) (uintptr, bool) {
		if len(ps) == 0 {
			return 0, false
		}
		return ps[int(k/16)%len(ps)], true
	}
	switch k % 16 {
	case 0:
		return 0
	case 1, 2, 3:
		if p, ok := pick(r.host); ok {
			return p + off*64
		}
	case 4:
		return fzForeign() + (off&0xf)*4096
	case 5, 6:
		if p, ok := pick(r.dev); ok {
			return p + off*64
		}
	case 7:
		if p, ok := pick(r.freed); ok {
			return p
		}
	case 8:
		return fzTargetAddr(uint32(r.p.u8()%10), uint64(r.p.u32()))
	case 9:
		peer := uint32(r.p.u8() % 4)
		if len(r.peers) > 0 && r.p.flag() {
			peer = r.peers[0]
		}
		return fzRemoteAddr(peer, uint64(r.p.u32()))
	case 10:
		return uintptr(devAddrBase) + uintptr(r.p.u32())
	case 11:
		if p, ok := pick(r.host); ok {
			return p
		}
	case 12:
		if p, ok := pick(r.dev); ok {
			return p
		}
	}
	return uintptr(r.p.u64())
}

// path for a target_path; creates: a file target would create it.
func (r *abiRun) path(creates bool) *string {
	var s string
	switch r.p.u8() % 8 {
	case 0:
		s = filepath.Join(r.dir, fmt.Sprintf("target-%d", r.p.u8()%4))
	case 1:
		return nil
	case 2:
		s = ""
	case 3:
		s = r.dir // a directory
	case 4:
		s = "/nonexistent-dir/x"
	case 5:
		s = "0000:7f:1f.7" // no such PCI device
	case 6:
		s = filepath.Join(r.dir, "data")
	default:
		s = "127.0.0.1:0"
	}
	if creates && s != "" && !filepath.IsAbs(s) {
		// A file target creates its file: never in the working directory.
		s = filepath.Join(r.dir, s)
	}
	return &s
}

func (r *abiRun) token(h uint64, what string) uintptr {
	if len(r.tokens) >= fzTokens {
		return uintptr(fzTokens - 1) // counted as a wild callback: the program ends soon anyway
	}
	r.tokens = append(r.tokens, token{h: h, what: what})
	return uintptr(len(r.tokens) - 1)
}

func (r *abiRun) accept(ud uintptr) {
	if int(ud) < len(r.tokens) {
		r.tokens[ud].accepted = true
	}
}

// code checks rc is OK or a code of hcomm.h, with a message on failure.
func (r *abiRun) code(what string, rc int) int {
	r.t.Helper()
	if abiTrace {
		r.t.Logf("%s = %d", what, rc)
	}
	if !validCode(rc) {
		r.t.Fatalf("%s: returned %d, not a code of hcomm.h", what, rc)
	}
	if rc < 0 && fzLastErrorLen() == 0 {
		r.t.Fatalf("%s: %d with an empty hcomm_last_error", what, rc)
	}
	return rc
}

func validCode(rc int) bool {
	switch int32(rc) {
	case codeOK, codeENOENT, codeEIO, codeEBADF, codeEAGAIN, codeENOMEM, codeEFAULT, codeENODEV, codeEINVAL,
		codeEMFILE, codeEOPNOTSUPP, codeESHUTDOWN, codeETIMEDOUT, codeEINPROGRESS, codeESTALE, codeECANCELED,
		codeEACCES, codeEBUSY, codeEFORK, codeENXIO, codeECONNRESET, codeECONNREFUSED:
		return true
	}
	return false
}

func (r *abiRun) step() {
	op := r.p.u8() % opCount
	switch op {
	case opInit:
		r.init()
	case opAlloc:
		h, n, dev := r.handle(), r.p.size(), r.p.flag()
		p, errno := fzAlloc(h, n, dev)
		if p == 0 {
			if !validCode(-errno) || errno == 0 {
				r.t.Fatalf("hcomm_alloc_*_mem(%d, dev %v) = NULL with errno %d", n, dev, errno)
			}
			r.code("alloc", -errno)
			return
		}
		if dev {
			r.dev = append(r.dev, p)
		} else {
			r.host = append(r.host, p)
		}
	case opFree:
		h, p, dev := r.handle(), r.ptr(), r.p.flag()
		if r.code("hcomm_free_*_mem", fzFree(h, p, dev)) == int(codeOK) {
			r.freed = append(r.freed, p)
		}
	case opRegister:
		h := r.handle()
		var p uintptr
		var n uint64
		// Memory the program owns: foreign pages (any sub-range, any
		// length up to their end), or a pool block of the same handle.
		if k := r.p.u8(); k%4 != 3 || len(r.host) == 0 {
			off := uint64(r.p.u16()) % uint64(fzForeignSize)
			if r.p.flag() {
				off &^= 4095
			}
			p = fzForeign() + uintptr(off)
			n = uint64(r.p.u8()) << 12
			if r.p.flag() {
				n += uint64(r.p.u8())
			}
			n = min(n, uint64(fzForeignSize)-off)
		} else {
			p = r.host[int(k/4)%len(r.host)]
			n = 4096
		}
		if r.code("hcomm_register_host_mem", fzRegister(h, p, n)) == int(codeOK) {
			r.host = append(r.host, p)
		}
	case opUnregister:
		r.code("hcomm_unregister_host_mem", fzUnregister(r.handle(), r.ptr()))
	case opSubmit:
		h, null, src, dst, n, cb := r.handle(), r.p.u8()%16 == 15, r.ptr(), r.ptr(), r.p.size(), r.p.flag()
		var ud uintptr
		if cb {
			ud = r.token(h, "submit")
		} else {
			ud = uintptr(r.p.u64())
		}
		id, rc := fzSubmit(h, null, src, dst, n, cb, ud)
		if r.code("hcomm_submit_transfer", rc) == int(codeOK) {
			if id == 0 {
				r.t.Fatalf("hcomm_submit_transfer: OK with id 0")
			}
			r.ids = append(r.ids, ident{h: h, id: id})
			if cb {
				r.accept(ud)
			}
		} else if !null && id != 0 {
			r.t.Fatalf("hcomm_submit_transfer: %d with id %d", rc, id)
		}
	case opBatch:
		r.batch()
	case opWait:
		h := r.handle()
		var id uint64
		forever := false
		if k := r.p.u8(); k%4 != 0 && len(r.ids) > 0 {
			x := r.ids[int(k/4)%len(r.ids)]
			id, forever = x.id, x.h == h && r.p.flag()
		} else {
			id = r.p.u64()
		}
		r.code("hcomm_wait_completion", fzWait(h, id, int(r.p.u8()%8), forever))
	case opConnect:
		h := r.handle()
		addrs := []string{"", "x", "127.0.0.1:1", "256.1.1.1:5", "[::1]:1", "127.0.0.1", ":", "127.0.0.1:99999"}
		var addr *string
		if k := r.p.u8(); k%9 != 8 {
			addr = &addrs[k%9]
		}
		peer, rc := fzConnect(h, addr, int(r.p.u8()%64), r.p.flag())
		if r.code("hcomm_connect_timeout", rc) == int(codeOK) {
			r.peers = append(r.peers, peer)
		}
	case opListenAddr:
		h, null, n := r.handle(), r.p.flag(), uint64(r.p.u8())
		buf, rc := fzListenAddr(h, null, n)
		if r.code("hcomm_listen_addr", rc) == int(codeOK) {
			if n == 0 || n > 256 {
				n = 256
			}
			if !null && !containsNUL(buf[:n]) {
				r.t.Fatalf("hcomm_listen_addr(len %d): OK without a NUL in the buffer: %q", n, buf[:n])
			}
		}
	case opRemoteOffset:
		r.code("hcomm_remote_offset", second(fzRemoteOffset(r.handle(), r.ptr(), r.p.flag())))
	case opOpenFile:
		null, path, flags, depth, nullSize := r.p.u8()%16 == 15, r.path(false), r.p.u32()%4, r.p.u32()%4, r.p.flag()
		if r.p.flag() {
			flags = r.p.u32()
		}
		if r.p.flag() {
			depth = r.p.u32()
		}
		fh, rc := fzOpenFile(null, path, flags, depth, nullSize)
		if r.code("hcomm_open_file", rc) == int(codeOK) {
			r.live = append(r.live, fh)
			// The whole file is its device space.
			r.dev = append(r.dev, uintptr(devAddrBase))
		}
	case opAddTarget:
		h, null := r.handle(), r.p.u8()%16 == 15
		tc := targetConfig{Target: int32(r.p.u8() % 6), Flags: uint32(r.p.u8() % 3)}
		path := r.path(tc.Target == targetFile)
		tc.DevMemSize = r.devMem()
		k, rc := fzAddTarget(h, null, tc, path, r.p.flag())
		if r.code("hcomm_add_target", rc) == int(codeOK) && k != 0xbad {
			r.targets = append(r.targets, k)
		}
	case opAllocTarget:
		h := r.handle()
		k := uint32(r.p.u8() % 10)
		if len(r.targets) > 0 && r.p.flag() {
			k = r.targets[0]
		}
		p, errno := fzAllocTarget(h, k, r.p.size())
		if p == 0 {
			if !validCode(-errno) || errno == 0 {
				r.t.Fatalf("hcomm_alloc_target_mem = NULL with errno %d", errno)
			}
			return
		}
		r.dev = append(r.dev, p)
	case opCopy:
		h, dst, src, n := r.handle(), r.ptr(), r.ptr(), r.p.size()
		chunk, depth := r.p.size(), r.p.u32()%16
		if r.p.flag() {
			depth = r.p.u32()
		}
		cb, nullID := r.p.flag(), r.p.u8()%16 == 15
		var ud uintptr
		if cb {
			ud = r.token(h, "copy")
		}
		id, rc := fzCopy(h, dst, src, n, chunk, depth, cb, ud, nullID)
		if r.code("hcomm_copy", rc) == int(codeOK) {
			if cb {
				r.accept(ud)
			}
			if !nullID {
				r.ids = append(r.ids, ident{h: h, id: id, copy: true})
			}
		}
	case opFinalize:
		r.finalize(r.handle(), r.p.u8())
	case opMisc:
		switch r.p.u8() % 4 {
		case 3:
			r.code("hcomm_disconnect", fzDisconnect(r.handle(), r.p.u32()%4))
		case 0:
			if fzStrerrorLen(int(int32(r.p.u32()))) == 0 {
				r.t.Fatalf("hcomm_strerror: empty")
			}
		case 1:
			if fzStrerrorLen(-int(r.p.u8())) == 0 {
				r.t.Fatalf("hcomm_strerror: empty")
			}
		default:
			if !fzVersion(r.p.flag()) {
				r.t.Fatalf("hcomm_version: empty")
			}
		}
	}
}

func second[A, B any](_ A, b B) B { return b }

func containsNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}

func (r *abiRun) devMem() uint64 {
	switch r.p.u8() % 4 {
	case 0:
		return 0
	case 1:
		return 1 << 20
	case 2:
		return uint64(r.p.u16()) << 12
	}
	return r.p.u64()
}

// init: a configuration near the defaults or anything (pools stay small:
// the default 256 MiB per program would be most of the fuzzer's time).
func (r *abiRun) init() {
	nullH, nullCfg := r.p.u8()%16 == 15, r.p.u8()%16 == 15
	var c config
	switch r.p.u8() % 6 {
	case 0:
		c.PoolSize = 1 << 20
	case 1:
		c.PoolSize = 4 << 20
	case 2:
		c.PoolSize = 64 << 10
	case 3:
		c.PoolSize = uint64(r.p.u16())
	case 4:
		c.PoolSize = r.p.u64() | 1<<41 // beyond any pool: refused
	default:
		c.PoolSize = 1 << 20
	}
	switch r.p.u8() % 6 {
	case 0:
		c.QueueDepth = 0
	case 1:
		c.QueueDepth = 8
	case 2:
		c.QueueDepth = 3
	case 3:
		c.QueueDepth = 1
	default:
		c.QueueDepth = r.p.u32()
		if c.QueueDepth <= 1<<15 {
			c.QueueDepth %= 256
		}
	}
	c.Target = int32(r.p.u8() % 6)
	if c.Target == 5 {
		c.Target = int32(r.p.u32())
	}
	switch r.p.u8() % 5 {
	case 0:
		c.Align = 0
	case 1:
		c.Align = 4096
	case 2:
		c.Align = 48
	case 3:
		c.Align = 1 << (r.p.u8() % 32)
	default:
		c.Align = r.p.u32()
	}
	c.Flags = uint32(r.p.u8() % 3)
	path := r.path(c.Target == targetFile)
	if c.Target != targetFile && c.Target != targetRemote && r.p.flag() {
		path = nil
	}
	c.DevMemSize = r.devMem()
	if nullCfg {
		// NULL: all defaults (a 256 MiB pool of the mock): not worth
		// its time per program; NULL h is the interesting half.
		nullH = true
	}
	h, rc := fzInit(nullH, nullCfg, c, path)
	if r.code(fmt.Sprintf("hcomm_init(%+v)", c), rc) != int(codeOK) {
		if !nullH && h != 0 {
			r.t.Fatalf("hcomm_init: %d with *h = %#x (want 0)", rc, h)
		}
		return
	}
	r.live = append(r.live, h)
	if c.Target == targetRemote {
		r.remote[h] = true
	}
}

func (r *abiRun) batch() {
	h := r.handle()
	n := int(r.p.u8() % 17)
	if r.p.u8()%16 == 15 {
		n = -1 - int(r.p.u8()%4)
	}
	null := r.p.u8()%16 == 15
	args := make([]uintptr, 5*16)
	uds := make([]uintptr, 16)
	cbs := make([]bool, 16)
	for i := range max(n, 0) {
		a := args[5*i:]
		a[0], a[1], a[2] = r.ptr(), r.ptr(), uintptr(r.p.size())
		if cbs[i] = r.p.flag(); cbs[i] {
			a[3] = 1
			uds[i] = r.token(h, "batch")
		} else {
			uds[i] = uintptr(r.p.u32())
		}
		a[4] = uds[i]
	}
	ids := make([]uint64, 16)
	rc := r.code("hcomm_submit_batch", fzBatch(h, args, n, null, ids))
	for i := range max(n, 0) {
		if null {
			break
		}
		switch {
		case ids[i] != 0 && ids[i] != 0xdeadbeef:
			r.ids = append(r.ids, ident{h: h, id: ids[i]})
			if cbs[i] {
				r.accept(uds[i])
			}
		case rc == int(codeOK):
			r.t.Fatalf("hcomm_submit_batch: OK, transfer %d of %d has id %#x", i, n, ids[i])
		}
	}
}

func (r *abiRun) finalize(h uint64, how byte) {
	rc := r.code("hcomm_finalize", fzFinalize(h, int(how%8), how%2 == 1))
	for i, x := range r.live {
		if x == h {
			if rc == int(codeEBADF) {
				r.t.Fatalf("hcomm_finalize(%#x): EBADF for a live handle", h)
			}
			r.live = append(r.live[:i], r.live[i+1:]...)
			r.dead = append(r.dead, h)
			r.checkCallbacks(h)
			return
		}
	}
	if rc != int(codeEBADF) {
		r.t.Fatalf("hcomm_finalize(%#x): %d for a handle that is not live, want EBADF", h, rc)
	}
}

// checkCallbacks: once h is finalized, each accepted callback of h ran
// once, each refused one never.
func (r *abiRun) checkCallbacks(h uint64) {
	for k, tk := range r.tokens {
		if tk.h != h {
			continue
		}
		want := 0
		if tk.accepted {
			want = 1
		}
		if got := fzCalls(k); got != want {
			r.t.Fatalf("%s (token %d, handle %#x, accepted %v): %d callbacks after hcomm_finalize, want %d (status %d)",
				tk.what, k, h, tk.accepted, got, want, fzStatus(k))
		}
	}
}

// finish finalizes what is left and checks every callback.
func (r *abiRun) finish() {
	for len(r.live) > 0 {
		r.finalize(r.live[0], 1)
	}
	for k, tk := range r.tokens {
		if !tk.accepted && fzCalls(k) != 0 {
			r.t.Fatalf("%s (token %d): refused, yet %d callbacks", tk.what, k, fzCalls(k))
		}
	}
	if n := fzWild(); n != 0 && len(r.tokens) < fzTokens {
		r.t.Fatalf("%d callbacks with a user_data the program never passed with a callback", n)
	}
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		if e.Name() != "data" {
			os.RemoveAll(filepath.Join(r.dir, e.Name()))
		}
	}
}

// abiTrace (HCOMM_ABIFUZZ_TRACE=1) logs every call and its code.
var abiTrace = os.Getenv("HCOMM_ABIFUZZ_TRACE") == "1"

// abiHang bounds one program: its longest waits are a few connect and
// finalize timeouts of at most 64 ms each.
const abiHang = 20 * time.Second
