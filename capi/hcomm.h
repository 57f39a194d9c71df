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
 * Another process's pool (HCOMM_TARGET_REMOTE, through UCX; below):
 *
 *   hcomm_config_t cfg = { .target = HCOMM_TARGET_REMOTE,
 *                          .target_path = "10.0.0.5:13337" };  // listen here
 *   hcomm_init(&h, &cfg);
 *   uint32_t peer;
 *   hcomm_connect(h, "10.0.0.6:13337", &peer);     // the other side did the same
 *   hcomm_transfer_t t = { .src_ptr = host, .size = n,
 *                          .dst_ptr = hcomm_remote_addr(peer, off) };
 *   hcomm_submit_transfer(h, &t);                  // a put into the peer's pool
 *
 * Every function returns HCOMM_OK (0) or a negative code below (the alloc
 * functions return NULL and set errno to the positive code); no other value
 * is ever returned. hcomm_last_error() then says what went wrong in words.
 * All functions are safe to call from any thread, concurrently.
 *
 * fork(): the library carries the Go runtime, whose threads do not survive
 * fork(). In a forked child every function that would enter the runtime
 * returns HCOMM_EFORK at once (hcomm_strerror, hcomm_last_error and
 * hcomm_version still work), even when the parent never called hcomm_init.
 * Use the library in the parent only, or start workers with posix_spawn /
 * fork+exec (Python: multiprocessing's "spawn" or "forkserver" start method;
 * PyTorch DataLoader: multiprocessing_context="spawn").
 */
#ifndef HCOMM_H
#define HCOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; hcomm_version() is the library's. Both are
 * the Go module's (hcomm.Version). The library's soname changes with the
 * major version (libhcomm.so.0). */
#define HCOMM_VERSION_MAJOR 0
#define HCOMM_VERSION_MINOR 1
#define HCOMM_VERSION_PATCH 0
#define HCOMM_VERSION_STRING "0.1.0"
/* MAJOR*10000 + MINOR*100 + PATCH, for #if. */
#define HCOMM_VERSION_NUMBER (HCOMM_VERSION_MAJOR * 10000 + HCOMM_VERSION_MINOR * 100 + HCOMM_VERSION_PATCH)

/* The library's version, "MAJOR.MINOR.PATCH" (static; do not free). When
 * major, minor or patch is not NULL, the number is stored there too. */
const char *hcomm_version(int *major, int *minor, int *patch);

/* Return codes: the negated Linux errno values of the same meaning. */
#define HCOMM_OK           0
#define HCOMM_ENOENT      (-2)   /* unknown transfer ID (never issued by this handle) */
#define HCOMM_ENXIO       (-6)   /* no such peer: a remote address names a peer ID hcomm_connect never returned */
#define HCOMM_EIO         (-5)   /* the device (or file) reported an error for the transfer */
#define HCOMM_EBADF       (-9)   /* handle not initialized, or finalized */
#define HCOMM_EAGAIN      (-11)  /* queue full: queue_depth transfers in flight; retry after a completion */
#define HCOMM_ENOMEM      (-12)  /* pool or device memory exhausted, or the pool could not be mapped */
#define HCOMM_EACCES      (-13)  /* the target exists but may not be opened (permissions, read-only, immutable) */
#define HCOMM_EFAULT      (-14)  /* a pointer (or size) that is neither hcomm host memory nor hcomm device memory */
#define HCOMM_EBUSY       (-16)  /* hcomm_unregister_host_mem: transfers that use the memory are in flight */
#define HCOMM_ENODEV      (-19)  /* the target could not be opened (no such VFIO device, ...) */
#define HCOMM_EINVAL      (-22)  /* invalid argument or configuration */
#define HCOMM_EMFILE      (-24)  /* too many handles open at once */
#define HCOMM_EOPNOTSUPP  (-95)  /* the target cannot move data in this direction (e.g. host to host on a device) */
#define HCOMM_ECONNRESET  (-104) /* the peer is gone (its process died, the connection was reset, it finalized,
                                  * or hcomm_disconnect): hcomm_connect again for a new peer ID */
#define HCOMM_ESHUTDOWN   (-108) /* the handle is being finalized */
#define HCOMM_ETIMEDOUT   (-110) /* the transfer timed out: the device stalled (hcomm_connect_timeout: no
                                  * handshake within the timeout) */
