// Several targets on one handle and copies between them (hcomm.h, "Several
// targets on one handle"): the wrappers over their Go halves, with the fork
// check of hcomm.c's functions (a flag of its own, set by a pthread_atfork
// child handler registered when the library is loaded).
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hcomm.h"
#include "_cgo_export.h"

void hcommc_set_error(const char *msg, size_t n);

static volatile int targets_forked;

static void targets_on_fork_child(void) { __atomic_store_n(&targets_forked, 1, __ATOMIC_RELAXED); }

__attribute__((constructor)) static void hcommc_targets_init(void) {
	pthread_atfork(NULL, NULL, targets_on_fork_child);
}

static int targets_fail(const char *msg, int rc) {
	hcommc_set_error(msg, strlen(msg));
	return rc;
}

static int targets_enter(const char *fn) {
	if (__atomic_load_n(&targets_forked, __ATOMIC_RELAXED)) {
		(void)fn;
		return targets_fail("called in a child of fork(): the Go runtime inside libhcomm does not survive fork; "
		                    "use hcomm in the parent only, or start workers with posix_spawn or fork+exec",
		                    HCOMM_EFORK);
	}
	return HCOMM_OK;
}

int hcomm_add_target(hcomm_handle_t h, const hcomm_target_config_t *tc, uint32_t *target) {
	int rc = targets_enter("hcomm_add_target");
	if (rc != HCOMM_OK) {
		return rc;
	}
	if (tc == NULL) {
		return targets_fail("hcomm_add_target: tc is NULL", HCOMM_EINVAL);
	}
	hcomm_target_config_t copy = *tc;
	return hcommgo_add_target(h, &copy, target);
}

void *hcomm_alloc_target_mem(hcomm_handle_t h, uint32_t target, size_t size) {
	int code = targets_enter("hcomm_alloc_target_mem");
	if (code != HCOMM_OK) {
		errno = -code;
		return NULL;
	}
	uintptr_t p = hcommgo_alloc_target(h, target, size, &code);
	if (p == 0) {
		errno = -code;
		return NULL;
	}
	return (void *)p;
}

int hcomm_copy(hcomm_handle_t h, void *dst, const void *src, size_t size, size_t chunk, uint32_t depth,
               hcomm_callback_t callback, void *user_data, uint64_t *id) {
	if (id != NULL) {
		*id = 0;
	}
	int rc = targets_enter("hcomm_copy");
	if (rc != HCOMM_OK) {
		return rc;
	}
	return hcommgo_copy(h, (uintptr_t)dst, (uintptr_t)src, size, chunk, depth, (uintptr_t)callback,
	                    (uintptr_t)user_data, id);
}
