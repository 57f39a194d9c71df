// Command capi is libhcomm.so: the C ABI of the hcomm engine, built with
//
//	go build -buildmode=c-shared -o libhcomm.so ./capi
//
// (make capi), and declared by hcomm.h in this directory, which is
// installed with the library. It is the one package of hcomm that uses cgo.
//
// The public functions (hcomm_init, hcomm_alloc_host_mem, ...,
// hcomm_finalize, hcomm_strerror) are thin C wrappers in hcomm.c over the
// exported Go functions hcommgo_* of capi.go, which take and return only
// integers: a handle is an integer naming a slot of a Go table, host memory
// is pool memory (mmap'd, off the Go heap), a device address is
// HCOMM_DEV_ADDR_BASE plus an offset, and a C callback and its user_data
// are kept as uintptr. No Go pointer ever crosses into C.
//
// Pointers are resolved, not trusted: a transfer's src_ptr and dst_ptr must
// lie, with its size, inside one live allocation of hcomm_alloc_host_mem
// (a sorted index of blocks) or hcomm_alloc_dev_mem (the device-space
// allocator of mem.go), or, on the remote target (HCOMM_TARGET_REMOTE,
// backend/ucx; remote.go), be a remote address HCOMM_REMOTE_ADDR_BASE |
// peer<<44 | offset whose range the backend's Prepare accepts; the pair
// decides the direction. Anything else is HCOMM_EFAULT.
//
// Callbacks run on the engine's reaper goroutine (a cgo call into C from
// there), or, for transfers canceled by hcomm_finalize, on the thread that
// calls it. See docs/capi.md for the threading rules, the valgrind set-up
// and the measured cost of a call from C.
package main