#define HCOMM_ECONNREFUSED (-111) /* hcomm_connect: nothing listens at the address, or the peer refused the
                                   * connection or its handshake */
#define HCOMM_EINPROGRESS (-115) /* hcomm_wait_completion_timeout: still in flight when the timeout passed */
#define HCOMM_ESTALE      (-116) /* the ID's result is gone: its queue slot was reused by a later transfer */
#define HCOMM_ECANCELED   (-125) /* the transfer was canceled by hcomm_finalize */
#define HCOMM_EFORK       (-1001) /* called in a child created by fork(): the Go runtime does not survive
                                   * fork (not an errno: no errno means this) */

/* hcomm_strerror's text for code (any int; unknown codes get a generic text).
 * The string is static: do not free it. */
const char *hcomm_strerror(int code);

/* The message of the last call that failed on this thread (thread-local),
 * with the detail the code cannot carry ("queue_depth 100: want a power of
 * two ..."); "" when no call has failed on this thread. A successful call
 * does not clear it. Valid until the next failing call on this thread; do
 * not free it. */
const char *hcomm_last_error(void);

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
	HCOMM_TARGET_MEMORY = 3, /* host-to-host copies (no device memory) */
	HCOMM_TARGET_REMOTE = 4  /* other processes' pools, on this host or another, through UCX (put and
	                          * get); target_path: the address peers connect to ("10.0.0.5:13337",
	                          * "127.0.0.1:0": any free port), NULL: no listener. See hcomm_connect. */
} hcomm_target_t;

/* hcomm_config_t.flags (HCOMM_TARGET_REMOTE only; 0 for every other target). */
#define HCOMM_REMOTE_SHM 1u /* between processes of one host: put/get over UCX's shared-memory
                             * transports (run with UCX_TLS=shm,tcp; tcp carries the connection) */

/* Marks the anonymous union below as a GNU extension for C before C11
 * (glibc's headers do the same), so that -std=c99 -pedantic stays quiet. */
#if defined(__GNUC__) && !defined(__cplusplus) && (!defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L)
#define HCOMM_EXTENSION __extension__
#else
#define HCOMM_EXTENSION
#endif

typedef struct hcomm_config {
	size_t mem_pool_size;    /* bytes of host memory (0: 256 MiB); mapped and DMA-mapped once at init,
	                          * hugepages first, then transparent hugepages, then 4 KiB pages */
	uint32_t queue_depth;    /* most transfers in flight (0: 64); a power of two */
	uint32_t align_size;     /* alignment of host (and device) allocations (0: 64); a power of two, 8..2 MiB */
	int32_t target;          /* hcomm_target_t (0: the mock device) */
	HCOMM_EXTENSION union {  /* anonymous: C11, C++, and GNU C99 (HCOMM_EXTENSION) */
		uint32_t flags;      /* HCOMM_REMOTE_* for HCOMM_TARGET_REMOTE; else 0 */
		uint32_t reserved;   /* the field's name before flags (0.1.0): must be 0 */
	};
	const char *target_path; /* HCOMM_TARGET_FILE: file path; HCOMM_TARGET_VFIO: PCI address;
	                          * HCOMM_TARGET_REMOTE: listen address or NULL; else NULL */
	uint64_t dev_mem_size;   /* HCOMM_TARGET_MOCK: device memory bytes (0: 16 MiB);
	                          * HCOMM_TARGET_FILE: file space for hcomm_alloc_dev_mem (0: 1 GiB); else 0 */
} hcomm_config_t;

/* Device addresses (hcomm_alloc_dev_mem) live at HCOMM_DEV_ADDR_BASE + offset:
 * a non-canonical x86-64 address that no host pointer can have, which is how
 * a transfer's direction is inferred from src_ptr and dst_ptr. Never
 * dereference one. */
#define HCOMM_DEV_ADDR_BASE 0x4000000000000000ULL

/* Remote addresses (HCOMM_TARGET_REMOTE): byte offset of the window that
 * peer exported (see hcomm_remote_offset) is the pointer
 * hcomm_remote_addr(peer, offset), usable as src_ptr (a get: remote to
 * host) or dst_ptr (a put: host to remote) with host memory at the other
 * end. Like device addresses they are non-canonical: never dereference one.
 * A peer ID above HCOMM_REMOTE_MAX_PEER or an offset of
 * HCOMM_REMOTE_MAX_OFFSET (16 TiB) or more gives an all-ones pointer, which
 * every transfer refuses with HCOMM_EFAULT. (An inline function of this
 * header, not a symbol of the library.) */
