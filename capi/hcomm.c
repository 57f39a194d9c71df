// The public C functions of libhcomm.so. Each is a thin wrapper over an
// exported Go function (hcommgo_*, internal, declared in _cgo_export.h and
// hidden by hcomm.map) that takes and returns only integers and C pointers:
// pointers become uintptr_t here, so that no C value is ever held in a Go
// pointer, and the public prototypes stay exactly those of hcomm.h (const
// included).
//
// Two things happen here, before Go is entered: the fork check (a child of
// fork() must not enter the Go runtime: its threads are gone and the first
// call would hang), and the thread-local last-error message.
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "hcomm.h"
#include "_cgo_export.h"

// ---- fork detection -------------------------------------------------------

// forked is set in the child of every fork() (pthread_atfork's child
// handler, registered when the library is loaded, before anyone can fork
// with it loaded). One relaxed load per call: no getpid system call.
static volatile int forked;

static void on_fork_child(void) { __atomic_store_n(&forked, 1, __ATOMIC_RELAXED); }

__attribute__((constructor)) static void hcommc_init_fork_check(void) {
	pthread_atfork(NULL, NULL, on_fork_child);
}

// ---- last error ------------------------------------------------------------

static __thread char last_err[512];
static __thread int err_set; // the Go side set a detailed message during this call

// hcommc_set_error is called from Go (on the calling thread, inside an
// hcommgo_* call) with a message that is not NUL-terminated.
void hcommc_set_error(const char *msg, size_t n) {
	if (n >= sizeof last_err) {
		n = sizeof last_err - 1;
	}
	memcpy(last_err, msg, n);
	last_err[n] = 0;
	err_set = 1;
}

static void set_msg(const char *msg) { hcommc_set_error(msg, strlen(msg)); }

// enter is called first by every function that enters Go: HCOMM_EFORK in a
// forked child, else HCOMM_OK.
static int enter(void) {
	if (__atomic_load_n(&forked, __ATOMIC_RELAXED)) {
		set_msg("called in a child of fork(): the Go runtime inside libhcomm does not survive fork; "
		        "use hcomm in the parent only, or start workers with posix_spawn or fork+exec "
		        "(Python: the \"spawn\" start method)");
		return HCOMM_EFORK;
	}
	err_set = 0;
	return HCOMM_OK;
}

// leave completes the last-error message of a failed call whose Go side
// gave no detail (hot paths: queue full) with the code's text.
static int leave(int rc) {
	if (rc < 0 && !err_set) {
		set_msg(hcomm_strerror(rc));
	}
	return rc;
}

const char *hcomm_last_error(void) { return last_err; }

// ---- version ---------------------------------------------------------------

const char *hcomm_version(int *major, int *minor, int *patch) {
	if (major != NULL) {
		*major = HCOMM_VERSION_MAJOR;
	}
	if (minor != NULL) {
		*minor = HCOMM_VERSION_MINOR;
	}
	if (patch != NULL) {
		*patch = HCOMM_VERSION_PATCH;
	}
	return HCOMM_VERSION_STRING;
}

// ---- the API ---------------------------------------------------------------

int hcomm_init(hcomm_handle_t *h, const hcomm_config_t *cfg) {
	int rc = enter();
	if (rc != HCOMM_OK) {
		if (h != NULL) {
			*h = 0;
		}
		return rc;
	}
	if (h == NULL) {
		set_msg("hcomm_init: h is NULL");
		return HCOMM_EINVAL;
	}
	*h = 0;
	hcomm_config_t zero = {0};
	if (cfg == NULL) {
		cfg = &zero;
	}
	hcomm_config_t copy = *cfg;
	return leave(hcommgo_init(h, &copy));
}

static void *ret_ptr(uintptr_t p, int code) {
	if (p == 0) {
		leave(code);
		errno = -code;
		return NULL;
	}
	return (void *)p;
}

static void *alloc(hcomm_handle_t h, size_t size, int dev) {
	int code = enter();
	if (code != HCOMM_OK) {
		errno = -code;
		return NULL;
	}
	uintptr_t p = hcommgo_alloc(h, size, dev, &code);
	return ret_ptr(p, code);
}

void *hcomm_alloc_host_mem(hcomm_handle_t h, size_t size) { return alloc(h, size, 0); }

void *hcomm_alloc_dev_mem(hcomm_handle_t h, size_t size) { return alloc(h, size, 1); }

int hcomm_free_host_mem(hcomm_handle_t h, void *p) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_free(h, (uintptr_t)p, 0));
}

int hcomm_free_dev_mem(hcomm_handle_t h, void *dev) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_free(h, (uintptr_t)dev, 1));
}

int hcomm_register_host_mem(hcomm_handle_t h, void *ptr, size_t len) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_register(h, ptr, len));
}

int hcomm_unregister_host_mem(hcomm_handle_t h, void *ptr) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_unregister(h, (uintptr_t)ptr));
}

int hcomm_submit_transfer(hcomm_handle_t h, hcomm_transfer_t *t) {
	int rc = enter();
	if (rc != HCOMM_OK) {
		if (t != NULL) {
			t->id = 0;
		}
		return rc;
	}
	if (t == NULL) {
		set_msg("hcomm_submit_transfer: t is NULL");
		return HCOMM_EINVAL;
	}
	uint64_t id = 0;
	rc = hcommgo_submit(h, (uintptr_t)t->src_ptr, (uintptr_t)t->dst_ptr, t->size,
	                    (uintptr_t)t->callback, (uintptr_t)t->user_data, &id);
	t->id = id;
	return leave(rc);
}

