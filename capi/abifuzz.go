//go:build hcommfuzz

package main

// The C side of FuzzABI (abifuzz_test.go): each wrapper calls one public
// hcomm_* function of hcomm.h exactly as a C program does — the C wrappers
// of hcomm.c, targets.c and files.c, then the hcommgo_* exports — with the
// arguments the fuzzer chose, NULL pointers included. Built only with
// -tags hcommfuzz (make fuzz), never into libhcomm.so: cgo is not allowed
// in test files.

/*
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "hcomm.h"

// Callback accounting: user_data is a token index; every callback counts.
#define FZ_TOKENS 8192
static uint32_t fz_calls[FZ_TOKENS];
static int32_t fz_status[FZ_TOKENS];
static uint32_t fz_wild; // callbacks whose user_data named no token

static void fz_cb(uint64_t id, int status, void *ud) {
	uintptr_t k = (uintptr_t)ud;
	(void)id;
	if (k >= FZ_TOKENS) {
		__atomic_add_fetch(&fz_wild, 1, __ATOMIC_SEQ_CST);
		return;
	}
	__atomic_store_n(&fz_status[k], status, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&fz_calls[k], 1, __ATOMIC_SEQ_CST);
}

static void fz_reset(void) {
	memset(fz_calls, 0, sizeof fz_calls);
	fz_wild = 0;
}
static uint32_t fz_count(int k) { return __atomic_load_n(&fz_calls[k], __ATOMIC_SEQ_CST); }
static int32_t fz_stat(int k) { return __atomic_load_n(&fz_status[k], __ATOMIC_SEQ_CST); }
static uint32_t fz_wilds(void) { return __atomic_load_n(&fz_wild, __ATOMIC_SEQ_CST); }
static hcomm_callback_t fz_callback(int on) { return on ? fz_cb : NULL; }

// Foreign memory: never hcomm's, page aligned, alive for the whole process.
#define FZ_FOREIGN (64 << 10)
static void *fz_foreign_buf;
static uintptr_t fz_foreign(void) {
	if (fz_foreign_buf == NULL) {
		fz_foreign_buf = aligned_alloc(4096, FZ_FOREIGN);
		memset(fz_foreign_buf, 0x5a, FZ_FOREIGN);
	}
	return (uintptr_t)fz_foreign_buf;
}

static int fz_init(uint64_t *h, int nullh, int nullcfg, size_t pool, uint32_t depth, uint32_t align,
                   int32_t target, uint32_t flags, const char *path, uint64_t devmem) {
	hcomm_config_t c = {.mem_pool_size = pool, .queue_depth = depth, .align_size = align, .target = target,
	                    .flags = flags, .target_path = path, .dev_mem_size = devmem};
	return hcomm_init(nullh ? NULL : (hcomm_handle_t *)h, nullcfg ? NULL : &c);
}

static uintptr_t fz_alloc(uint64_t h, size_t n, int dev, int *err) {
	errno = 0;
	void *p = dev ? hcomm_alloc_dev_mem(h, n) : hcomm_alloc_host_mem(h, n);
	*err = errno;
	return (uintptr_t)p;
}

static uintptr_t fz_alloc_target(uint64_t h, uint32_t k, size_t n, int *err) {
	errno = 0;
	void *p = hcomm_alloc_target_mem(h, k, n);
	*err = errno;
	return (uintptr_t)p;
}

static int fz_free(uint64_t h, uintptr_t p, int dev) {
	return dev ? hcomm_free_dev_mem(h, (void *)p) : hcomm_free_host_mem(h, (void *)p);
}

static int fz_register(uint64_t h, uintptr_t p, size_t n) { return hcomm_register_host_mem(h, (void *)p, n); }
static int fz_unregister(uint64_t h, uintptr_t p) { return hcomm_unregister_host_mem(h, (void *)p); }

static int fz_submit(uint64_t h, int nullt, uintptr_t src, uintptr_t dst, size_t n, int cb, uintptr_t ud,
                     uint64_t *id) {
	hcomm_transfer_t t = {.src_ptr = (void *)src, .dst_ptr = (void *)dst, .size = n, .callback = fz_callback(cb),
	                      .user_data = (void *)ud, .id = 0xdeadbeef};
	int rc = hcomm_submit_transfer(h, nullt ? NULL : &t);
	*id = t.id;
	return rc;
}

// fz_batch: args holds 5 words per transfer (src, dst, size, callback?, user_data); n may be
// negative or ts NULL; ids gets each transfer's id (room for max(n, 0)).
static int fz_batch(uint64_t h, const uintptr_t *args, int n, int nullts, uint64_t *ids) {
	hcomm_transfer_t ts[16];
	int m = n < 0 ? 0 : n;
	for (int i = 0; i < m; i++) {
		const uintptr_t *a = args + 5 * i;
		ts[i] = (hcomm_transfer_t){.src_ptr = (void *)a[0], .dst_ptr = (void *)a[1], .size = a[2],
		                           .callback = fz_callback((int)a[3]), .user_data = (void *)a[4], .id = 0xdeadbeef};
	}
	int rc = hcomm_submit_batch(h, nullts ? NULL : ts, n);
	for (int i = 0; i < m; i++) {
		ids[i] = ts[i].id;
	}
	return rc;
}

static int fz_wait(uint64_t h, uint64_t id, int timeout, int forever) {
	return forever ? hcomm_wait_completion(h, id) : hcomm_wait_completion_timeout(h, id, timeout);
}

static int fz_connect(uint64_t h, const char *addr, int timeout, int nullpeer, uint32_t *peer) {
	return hcomm_connect_timeout(h, addr, timeout, nullpeer ? NULL : peer);
}

static int fz_listen_addr(uint64_t h, int nullbuf, size_t n, char *out) {
	char buf[256];
	memset(buf, 0x7f, sizeof buf);
	if (n > sizeof buf) {
		n = sizeof buf;
	}
	int rc = hcomm_listen_addr(h, nullbuf ? NULL : buf, n);
	memcpy(out, buf, sizeof buf);
	return rc;
}

static int fz_remote_offset(uint64_t h, uintptr_t p, int nulloff, uint64_t *off) {
	return hcomm_remote_offset(h, (const void *)p, nulloff ? NULL : off);
}

static int fz_open_file(uint64_t *fh, int nullfh, const char *path, uint32_t flags, uint32_t depth, int nullsize,
                        uint64_t *size, uint32_t *granted) {
	return hcomm_open_file(nullfh ? NULL : (hcomm_handle_t *)fh, path, flags, depth, nullsize ? NULL : size,
	                       nullsize ? NULL : granted);
}

static int fz_add_target(uint64_t h, int nulltc, int32_t target, uint32_t flags, const char *path, uint64_t devmem,
                         int nullidx, uint32_t *idx) {
	hcomm_target_config_t tc = {.target = target, .flags = flags, .target_path = path, .dev_mem_size = devmem};
	return hcomm_add_target(h, nulltc ? NULL : &tc, nullidx ? NULL : idx);
}

static int fz_copy(uint64_t h, uintptr_t dst, uintptr_t src, size_t n, size_t chunk, uint32_t depth, int cb,
                   uintptr_t ud, int nullid, uint64_t *id) {
	return hcomm_copy(h, (void *)dst, (const void *)src, n, chunk, depth, fz_callback(cb), (void *)ud,
	                  nullid ? NULL : id);
}

static int fz_finalize(uint64_t h, int timeout, int forever) {
	return forever ? hcomm_finalize(h) : hcomm_finalize_timeout(h, timeout);
}

static uintptr_t fz_target_addr(uint32_t k, uint64_t off) { return (uintptr_t)hcomm_target_addr(k, off); }
static uintptr_t fz_remote_addr(uint32_t peer, uint64_t off) { return (uintptr_t)hcomm_remote_addr(peer, off); }
static size_t fz_strerror_len(int code) { return strlen(hcomm_strerror(code)); }
static size_t fz_last_error_len(void) { return strlen(hcomm_last_error()); }
static int fz_version(int null) {
	int a, b, c;
	const char *v = null ? hcomm_version(NULL, NULL, NULL) : hcomm_version(&a, &b, &c);
	return v != NULL && strlen(v) > 0;
}
*/
import "C"

