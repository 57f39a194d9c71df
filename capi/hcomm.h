/*
 * hcomm.h - the C ABI of hcomm (libhcomm.so, built from the Go module with
 * -buildmode=c-shared; see docs/capi.md).
 *
 * The same engine as the Go package github.com/hcomm-go/hcomm/engine, for C
 * and C++ callers, in the shape of the seed's API:
 *
 *   hcomm_handle_t h;
 *   hcomm_config_t cfg = { .mem_pool_size = 256 << 20, .queue_depth = 64,
 *                          .align_size = 64 };
 *   hcomm_init(&h, &cfg);
 *   void *host = hcomm_alloc_host_mem(h, n);      // pool memory, DMA-mapped
 *   void *dev  = hcomm_alloc_dev_mem(h, n);       // device memory address
 *   hcomm_transfer_t t = { .src_ptr = host, .dst_ptr = dev, .size = n,
 *                          .callback = cb, .user_data = ctx };
 *   hcomm_submit_transfer(h, &t);                  // t.id is set
 *   hcomm_wait_completion(h, t.id);
 *   hcomm_free_host_mem(h, host); hcomm_free_dev_mem(h, dev);
 *   hcomm_finalize(h);
 *
 * Every function returns HCOMM_OK (0) or a negative errno-style code below
 * (the alloc functions return NULL and set errno to the positive code).
 * All functions are safe to call from any thread, concurrently.
 */
#ifndef HCOMM_H
#define HCOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes: the negated Linux errno values of the same meaning. */
#define HCOMM_OK           0
#define HCOMM_ENOENT      (-2)   /* unknown transfer ID (never issued by this handle) */
#define HCOMM_EIO         (-5)   /* the device (or file) reported an error for the transfer */
#define HCOMM_EBADF       (-9)   /* handle not initialized, or finalized */
#define HCOMM_EAGAIN      (-11)  /* queue full: queue_depth transfers in flight; retry after a completion */
#define HCOMM_ENOMEM      (-12)  /* pool or device memory exhausted, or the pool could not be mapped */
#define HCOMM_EFAULT      (-14)  /* a pointer (or size) that is neither hcomm host memory nor hcomm device memory */
#define HCOMM_ENODEV      (-19)  /* the target could not be opened (no such VFIO device, ...) */
#define HCOMM_EINVAL      (-22)  /* invalid argument or configuration */
#define HCOMM_EMFILE      (-24)  /* too many handles open at once */
#define HCOMM_EOPNOTSUPP  (-95)  /* the target cannot move data in this direction (e.g. host to host on a device) */
#define HCOMM_ESHUTDOWN   (-108) /* the handle is being finalized */
#define HCOMM_ETIMEDOUT   (-110) /* the transfer timed out: the device stalled */
#define HCOMM_EINPROGRESS (-115) /* hcomm_wait_completion_timeout: still in flight when the timeout passed */
#define HCOMM_ESTALE      (-116) /* the ID's result is gone: its queue slot was reused by a later transfer */
#define HCOMM_ECANCELED   (-125) /* the transfer was canceled by hcomm_finalize */

/* hcomm_strerror's text for code (any int; unknown codes get a generic text).
 * The string is static: do not free it. */
const char *hcomm_strerror(int code);

/* A handle names one initialized engine. 0 is never a valid handle; a
 * finalized handle is refused with HCOMM_EBADF (handles are not reused). */
typedef uint64_t hcomm_handle_t;

/* Where transfers go. */
typedef enum hcomm_target {
	HCOMM_TARGET_MOCK = 0,   /* default: vfio-mock, a software HDMA device (DMA engine + device memory) */
	HCOMM_TARGET_FILE = 1,   /* a file (target_path; created if missing) through io_uring; "device
	                          * memory" is file space: device address + k is file offset k */
	HCOMM_TARGET_VFIO = 2,   /* an HDMA device through kernel VFIO at PCI address target_path
	                          * ("0000:00:04.0"), bound to vfio-pci */
	HCOMM_TARGET_MEMORY = 3  /* host-to-host copies (no device memory) */
} hcomm_target_t;

typedef struct hcomm_config {
	size_t mem_pool_size;    /* bytes of host memory (0: 256 MiB); mapped and DMA-mapped once at init,
	                          * hugepages first, then transparent hugepages, then 4 KiB pages */
	uint32_t queue_depth;    /* most transfers in flight (0: 64); a power of two */
	uint32_t align_size;     /* alignment of host (and device) allocations (0: 64); a power of two, 8..2 MiB */
	int32_t target;          /* hcomm_target_t (0: the mock device) */
	uint32_t reserved;       /* must be 0 */
	const char *target_path; /* HCOMM_TARGET_FILE: file path; HCOMM_TARGET_VFIO: PCI address; else NULL */
	uint64_t dev_mem_size;   /* HCOMM_TARGET_MOCK: device memory bytes (0: 16 MiB);
	                          * HCOMM_TARGET_FILE: file space for hcomm_alloc_dev_mem (0: 1 GiB); else 0 */
} hcomm_config_t;

