package main

/*
#include <stdint.h>
#include <stdlib.h>
#include "hcomm.h"

// flags is in an anonymous union (with its old name, reserved), which cgo
// does not name.
static inline uint32_t hcommc_cfg_flags(const hcomm_config_t *c) { return c->flags; }

// Defined in hcomm.c.
void hcommc_callback(uintptr_t cb, uint64_t id, int status, uintptr_t user_data);
void hcommc_set_error(const char *msg, size_t n);
*/
import "C"

import (
	"unsafe"

	"github.com/hcomm-go/hcomm"
	"github.com/hcomm-go/hcomm/backend/ucx"
)

// The Go codes and the header's must agree: each line fails to compile
// (constant index out of range) when they differ.
var _ = [1]struct{}{}[codeOK-C.HCOMM_OK]
var _ = [1]struct{}{}[codeENOENT-C.HCOMM_ENOENT]
var _ = [1]struct{}{}[codeEIO-C.HCOMM_EIO]
var _ = [1]struct{}{}[codeEBADF-C.HCOMM_EBADF]
var _ = [1]struct{}{}[codeEAGAIN-C.HCOMM_EAGAIN]
var _ = [1]struct{}{}[codeENOMEM-C.HCOMM_ENOMEM]
var _ = [1]struct{}{}[codeEFAULT-C.HCOMM_EFAULT]
var _ = [1]struct{}{}[codeENODEV-C.HCOMM_ENODEV]
var _ = [1]struct{}{}[codeEINVAL-C.HCOMM_EINVAL]
var _ = [1]struct{}{}[codeEMFILE-C.HCOMM_EMFILE]
var _ = [1]struct{}{}[codeEOPNOTSUPP-C.HCOMM_EOPNOTSUPP]
var _ = [1]struct{}{}[codeESHUTDOWN-C.HCOMM_ESHUTDOWN]
var _ = [1]struct{}{}[codeETIMEDOUT-C.HCOMM_ETIMEDOUT]
var _ = [1]struct{}{}[codeEINPROGRESS-C.HCOMM_EINPROGRESS]
var _ = [1]struct{}{}[codeESTALE-C.HCOMM_ESTALE]
var _ = [1]struct{}{}[codeECANCELED-C.HCOMM_ECANCELED]
var _ = [1]struct{}{}[codeEACCES-C.HCOMM_EACCES]
var _ = [1]struct{}{}[codeEBUSY-C.HCOMM_EBUSY]
var _ = [1]struct{}{}[codeEFORK-C.HCOMM_EFORK]
var _ = [1]struct{}{}[codeENXIO-C.HCOMM_ENXIO]
var _ = [1]struct{}{}[codeECONNRESET-C.HCOMM_ECONNRESET]
var _ = [1]struct{}{}[codeECONNREFUSED-C.HCOMM_ECONNREFUSED]

// The header's version is the module's (hcomm.Version).
var _ = [1]struct{}{}[hcomm.VersionMajor-C.HCOMM_VERSION_MAJOR]
var _ = [1]struct{}{}[hcomm.VersionMinor-C.HCOMM_VERSION_MINOR]
var _ = [1]struct{}{}[hcomm.VersionPatch-C.HCOMM_VERSION_PATCH]
var _ = [1]struct{}{}[uint64(devAddrBase)-uint64(C.HCOMM_DEV_ADDR_BASE)]
var _ = [1]struct{}{}[targetMock-C.HCOMM_TARGET_MOCK+targetFile-C.HCOMM_TARGET_FILE+targetVFIO-C.HCOMM_TARGET_VFIO+targetMemory-C.HCOMM_TARGET_MEMORY]
var _ = [1]struct{}{}[targetRemote-C.HCOMM_TARGET_REMOTE]
var _ = [1]struct{}{}[remoteShm-C.HCOMM_REMOTE_SHM]
var _ = [1]struct{}{}[uint64(remoteAddrBase)-uint64(C.HCOMM_REMOTE_ADDR_BASE)]
var _ = [1]struct{}{}[remotePeerShift-C.HCOMM_REMOTE_PEER_SHIFT]
var _ = [1]struct{}{}[uint64(notifyAddrBase)-uint64(C.HCOMM_NOTIFY_ADDR_BASE)]
var _ = [1]struct{}{}[ucx.MaxNotify-C.HCOMM_NOTIFY_MAX]

// cTransfer's layout is hcomm_transfer_t's (submitBatch reads C memory
// through it): same size, same offsets.
var _ = [1]struct{}{}[unsafe.Sizeof(cTransfer{})-C.sizeof_hcomm_transfer_t]
var _ = [1]struct{}{}[unsafe.Offsetof(cTransfer{}.Dst)-unsafe.Offsetof(C.hcomm_transfer_t{}.dst_ptr)]
var _ = [1]struct{}{}[unsafe.Offsetof(cTransfer{}.Size)-unsafe.Offsetof(C.hcomm_transfer_t{}.size)]
var _ = [1]struct{}{}[unsafe.Offsetof(cTransfer{}.Callback)-unsafe.Offsetof(C.hcomm_transfer_t{}.callback)]
var _ = [1]struct{}{}[unsafe.Offsetof(cTransfer{}.UserData)-unsafe.Offsetof(C.hcomm_transfer_t{}.user_data)]
var _ = [1]struct{}{}[unsafe.Offsetof(cTransfer{}.ID)-unsafe.Offsetof(C.hcomm_transfer_t{}.id)]

func init() { detail = cSetError }