#define HCOMM_REMOTE_ADDR_BASE 0x6000000000000000ULL
#define HCOMM_REMOTE_PEER_SHIFT 44
#define HCOMM_REMOTE_MAX_OFFSET (1ULL << HCOMM_REMOTE_PEER_SHIFT)
#define HCOMM_REMOTE_MAX_PEER 0xffffu
static inline void *hcomm_remote_addr(uint32_t peer, uint64_t offset) {
	if (peer > HCOMM_REMOTE_MAX_PEER || offset >= HCOMM_REMOTE_MAX_OFFSET) {
		return (void *)UINTPTR_MAX;
	}
	return (void *)(uintptr_t)(HCOMM_REMOTE_ADDR_BASE | (uint64_t)peer << HCOMM_REMOTE_PEER_SHIFT | offset);
}

/* Callback of a transfer: runs exactly once, when the transfer ends, with
 * status HCOMM_OK or a negative code (HCOMM_EIO, HCOMM_ETIMEDOUT,
 * HCOMM_ECANCELED; HCOMM_ECONNRESET for a peer that died). It runs on an engine thread (not the submitting one),
 * possibly before hcomm_submit_transfer has returned; for transfers canceled
 * by hcomm_finalize, on the thread calling hcomm_finalize. It must not block
 * and must not call hcomm_wait_completion* or hcomm_finalize on its handle
 * (it delays every other completion; those would wait for themselves). It
 * may submit. */
typedef void (*hcomm_callback_t)(uint64_t id, int status, void *user_data);