int hcomm_submit_batch(hcomm_handle_t h, hcomm_transfer_t *ts, int n) {
	int rc = enter();
	if (rc != HCOMM_OK) {
		for (int i = 0; ts != NULL && i < n; i++) {
			ts[i].id = 0;
		}
		return rc;
	}
	if (n < 0 || (ts == NULL && n > 0)) {
		set_msg("hcomm_submit_batch: n < 0, or ts is NULL");
		return HCOMM_EINVAL;
	}
	if (n == 0) {
		return HCOMM_OK;
	}
	return leave(hcommgo_submit_batch(h, ts, n));
}

int hcomm_wait_completion(hcomm_handle_t h, uint64_t id) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_wait(h, id, -1));
}

int hcomm_wait_completion_timeout(hcomm_handle_t h, uint64_t id, int timeout_ms) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_wait(h, id, timeout_ms));
}

int hcomm_connect_timeout(hcomm_handle_t h, const char *addr, int timeout_ms, uint32_t *peer) {
	int rc = enter();
	if (rc != HCOMM_OK) {
		return rc;
	}
	if (addr == NULL || peer == NULL) {
		set_msg("hcomm_connect: addr or peer is NULL");
		return HCOMM_EINVAL;
	}
	uint32_t p = 0;
	// The Go side reads addr during the call only (C.GoString copies it).
	rc = hcommgo_connect(h, (char *)addr, timeout_ms, &p);
	if (rc == HCOMM_OK) {
		*peer = p;
	}
	return leave(rc);
}

int hcomm_connect(hcomm_handle_t h, const char *addr, uint32_t *peer) {
	return hcomm_connect_timeout(h, addr, -1, peer);
}

int hcomm_disconnect(hcomm_handle_t h, uint32_t peer) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_disconnect(h, peer));
}

int hcomm_listen_addr(hcomm_handle_t h, char *buf, size_t len) {
	int rc = enter();
	if (rc != HCOMM_OK) {
		return rc;
	}
	if (buf == NULL || len == 0) {
		set_msg("hcomm_listen_addr: buf is NULL or len 0");
		return HCOMM_EINVAL;
	}
	return leave(hcommgo_listen_addr(h, buf, len));
}

int hcomm_remote_offset(hcomm_handle_t h, const void *p, uint64_t *offset) {
	int rc = enter();
	if (rc != HCOMM_OK) {
		return rc;
	}
	if (offset == NULL) {
		set_msg("hcomm_remote_offset: offset is NULL");
		return HCOMM_EINVAL;
	}
	uint64_t off = 0;
	rc = hcommgo_remote_offset(h, (uintptr_t)p, &off);
	if (rc == HCOMM_OK) {
		*offset = off;
	}
	return leave(rc);
}

int hcomm_wait_notification(hcomm_handle_t h, hcomm_notification_t *n, int timeout_ms) {
	int rc = enter();
	if (rc != HCOMM_OK) {
		return rc;
	}
	if (n == NULL) {
		set_msg("hcomm_wait_notification: n is NULL");
		return HCOMM_EINVAL;
	}
	return leave(hcommgo_wait_notification(h, n, timeout_ms));
}

int hcomm_finalize(hcomm_handle_t h) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_finalize(h, -1));
}

int hcomm_finalize_timeout(hcomm_handle_t h, int timeout_ms) {
	int rc = enter();
	return rc != HCOMM_OK ? rc : leave(hcommgo_finalize(h, timeout_ms));
}

// hcommc_callback runs a transfer's C callback (called from Go on an engine
// thread; Go cannot call a C function pointer itself).
void hcommc_callback(uintptr_t cb, uint64_t id, int status, uintptr_t user_data) {
	((hcomm_callback_t)cb)(id, status, (void *)user_data);
}

const char *hcomm_strerror(int code) {
	switch (code) {
	case HCOMM_OK:          return "success";
	case HCOMM_ENOENT:      return "unknown transfer ID";
	case HCOMM_EIO:         return "device or file reported an error for the transfer";
	case HCOMM_EBADF:       return "invalid handle (not initialized, or finalized)";
	case HCOMM_EAGAIN:      return "queue full: too many transfers in flight";
	case HCOMM_ENOMEM:      return "out of pool or device memory";
	case HCOMM_EACCES:      return "target may not be opened (permission denied, read-only or immutable)";
	case HCOMM_EFAULT:      return "pointer is neither hcomm host memory nor hcomm device memory (or the range leaves its allocation, or a remote range the peer's window)";
	case HCOMM_EBUSY:       return "registered memory is in use by transfers in flight";
	case HCOMM_ENODEV:      return "target could not be opened";
	case HCOMM_EINVAL:      return "invalid argument or configuration";
	case HCOMM_EMFILE:      return "too many open handles";
	case HCOMM_EOPNOTSUPP:  return "the target cannot move data in this direction";
	case HCOMM_ESHUTDOWN:   return "handle is being finalized";
	case HCOMM_ETIMEDOUT:   return "timed out (the device stalled on the transfer, or no handshake from the peer in time)";
	case HCOMM_EINPROGRESS: return "transfer still in flight";
	case HCOMM_ESTALE:      return "transfer ID is stale (its result was overwritten by a later transfer)";
	case HCOMM_ECANCELED:   return "transfer canceled by finalize";
	case HCOMM_ENXIO:       return "no such peer (the ID was never returned by hcomm_connect for this handle)";
	case HCOMM_ECONNRESET:  return "the peer is gone (process died, connection reset, finalized or disconnected)";
	case HCOMM_ECONNREFUSED: return "could not connect: nothing listens at the address, or the peer refused";
	case HCOMM_EFORK:       return "called in a forked child: the Go runtime does not survive fork (use spawn, or hcomm in the parent only)";
	}
	return "unknown hcomm error code";
}
