// The public C functions of libhcomm.so. Each is a thin wrapper over an
// exported Go function (hcommgo_*, internal, declared in _cgo_export.h) that
// takes and returns only integers and C pointers: pointers become uintptr_t
// here, so that no C value is ever held in a Go pointer, and the public
// prototypes stay exactly those of hcomm.h (const included).
#include <errno.h>
#include <stdint.h>

#include "hcomm.h"
#include "_cgo_export.h"

int hcomm_init(hcomm_handle_t *h, const hcomm_config_t *cfg) {
	if (h == NULL) {
		return HCOMM_EINVAL;
	}
	*h = 0;
	hcomm_config_t zero = {0};
	if (cfg == NULL) {
		cfg = &zero;
	}
	hcomm_config_t copy = *cfg;
	return hcommgo_init(h, &copy);
}

static void *ret_ptr(uintptr_t p, int code) {
	if (p == 0) {
		errno = -code;
		return NULL;
	}
	return (void *)p;
}

void *hcomm_alloc_host_mem(hcomm_handle_t h, size_t size) {
	int code = 0;
	uintptr_t p = hcommgo_alloc(h, size, 0, &code);
	return ret_ptr(p, code);
}

int hcomm_free_host_mem(hcomm_handle_t h, void *p) {
	return hcommgo_free(h, (uintptr_t)p, 0);
}

void *hcomm_alloc_dev_mem(hcomm_handle_t h, size_t size) {
	int code = 0;
	uintptr_t p = hcommgo_alloc(h, size, 1, &code);
	return ret_ptr(p, code);
}

int hcomm_free_dev_mem(hcomm_handle_t h, void *dev) {
	return hcommgo_free(h, (uintptr_t)dev, 1);
}

int hcomm_submit_transfer(hcomm_handle_t h, hcomm_transfer_t *t) {
	if (t == NULL) {
		return HCOMM_EINVAL;
	}
	uint64_t id = 0;
	int rc = hcommgo_submit(h, (uintptr_t)t->src_ptr, (uintptr_t)t->dst_ptr, t->size,
	                        (uintptr_t)t->callback, (uintptr_t)t->user_data, &id);
	t->id = id;
	return rc;
}

int hcomm_submit_batch(hcomm_handle_t h, hcomm_transfer_t *ts, int n) {
	if (n < 0 || (ts == NULL && n > 0)) {
		return HCOMM_EINVAL;
	}
	if (n == 0) {
		return HCOMM_OK;
	}
	return hcommgo_submit_batch(h, ts, n);
}

int hcomm_wait_completion(hcomm_handle_t h, uint64_t id) {
	return hcommgo_wait(h, id, -1);
}

int hcomm_wait_completion_timeout(hcomm_handle_t h, uint64_t id, int timeout_ms) {
	return hcommgo_wait(h, id, timeout_ms);
}

int hcomm_finalize(hcomm_handle_t h) {
	return hcommgo_finalize(h, -1);
}

int hcomm_finalize_timeout(hcomm_handle_t h, int timeout_ms) {
	return hcommgo_finalize(h, timeout_ms);
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
	case HCOMM_EFAULT:      return "pointer is neither hcomm host memory nor hcomm device memory (or the range leaves its allocation)";
	case HCOMM_ENODEV:      return "target could not be opened";
	case HCOMM_EINVAL:      return "invalid argument or configuration";
	case HCOMM_EMFILE:      return "too many open handles";
	case HCOMM_EOPNOTSUPP:  return "the target cannot move data in this direction";
	case HCOMM_ESHUTDOWN:   return "handle is being finalized";
	case HCOMM_ETIMEDOUT:   return "transfer timed out (device stalled)";
	case HCOMM_EINPROGRESS: return "transfer still in flight";
	case HCOMM_ESTALE:      return "transfer ID is stale (its result was overwritten by a later transfer)";
	case HCOMM_ECANCELED:   return "transfer canceled by finalize";
	}
	return "unknown hcomm error code";
}
