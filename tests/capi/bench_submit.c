// bench_submit: nanoseconds per hcomm_submit_transfer (and per transfer of
// hcomm_submit_batch) from C, for capi's BenchmarkSubmit, which runs the
// same flow through the Go engine API and prints both side by side.
//
//   bench_submit MODE ROUNDS      MODE: single | batch | refused | memory | memory-batch
//
// Each round submits 64 host→device transfers of 128 KiB (above the
// CPU-path threshold: each is a descriptor for the DMA engine), timing only
// the submit calls, then waits for all of them (untimed). MODE refused
// submits a stack pointer instead: the call's fixed cost. MODE memory and
// memory-batch use the memory target and 64-byte host→host copies (the
// submitter copies; no device thread in the loop). Prints
// "ns_per_submit <value>".
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hcomm.h"

enum { DEPTH = 64, SZ = 128 << 10 };

static uint64_t completed;

static void on_done(uint64_t id, int status, void *user_data) {
	(void)id;
	(void)user_data;
	if (status == HCOMM_OK) {
		__atomic_add_fetch(&completed, 1, __ATOMIC_RELAXED);
	}
}

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
	const char *m = argc == 3 ? argv[1] : "";
	int batch = strcmp(m, "batch") == 0 || strcmp(m, "memory-batch") == 0;
	int refused = strcmp(m, "refused") == 0;
	int memory = strncmp(m, "memory", 6) == 0;
	if (!batch && !refused && strcmp(m, "single") != 0 && strcmp(m, "memory") != 0) {
		fprintf(stderr, "usage: bench_submit single|batch|refused|memory|memory-batch ROUNDS\n");
		return 2;
	}
	size_t sz = memory ? 64 : SZ;
	long rounds = atol(argv[2]);
	hcomm_handle_t h;
	hcomm_config_t cfg = {.mem_pool_size = 64 << 20, .queue_depth = DEPTH, .align_size = 64,
	                      .target = memory ? HCOMM_TARGET_MEMORY : HCOMM_TARGET_MOCK};
	int rc = hcomm_init(&h, &cfg);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "init: %s\n", hcomm_strerror(rc));
		return 1;
	}
	char *host = hcomm_alloc_host_mem(h, DEPTH * SZ);
	char *dev = memory ? hcomm_alloc_host_mem(h, DEPTH * SZ) : hcomm_alloc_dev_mem(h, DEPTH * SZ);
	if (!host || !dev) {
		fprintf(stderr, "alloc failed\n");
		return 1;
	}
	memset(host, 1, DEPTH * SZ);
	hcomm_transfer_t ts[DEPTH];
	uint64_t timed = 0;
	for (long r = 0; r < rounds; r++) {
		for (int i = 0; i < DEPTH; i++) {
			ts[i] = (hcomm_transfer_t){.src_ptr = host + i * SZ, .dst_ptr = dev + i * SZ, .size = sz, .callback = on_done};
		}
		if (refused) {
			// The call's fixed cost: crossing into Go, the handle lookup
			// and pointer resolution, refused (stack memory) before the
			// engine is involved.
			uint64_t t0 = now_ns();
			for (int i = 0; i < DEPTH; i++) {
				ts[i].src_ptr = &ts[i];
				rc = hcomm_submit_transfer(h, &ts[i]);
			}
			timed += now_ns() - t0;
			if (rc != HCOMM_EFAULT) {
				fprintf(stderr, "refused submit returned %d\n", rc);
				return 1;
			}
			continue;
		}
		uint64_t t0 = now_ns();
		// A full queue (the previous round's slots not yet released by
		// the engine) is retried, as in the Go variants.
		rc = HCOMM_OK;
		if (batch) {
			for (int n = 0; n < DEPTH && rc == HCOMM_OK;) {
				rc = hcomm_submit_batch(h, ts + n, DEPTH - n);
				while (n < DEPTH && ts[n].id != 0) {
					n++;
				}
				if (rc == HCOMM_EAGAIN) {
					rc = HCOMM_OK;
				}
			}
		} else {
			for (int i = 0; i < DEPTH && rc == HCOMM_OK; i++) {
				while ((rc = hcomm_submit_transfer(h, &ts[i])) == HCOMM_EAGAIN) {
				}
			}
		}
		timed += now_ns() - t0;
		if (rc != HCOMM_OK) {
			fprintf(stderr, "round %ld: submit: %s\n", r, hcomm_strerror(rc));
			return 1;
		}
		for (int i = 0; i < DEPTH; i++) {
			if ((rc = hcomm_wait_completion(h, ts[i].id)) != HCOMM_OK) {
				fprintf(stderr, "round %ld: wait: %s\n", r, hcomm_strerror(rc));
				return 1;
			}
		}
		// Every callback has run before the queue takes the next round.
		while (__atomic_load_n(&completed, __ATOMIC_RELAXED) < (uint64_t)(r + 1) * DEPTH) {
		}
	}
	hcomm_free_host_mem(h, host);
	hcomm_free_dev_mem(h, dev);
	hcomm_finalize(h);
	printf("ns_per_submit %.1f\n", rounds > 0 ? (double)timed / (double)(rounds * DEPTH) : 0.0);
	return 0;
}