typedef struct hcomm_transfer {
	void *src_ptr;             /* host memory (hcomm_alloc_host_mem or registered, any byte of it), a device
	                            * address or a remote address (hcomm_remote_addr) */
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

/* Registers memory the caller owns (an mmap'd buffer, a NumPy array's or a
 * PyTorch CPU tensor's pages) with the handle: it is pinned and mapped into
 * the target like the pool (DMA-mapped for a device, registered with
 * io_uring for a file), and from then on any byte range of it is host
 * memory for hcomm_submit_transfer, used in place (no copy), exactly as
 * memory from hcomm_alloc_host_mem. ptr must be page aligned and len a
 * multiple of the page size (HCOMM_EINVAL otherwise), and the range must
 * not overlap pool memory or another registration. This is
 * cudaHostRegister / aclrtHostRegister for hcomm.
 *
 * Lifetime: the memory must stay mapped and must not be freed until
 * hcomm_unregister_host_mem returned HCOMM_OK, or hcomm_finalize returned
 * (which unregisters everything). Unregister before free. */
int hcomm_register_host_mem(hcomm_handle_t h, void *ptr, size_t len);
/* Undoes hcomm_register_host_mem(h, ptr, ...). HCOMM_EBUSY (nothing
 * changed) while a transfer that uses the memory is in flight: wait for it
 * (its callback may unregister), then call again. HCOMM_EFAULT when ptr is
 * not the start of a registration of h; HCOMM_EINVAL for pool memory (use
 * hcomm_free_host_mem). */
int hcomm_unregister_host_mem(hcomm_handle_t h, void *ptr);

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

/* ---- HCOMM_TARGET_REMOTE: other processes' pools through UCX --------
 *
 * Two processes that each called hcomm_init with HCOMM_TARGET_REMOTE
 * reach each other's pool: one listens (target_path), the other calls
 * hcomm_connect with that address. The handshake exchanges each side's
 * *window*: every arena of its pool (and every registered region) mapped
 * at that moment, laid end to end; the peer can read and write all of it
 * (docs/remote.md: security). Both sides get a peer ID and can transfer:
 * host memory to hcomm_remote_addr(peer, offset) is a put into the peer's
 * pool, the other way a get, straight from and to pool memory. A put has
 * completed when the bytes are in the peer's memory. Nothing tells the
 * peer: send it the offsets and the news however you like.
 *
 * UCX reads its environment (UCX_TLS, UCX_NET_DEVICES, ...) during
 * hcomm_init: UCX_TLS=tcp between hosts without RDMA, UCX_TLS=shm,tcp with
 * flags HCOMM_REMOTE_SHM between processes of one host, unset: UCX picks.
 * A remote range must lie in one arena of the peer's window (HCOMM_EFAULT
 * otherwise, before anything is posted); a peer that dies makes every
 * transfer in flight to it complete once with HCOMM_ECONNRESET. */

/* Connects to the peer listening at addr ("ip:port", a numeric IP: what
 * its hcomm_listen_addr says), waits for the handshake and stores the
 * peer's ID in *peer. HCOMM_EINVAL for a malformed address,
 * HCOMM_ECONNREFUSED when nothing listens there or the handshake fails,
 * HCOMM_EOPNOTSUPP on a handle whose target is not HCOMM_TARGET_REMOTE.
 * IDs are never reused: after a peer is gone, connect again for a new one.
 * A peer that connected to this handle has an ID here too (the listener
 * side numbers it in the order peers arrive). */
int hcomm_connect(hcomm_handle_t h, const char *addr, uint32_t *peer);
/* Same, giving up after timeout_ms (negative: no limit) with
 * HCOMM_ETIMEDOUT. */
int hcomm_connect_timeout(hcomm_handle_t h, const char *addr, int timeout_ms, uint32_t *peer);
/* Closes the connection to peer: transfers in flight to it complete with
 * HCOMM_ECONNRESET, later ones are refused with it. HCOMM_ENXIO for an ID
 * this handle never had. */
int hcomm_disconnect(hcomm_handle_t h, uint32_t peer);
/* Writes the address peers connect to ("127.0.0.1:40123", the port filled
 * in when target_path asked for port 0), NUL-terminated, into buf; "" when
 * the handle has no listener. HCOMM_EINVAL when len is too small (64 bytes
 * always suffice). */
int hcomm_listen_addr(hcomm_handle_t h, char *buf, size_t len);
/* Stores in *offset where host memory p (pool memory or a registered
 * region, any byte of it) lies in the window this handle exports: a peer
 * that connects from now on reaches p at hcomm_remote_addr(its ID for this
 * handle, *offset). HCOMM_EFAULT when p is not host memory of h. */
int hcomm_remote_offset(hcomm_handle_t h, const void *p, uint64_t *offset);

/* ---- Notifications (HCOMM_TARGET_REMOTE): a put the peer learns about ----
 *
 * A transfer of at most HCOMM_NOTIFY_MAX bytes from host memory to
 * hcomm_notify_addr(peer) is a notification: its bytes are delivered to the
 * peer's application (hcomm_wait_notification) after every put this handle
 * submitted to that peer before it is in the peer's memory, in submission
 * order per peer, exactly once. Submit it after the puts, in the same batch
 * or later:
 *
 *   hcomm_transfer_t ts[2] = {
 *       { .src_ptr = kv,  .dst_ptr = hcomm_remote_addr(peer, off), .size = n },
 *       { .src_ptr = msg, .dst_ptr = hcomm_notify_addr(peer),      .size = m },
 *   };
 *   hcomm_submit_batch(h, ts, 2);      // the peer: hcomm_wait_notification
 *
 * It completes (callback, hcomm_wait_completion) when the peer's library
 * has queued the message for its application; a peer that dies, is
 * disconnected or times out before that makes it complete once with
 * HCOMM_ECONNRESET (or HCOMM_ETIMEDOUT), like every transfer in flight to
 * it. Its source must stay unchanged until it completes. A notification
 * larger than HCOMM_NOTIFY_MAX or with any other end is HCOMM_EINVAL or
 * HCOMM_EFAULT, refused before anything is posted. */
#define HCOMM_NOTIFY_MAX 256
#define HCOMM_NOTIFY_ADDR_BASE 0x7000000000000000ULL
/* The notification address of peer (an inline function of this header;
 * never dereference it): all ones for a peer ID above
 * HCOMM_REMOTE_MAX_PEER. */
static inline void *hcomm_notify_addr(uint32_t peer) {
	if (peer > HCOMM_REMOTE_MAX_PEER) {
		return (void *)UINTPTR_MAX;
	}
	return (void *)(uintptr_t)(HCOMM_NOTIFY_ADDR_BASE | (uint64_t)peer << HCOMM_REMOTE_PEER_SHIFT);
}

typedef struct hcomm_notification {
	uint32_t peer;                  /* this handle's ID of the sender */
	uint32_t size;                  /* bytes of msg */
	uint64_t seq;                   /* its number among the sender's notifications to this handle, from 0 */
	uint8_t msg[HCOMM_NOTIFY_MAX]; /* the message (size bytes) */
} hcomm_notification_t;

/* Takes the next notification (from any peer, in order per peer) into *n,
 * waiting at most timeout_ms milliseconds (negative: no limit; 0: just
 * look): HCOMM_ETIMEDOUT when none came. A notification is acknowledged to
 * its sender when the library queues it (up to 1024 ahead of the
 * application; beyond that the senders' notifications stay in flight until
 * they are taken). Any thread may wait, several at once (each notification
 * goes to one of them). HCOMM_EOPNOTSUPP on a handle whose target is not
 * HCOMM_TARGET_REMOTE; HCOMM_EBADF when the handle is finalized, also
 * during a wait. */
int hcomm_wait_notification(hcomm_handle_t h, hcomm_notification_t *n, int timeout_ms);

/* Stops the engine: refuses new transfers, waits for those in flight, runs
 * every outstanding callback, frees the pool and device memory and closes
 * the target. Every pointer from this handle is invalid afterwards. */
int hcomm_finalize(hcomm_handle_t h);
/* Same, but waits at most timeout_ms (negative: no limit) for transfers in
 * flight, then cancels the rest: their callbacks get HCOMM_ECANCELED. */
int hcomm_finalize_timeout(hcomm_handle_t h, int timeout_ms);

/* ---- Files read into pool memory (many files, one pool) ------------------
 *
 * A read handle: the existing file at path, opened read-only (never
 * created), with O_DIRECT when flags has HCOMM_FILE_DIRECT and the file
 * system allows it (the page cache is bypassed; addresses, lengths and file
 * offsets must then be multiples of 4096), read through io_uring as
 * HCOMM_TARGET_FILE is. Its device space is the whole file: device address
 * HCOMM_DEV_ADDR_BASE + k is byte k of the file, for k below the size
 * rounded up to 4096; no hcomm_alloc_dev_mem is needed. Its own pool is the
 * smallest there is (64 KiB, in 4 KiB pages: never a hugetlb page, so an
 * open file costs at most 64 KiB of it): read into memory registered with it
 * (hcomm_register_host_mem), e.g. a block of another handle's pool (made
 * with align_size 4096), so that many files read into one pool:
 *
 *   hcomm_init(&pool, &(hcomm_config_t){ .mem_pool_size = 64 << 20,
 *                                        .align_size = 4096, .target = HCOMM_TARGET_MEMORY });
 *   void *buf = hcomm_alloc_host_mem(pool, 16 << 20);
 *   hcomm_open_file(&f, "shard-0.bin", HCOMM_FILE_DIRECT, 256, &size, &granted);
 *   hcomm_register_host_mem(f, buf, 16 << 20);
 *   hcomm_transfer_t t = { .src_ptr = (void *)(HCOMM_DEV_ADDR_BASE + off), .dst_ptr = buf, .size = n };
 *   hcomm_submit_transfer(f, &t); hcomm_wait_completion(f, t.id);
 *   hcomm_finalize(f);   // before the memory registered with it goes
 *
 * queue_depth as in hcomm_config_t (0: 64). *size (if not NULL) is the
 * file's size in bytes, *granted (if not NULL) the flags granted
 * (HCOMM_FILE_DIRECT, or 0 when the file is read through the page cache).
 * HCOMM_ENODEV when the file does not exist, HCOMM_EACCES when it may not
 * be read, HCOMM_EINVAL when it is not a regular file; writes to its device
 * space fail with HCOMM_EIO. */
#define HCOMM_FILE_DIRECT 1u
int hcomm_open_file(hcomm_handle_t *fh, const char *path, uint32_t flags, uint32_t queue_depth, uint64_t *size,
                    uint32_t *granted);


/* ---- Several targets on one handle, and copies between them ----------
 *
 * A handle's engine holds up to HCOMM_MAX_TARGETS targets over its one
 * pool: the one hcomm_config_t names (target 0) and those hcomm_add_target
 * adds (1, 2, ...), e.g. a device and two files. Every allocation of the
 * pool is usable with every target at once (it is mapped into each). Target
 * k's device memory or file space lives at device addresses
 * hcomm_target_addr(k, offset) (target 0's are the HCOMM_DEV_ADDR_BASE +
 * offset above); a transfer goes to the target its device address belongs
 * to, and host to host goes to an HCOMM_TARGET_MEMORY target. Between two
 * targets, move data with hcomm_copy (a transfer whose two ends belong to
 * two targets is HCOMM_EOPNOTSUPP):
 *
 *   hcomm_init(&h, &(hcomm_config_t){ .align_size = 4096 });        // target 0: a device (the mock)
 *   uint32_t in, out;
 *   hcomm_add_target(h, &(hcomm_target_config_t){ .target = HCOMM_TARGET_FILE, .target_path = "in.bin" }, &in);
 *   hcomm_add_target(h, &(hcomm_target_config_t){ .target = HCOMM_TARGET_FILE, .target_path = "out.bin" }, &out);
 *   void *dev = hcomm_alloc_dev_mem(h, n);                           // device memory of target 0
 *   void *fin = hcomm_alloc_target_mem(h, in, n);                    // file space of target in: offset 0..n
 *   uint64_t id;
 *   hcomm_copy(h, dev, fin, n, 0, 0, NULL, NULL, &id);               // file → device, through the pool
 *   hcomm_wait_completion(h, id);
 */
#define HCOMM_MAX_TARGETS 8
#define HCOMM_TARGET_SHIFT 52

/* Device address of byte offset of target's device memory or file space
 * (an inline function of this header). Never dereference one. */
static inline void *hcomm_target_addr(uint32_t target, uint64_t offset) {
	if (target >= HCOMM_MAX_TARGETS || offset >= (1ULL << HCOMM_TARGET_SHIFT)) {
		return (void *)UINTPTR_MAX;
	}
	return (void *)(uintptr_t)(HCOMM_DEV_ADDR_BASE | (uint64_t)target << HCOMM_TARGET_SHIFT | offset);
}

typedef struct hcomm_target_config {
	int32_t target;          /* hcomm_target_t: HCOMM_TARGET_MOCK, _FILE, _VFIO or _MEMORY (a remote target
	                          * is a handle's first: hcomm_init) */
	uint32_t flags;          /* 0 */
	const char *target_path; /* as in hcomm_config_t */
	uint64_t dev_mem_size;   /* as in hcomm_config_t */
} hcomm_target_config_t;

/* Adds a target to h's engine: its device or file is opened, the whole pool
 * mapped into it; its index goes to *target (if not NULL). HCOMM_EMFILE when
 * the handle has HCOMM_MAX_TARGETS; the codes of hcomm_init otherwise. A
 * device target that needs a larger alignment than the handle's align_size
 * (a file opened O_DIRECT) is HCOMM_EINVAL. */
int hcomm_add_target(hcomm_handle_t h, const hcomm_target_config_t *tc, uint32_t *target);

/* hcomm_alloc_dev_mem for target (device memory, or file space of a file
 * target; 0 is hcomm_alloc_dev_mem). Free with hcomm_free_dev_mem. */
void *hcomm_alloc_target_mem(hcomm_handle_t h, uint32_t target, size_t size);

/* Copies size bytes from src to dst, two device addresses (usually of two
 * targets: a file into device memory, device memory out to a file), as one
 * call: the engine streams them through blocks of its pool, depth chunks of
 * chunk bytes in flight (0, 0: 1 MiB and 4; chunk is rounded up to
 * align_size), each chunk read into a block by one target and written from
 * the same block by the other — no CPU copy, the pool's use bounded by
 * chunk x depth. Returns at once with the copy's ID in *id: wait for it with
 * hcomm_wait_completion (once; the copy is forgotten then), and callback (if
 * not NULL) runs once when it ends, on an engine thread, with its status
 * (the first failed chunk's: HCOMM_EIO, ...; the library's last error names
 * the byte range and the side). HCOMM_EFAULT when an end is not inside one
 * allocation of a target, HCOMM_EAGAIN with 4096 copies not yet waited for.
 * hcomm_finalize cancels copies in flight (their callbacks run before it
 * returns). */
int hcomm_copy(hcomm_handle_t h, void *dst, const void *src, size_t size, size_t chunk, uint32_t depth,
               hcomm_callback_t callback, void *user_data, uint64_t *id);

#ifdef __cplusplus
}
#endif

#endif /* HCOMM_H */
