// The seed's example program, through libhcomm.so: init with a 256 MiB
// pool, queue depth 64 and 64-byte alignment; allocate; memcpy into host
// memory; submit with a callback; submit a batch; wait; free; finalize.
// The only line the seed did not have is the one that obtains dev_ptr
// (hcomm_alloc_dev_mem). run.sh runs it under valgrind's memcheck.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcomm.h"

#define BUF_SIZE (1024 * 1024)
#define BATCH 8

static void on_done(uint64_t id, int status, void *user_data) {
	int *done = user_data;
	if (status != HCOMM_OK) {
		fprintf(stderr, "transfer %llu failed: %s\n", (unsigned long long)id, hcomm_strerror(status));
	}
	__atomic_add_fetch(done, 1, __ATOMIC_SEQ_CST);
}

int main(void) {
	hcomm_handle_t handle;
	hcomm_config_t config = {
		.mem_pool_size = 256 * 1024 * 1024,
		.queue_depth = 64,
		.align_size = 64,
	};
	int rc = hcomm_init(&handle, &config);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "hcomm_init: %s\n", hcomm_strerror(rc));
		return 1;
	}

	void *host_ptr = hcomm_alloc_host_mem(handle, BUF_SIZE);
	void *dev_ptr = hcomm_alloc_dev_mem(handle, BUF_SIZE); // the one line the seed lacks
	if (host_ptr == NULL || dev_ptr == NULL) {
		fprintf(stderr, "alloc failed\n");
		return 1;
	}

	// Fill host memory with data (malloc'd source, as an application would have it).
	char *data = malloc(BUF_SIZE);
	for (int i = 0; i < BUF_SIZE; i++) {
		data[i] = (char)(i * 31 + 7);
	}
	memcpy(host_ptr, data, BUF_SIZE);

	// One transfer with a callback.
	int done = 0;
	hcomm_transfer_t transfer = {
		.src_ptr = host_ptr,
		.dst_ptr = dev_ptr,
		.size = BUF_SIZE,
		.callback = on_done,
		.user_data = &done,
	};
	rc = hcomm_submit_transfer(handle, &transfer);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "submit: %s\n", hcomm_strerror(rc));
		return 1;
	}
	rc = hcomm_wait_completion(handle, transfer.id);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "wait: %s\n", hcomm_strerror(rc));
		return 1;
	}

	// A batch: the device's bytes back into host memory, in BATCH pieces, one doorbell.
	void *back = hcomm_alloc_host_mem(handle, BUF_SIZE);
	hcomm_transfer_t batch[BATCH];
	for (int i = 0; i < BATCH; i++) {
		batch[i] = (hcomm_transfer_t){
			.src_ptr = (char *)dev_ptr + i * (BUF_SIZE / BATCH),
			.dst_ptr = (char *)back + i * (BUF_SIZE / BATCH),
			.size = BUF_SIZE / BATCH,
			.callback = on_done,
			.user_data = &done,
		};
	}
	rc = hcomm_submit_batch(handle, batch, BATCH);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "submit_batch: %s\n", hcomm_strerror(rc));
		return 1;
	}
	for (int i = 0; i < BATCH; i++) {
		rc = hcomm_wait_completion_timeout(handle, batch[i].id, 10000);
		if (rc != HCOMM_OK) {
			fprintf(stderr, "wait %d: %s\n", i, hcomm_strerror(rc));
			return 1;
		}
	}
	int same = memcmp(back, data, BUF_SIZE) == 0;

	free(data);
	hcomm_free_host_mem(handle, back);
	hcomm_free_host_mem(handle, host_ptr);
	hcomm_free_dev_mem(handle, dev_ptr);
	rc = hcomm_finalize(handle);
	int callbacks = __atomic_load_n(&done, __ATOMIC_SEQ_CST);
	printf("seed example: round trip %s, %d callbacks, finalize: %s\n", same ? "identical" : "DIFFERS", callbacks,
	       hcomm_strerror(rc));
	return same && callbacks == 1 + BATCH && rc == HCOMM_OK ? 0 : 1;
}
