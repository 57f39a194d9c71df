// hcomm_open_file: files read into memory registered with a read handle
// (hcomm.h, "Files read into pool memory"). The wrapper over its Go half,
// with the fork check of hcomm.c's functions (a flag of its own, set by a
// pthread_atfork child handler registered when the library is loaded).
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hcomm.h"
#include "_cgo_export.h"

void hcommc_set_error(const char *msg, size_t n);

static volatile int files_forked;

static void files_on_fork_child(void) { __atomic_store_n(&files_forked, 1, __ATOMIC_RELAXED); }

__attribute__((constructor)) static void hcommc_files_init(void) {
	pthread_atfork(NULL, NULL, files_on_fork_child);
}

static int files_fail(const char *msg, int rc) {
	hcommc_set_error(msg, strlen(msg));
	return rc;
}

int hcomm_open_file(hcomm_handle_t *fh, const char *path, uint32_t flags, uint32_t queue_depth, uint64_t *size,
                    uint32_t *granted) {
	if (fh != NULL) {
		*fh = 0;
	}
	if (__atomic_load_n(&files_forked, __ATOMIC_RELAXED)) {
		return files_fail("hcomm_open_file: called in a child of fork(): the Go runtime inside libhcomm does not "
		                  "survive fork; use hcomm in the parent only, or start workers with posix_spawn or "
		                  "fork+exec (Python: the \"spawn\" start method)",
		                  HCOMM_EFORK);
	}
	if (fh == NULL || path == NULL) {
		return files_fail("hcomm_open_file: fh or path is NULL", HCOMM_EINVAL);
	}
	return hcommgo_open_file(fh, (char *)path, flags, queue_depth, size, granted);
}