// cSetError stores msg as the calling thread's hcomm_last_error (the Go
// side of an hcommgo_* call runs on the C caller's thread). The string's
// bytes are passed for the duration of the call only: no Go pointer is
// kept by C.
func cSetError(msg string) {
	if msg == "" {
		return
	}
	C.hcommc_set_error((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

// cInvoke runs a C callback: one cgo call from the engine's goroutine.
func cInvoke(cb, ud uintptr, id uint64, status int32) {
	C.hcommc_callback(C.uintptr_t(cb), C.uint64_t(id), C.int(status), C.uintptr_t(ud))
}

//export hcommgo_init
func hcommgo_init(h *C.hcomm_handle_t, c *C.hcomm_config_t) C.int {
	cfg := config{
		PoolSize:   uint64(c.mem_pool_size),
		QueueDepth: uint32(c.queue_depth),
		Align:      uint32(c.align_size),
		Target:     int32(c.target),
		Flags:      uint32(C.hcommc_cfg_flags(c)),
		DevMemSize: uint64(c.dev_mem_size),
	}
	if c.target_path != nil {
		cfg.Path = C.GoString(c.target_path)
	}
	s, code, err := open(cfg, cInvoke)
	if err != nil {
		logger.Warn("hcomm_init failed", "code", code, "err", err)
		cSetError("hcomm_init: " + err.Error())
		return C.int(code)
	}
	*h = C.hcomm_handle_t(s.handle)
	return C.int(codeOK)
}

//export hcommgo_alloc
func hcommgo_alloc(h C.hcomm_handle_t, size C.size_t, dev C.int, code *C.int) C.uintptr_t {
	s := lookup(uint64(h))
	if s == nil {
		*code = C.int(codeEBADF)
		return 0
	}
	var p uintptr
	var c int32
	if dev != 0 {
		p, c = s.allocDev(uint64(size))
	} else {
		p, c = s.allocHost(uint64(size))
	}
	*code = C.int(c)
	return C.uintptr_t(p)
}

//export hcommgo_free
func hcommgo_free(h C.hcomm_handle_t, p C.uintptr_t, dev C.int) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	if dev != 0 {
		return C.int(s.freeDev(uintptr(p)))
	}
	return C.int(s.freeHost(uintptr(p)))
}

//export hcommgo_register
func hcommgo_register(h C.hcomm_handle_t, p unsafe.Pointer, n C.size_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	// C memory, held by a Go slice in the engine: the garbage collector
	// ignores pointers outside its heap.
	return C.int(s.registerHost(p, uintptr(n)))
}

//export hcommgo_unregister
func hcommgo_unregister(h C.hcomm_handle_t, p C.uintptr_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	return C.int(s.unregisterHost(uintptr(p)))
}

//export hcommgo_submit
func hcommgo_submit(h C.hcomm_handle_t, src, dst C.uintptr_t, size C.size_t, cb, ud C.uintptr_t, id *C.uint64_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	i, code := s.submit(uintptr(src), uintptr(dst), uintptr(size), uintptr(cb), uintptr(ud))
	*id = C.uint64_t(i)
	return C.int(code)
}

//export hcommgo_submit_batch
func hcommgo_submit_batch(h C.hcomm_handle_t, ts *C.hcomm_transfer_t, n C.int) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	// C memory read through a Go struct of integers (layout checked above).
	return C.int(s.submitBatch(unsafe.Slice((*cTransfer)(unsafe.Pointer(ts)), int(n))))
}

//export hcommgo_wait
func hcommgo_wait(h C.hcomm_handle_t, id C.uint64_t, timeoutMs C.int) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	return C.int(s.wait(uint64(id), int(timeoutMs)))
}

//export hcommgo_connect
func hcommgo_connect(h C.hcomm_handle_t, addr *C.char, timeoutMs C.int, peer *C.uint32_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	p, code := s.connect(C.GoString(addr), int(timeoutMs))
	*peer = C.uint32_t(p)
	return C.int(code)
}

//export hcommgo_disconnect
func hcommgo_disconnect(h C.hcomm_handle_t, peer C.uint32_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	return C.int(s.disconnect(uint32(peer)))
}

//export hcommgo_listen_addr
func hcommgo_listen_addr(h C.hcomm_handle_t, buf *C.char, n C.size_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	// C memory, written through a slice for the duration of the call.
	return C.int(s.listenAddr(unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))))
}

//export hcommgo_remote_offset
func hcommgo_remote_offset(h C.hcomm_handle_t, p C.uintptr_t, off *C.uint64_t) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	o, code := s.remoteOffset(uintptr(p))
	*off = C.uint64_t(o)
	return C.int(code)
}

//export hcommgo_wait_notification
func hcommgo_wait_notification(h C.hcomm_handle_t, n *C.hcomm_notification_t, timeoutMs C.int) C.int {
	s := lookup(uint64(h))
	if s == nil {
		return C.int(codeEBADF)
	}
	note, code := s.waitNotification(int(timeoutMs))
	if code == codeOK {
		m := note.Msg()
		n.peer, n.size, n.seq = C.uint32_t(note.Peer), C.uint32_t(len(m)), C.uint64_t(note.Seq)
		// C memory, written through a slice for the duration of the call.
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&n.msg[0])), len(n.msg)), m)
	}
	return C.int(code)
}

//export hcommgo_finalize
func hcommgo_finalize(h C.hcomm_handle_t, timeoutMs C.int) C.int {
	return C.int(finalize(uint64(h), int(timeoutMs)))
}

// main is required by -buildmode=c-shared and never runs.
func main() {}