/* Device addresses (hcomm_alloc_dev_mem) live at HCOMM_DEV_ADDR_BASE + offset:
 * a non-canonical x86-64 address that no host pointer can have, which is how
 * a transfer's direction is inferred from src_ptr and dst_ptr. Never
 * dereference one. */
#define HCOMM_DEV_ADDR_BASE 0x4000000000000000ULL

/* Callback of a transfer: runs exactly once, when the transfer ends, with
 * status HCOMM_OK or a negative code (HCOMM_EIO, HCOMM_ETIMEDOUT,
 * HCOMM_ECANCELED). It runs on an engine thread (not the submitting one),
 * possibly before hcomm_submit_transfer has returned; for transfers canceled
 * by hcomm_finalize, on the thread calling hcomm_finalize. It must not block
 * and must not call hcomm_wait_completion* or hcomm_finalize on its handle
 * (it delays every other completion; those would wait for themselves). It
 * may submit. */
typedef void (*hcomm_callback_t)(uint64_t id, int status, void *user_data);

typedef struct hcomm_transfer {
	void *src_ptr;             /* host memory (hcomm_alloc_host_mem, any byte of it) or a device address */
	void *dst_ptr;             /* likewise; the pair decides the direction */
	size_t size;               /* bytes, > 0; the range must lie in one allocation */
	hcomm_callback_t callback; /* may be NULL */
	void *user_data;           /* passed to callback untouched (any value) */
	uint64_t id;               /* out: written by submit (0 when not submitted) */
} hcomm_transfer_t;

/* Initializes an engine per cfg (NULL: all defaults) and stores its handle
 * in *h. */
int hcomm_init(hcomm_handle_t *h, const hcomm_config_t *cfg);

/* size bytes of pool memory, aligned to align_size (size rounded up to it).
 * NULL with errno set (EBADF, EINVAL, ENOMEM) on failure. The memory is valid
 * until freed or until hcomm_finalize. */
void *hcomm_alloc_host_mem(hcomm_handle_t h, size_t size);
/* p must be a pointer hcomm_alloc_host_mem returned, not yet freed; else
 * HCOMM_EFAULT. Do not free memory a transfer in flight uses. */
int hcomm_free_host_mem(hcomm_handle_t h, void *p);

/* size bytes of device memory, as a device address (see HCOMM_DEV_ADDR_BASE).
 * NULL with errno set (EBADF, EINVAL, ENOMEM, EOPNOTSUPP) on failure. */
void *hcomm_alloc_dev_mem(hcomm_handle_t h, size_t size);
int hcomm_free_dev_mem(hcomm_handle_t h, void *dev);

/* Submits one transfer without waiting for it and writes its ID into t->id.
 * No system call on the fast path. HCOMM_EAGAIN when the queue is full;
 * HCOMM_EFAULT when src/dst (with size) is not inside one live allocation. */
int hcomm_submit_transfer(hcomm_handle_t h, hcomm_transfer_t *t);

/* Submits ts[0..n-1] with one doorbell (batches longer than queue_depth go in
 * several). All pointers are checked first: if any transfer is invalid,
 * none is submitted and its code is returned. HCOMM_OK when all n were
 * submitted; otherwise (HCOMM_EAGAIN: the queue filled up) a prefix was: the
 * submitted ones have a nonzero id, the rest id 0 and no callback. */
int hcomm_submit_batch(hcomm_handle_t h, hcomm_transfer_t *ts, int n);

/* Waits until transfer id has completed; returns its status (HCOMM_OK or a
 * negative code), HCOMM_ESTALE when its slot was already reused (wait
 * sooner, or use the callback), HCOMM_ENOENT for an ID this handle never
 * issued. */
int hcomm_wait_completion(hcomm_handle_t h, uint64_t id);
/* Same, for at most timeout_ms milliseconds (negative: no limit; 0: just
 * look): HCOMM_EINPROGRESS when it is still in flight then. */
int hcomm_wait_completion_timeout(hcomm_handle_t h, uint64_t id, int timeout_ms);

/* Stops the engine: refuses new transfers, waits for those in flight, runs
 * every outstanding callback, frees the pool and device memory and closes
 * the target. Every pointer from this handle is invalid afterwards. */
int hcomm_finalize(hcomm_handle_t h);
/* Same, but waits at most timeout_ms (negative: no limit) for transfers in
 * flight, then cancels the rest: their callbacks get HCOMM_ECANCELED. */
int hcomm_finalize_timeout(hcomm_handle_t h, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* HCOMM_H */