import "unsafe"

// cstr is s as C memory (nil: NULL); free with freeC.
func cstr(s *string) *C.char {
	if s == nil {
		return nil
	}
	return C.CString(*s)
}

func freeC(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}

func b2i(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func fzReset()            { C.fz_reset() }
func fzCalls(k int) int   { return int(C.fz_count(C.int(k))) }
func fzStatus(k int) int  { return int(C.fz_stat(C.int(k))) }
func fzWild() int         { return int(C.fz_wilds()) }
func fzForeign() uintptr  { return uintptr(C.fz_foreign()) }
func fzLastErrorLen() int { return int(C.fz_last_error_len()) }

const fzTokens = int(C.FZ_TOKENS)
const fzForeignSize = int(C.FZ_FOREIGN)

func fzInit(nullH, nullCfg bool, c config, path *string) (uint64, int) {
	var h uint64 = 0xbad
	p := cstr(path)
	defer freeC(p)
	rc := C.fz_init((*C.uint64_t)(&h), b2i(nullH), b2i(nullCfg), C.size_t(c.PoolSize), C.uint32_t(c.QueueDepth),
		C.uint32_t(c.Align), C.int32_t(c.Target), C.uint32_t(c.Flags), p, C.uint64_t(c.DevMemSize))
	return h, int(rc)
}

func fzAlloc(h uint64, n uint64, dev bool) (uintptr, int) {
	var e C.int
	p := C.fz_alloc(C.uint64_t(h), C.size_t(n), b2i(dev), &e)
	return uintptr(p), int(e)
}

func fzAllocTarget(h uint64, k uint32, n uint64) (uintptr, int) {
	var e C.int
	p := C.fz_alloc_target(C.uint64_t(h), C.uint32_t(k), C.size_t(n), &e)
	return uintptr(p), int(e)
}

func fzFree(h uint64, p uintptr, dev bool) int {
	return int(C.fz_free(C.uint64_t(h), C.uintptr_t(p), b2i(dev)))
}

func fzRegister(h uint64, p uintptr, n uint64) int {
	return int(C.fz_register(C.uint64_t(h), C.uintptr_t(p), C.size_t(n)))
}

func fzUnregister(h uint64, p uintptr) int {
	return int(C.fz_unregister(C.uint64_t(h), C.uintptr_t(p)))
}

func fzSubmit(h uint64, nullT bool, src, dst uintptr, n uint64, cb bool, ud uintptr) (uint64, int) {
	var id uint64
	rc := C.fz_submit(C.uint64_t(h), b2i(nullT), C.uintptr_t(src), C.uintptr_t(dst), C.size_t(n), b2i(cb), C.uintptr_t(ud), (*C.uint64_t)(&id))
	return id, int(rc)
}

// fzBatch: args has 5 words per transfer; ids gets max(n, 0) IDs.
func fzBatch(h uint64, args []uintptr, n int, nullTs bool, ids []uint64) int {
	var a *C.uintptr_t
	if len(args) > 0 {
		a = (*C.uintptr_t)(unsafe.Pointer(&args[0]))
	}
	var id *C.uint64_t
	if len(ids) > 0 {
		id = (*C.uint64_t)(unsafe.Pointer(&ids[0]))
	}
	return int(C.fz_batch(C.uint64_t(h), a, C.int(n), b2i(nullTs), id))
}

func fzWait(h, id uint64, timeout int, forever bool) int {
	return int(C.fz_wait(C.uint64_t(h), C.uint64_t(id), C.int(timeout), b2i(forever)))
}

func fzConnect(h uint64, addr *string, timeout int, nullPeer bool) (uint32, int) {
	a := cstr(addr)
	defer freeC(a)
	var peer uint32
	rc := C.fz_connect(C.uint64_t(h), a, C.int(timeout), b2i(nullPeer), (*C.uint32_t)(&peer))
	return peer, int(rc)
}

func fzDisconnect(h uint64, peer uint32) int {
	return int(C.hcomm_disconnect(C.uint64_t(h), C.uint32_t(peer)))
}

func fzListenAddr(h uint64, nullBuf bool, n uint64) ([]byte, int) {
	out := make([]byte, 256)
	rc := C.fz_listen_addr(C.uint64_t(h), b2i(nullBuf), C.size_t(n), (*C.char)(unsafe.Pointer(&out[0])))
	return out, int(rc)
}

func fzRemoteOffset(h uint64, p uintptr, nullOff bool) (uint64, int) {
	var off uint64
	rc := C.fz_remote_offset(C.uint64_t(h), C.uintptr_t(p), b2i(nullOff), (*C.uint64_t)(&off))
	return off, int(rc)
}

func fzOpenFile(nullFH bool, path *string, flags, depth uint32, nullSize bool) (uint64, int) {
	p := cstr(path)
	defer freeC(p)
	var fh uint64 = 0xbad
	var size uint64
	var granted uint32
	rc := C.fz_open_file((*C.uint64_t)(&fh), b2i(nullFH), p, C.uint32_t(flags), C.uint32_t(depth), b2i(nullSize),
		(*C.uint64_t)(&size), (*C.uint32_t)(&granted))
	return fh, int(rc)
}

func fzAddTarget(h uint64, nullTC bool, tc targetConfig, path *string, nullIdx bool) (uint32, int) {
	p := cstr(path)
	defer freeC(p)
	var k uint32 = 0xbad
	rc := C.fz_add_target(C.uint64_t(h), b2i(nullTC), C.int32_t(tc.Target), C.uint32_t(tc.Flags), p,
		C.uint64_t(tc.DevMemSize), b2i(nullIdx), (*C.uint32_t)(&k))
	return k, int(rc)
}

func fzCopy(h uint64, dst, src uintptr, n, chunk uint64, depth uint32, cb bool, ud uintptr, nullID bool) (uint64, int) {
	var id uint64
	rc := C.fz_copy(C.uint64_t(h), C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.size_t(chunk), C.uint32_t(depth),
		b2i(cb), C.uintptr_t(ud), b2i(nullID), (*C.uint64_t)(&id))
	return id, int(rc)
}

func fzFinalize(h uint64, timeout int, forever bool) int {
	return int(C.fz_finalize(C.uint64_t(h), C.int(timeout), b2i(forever)))
}

func fzTargetAddr(k uint32, off uint64) uintptr {
	return uintptr(C.fz_target_addr(C.uint32_t(k), C.uint64_t(off)))
}
func fzRemoteAddr(peer uint32, off uint64) uintptr {
	return uintptr(C.fz_remote_addr(C.uint32_t(peer), C.uint64_t(off)))
}
func fzStrerrorLen(code int) int { return int(C.fz_strerror_len(C.int(code))) }
func fzVersion(null bool) bool   { return C.fz_version(b2i(null)) != 0 }
