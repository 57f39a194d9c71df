// One handle with several targets (hcomm_add_target) and copies between
// them (hcomm_copy), through libhcomm.so. run.sh runs it as is ("files": a
// device and two files, a copy file → device and device → file, bytes
// verified) and under valgrind memcheck ("devices": two devices and a
// memory target — valgrind 3.19 cannot run the file target's io_uring
// waits, see docs/capi.md).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define N (4 << 20)

static void on_copy(uint64_t id, int status, void *user_data) {
	(void)id;
	int *st = user_data;
	__atomic_store_n(st, status == HCOMM_OK ? 1 : -1, __ATOMIC_SEQ_CST);
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
	for (size_t i = 0; i < n; i++) {
		b[i] = (unsigned char)(i * 7 + (i >> 12) + seed);
	}
}

// copy_wait copies and waits, with a callback that must run once.
static int copy_wait(hcomm_handle_t h, void *dst, void *src) {
	uint64_t id = 0;
	int called = 0;
	int rc = hcomm_copy(h, dst, src, N, 1 << 20, 4, on_copy, &called, &id);
	if (rc != HCOMM_OK) {
		return rc;
	}
	rc = hcomm_wait_completion(h, id);
	for (int i = 0; i < 1000 && __atomic_load_n(&called, __ATOMIC_SEQ_CST) == 0; i++) {
		usleep(1000);
	}
	if (rc == HCOMM_OK && __atomic_load_n(&called, __ATOMIC_SEQ_CST) != 1) {
		return HCOMM_EIO;
	}
	return rc;
}

static void test_files(const char *dir) {
	char in[4096], out[4096];
	snprintf(in, sizeof in, "%s/in.bin", dir);
	snprintf(out, sizeof out, "%s/out.bin", dir);
	unsigned char *want = malloc(N), *got = malloc(N);
	CHECK(want != NULL && got != NULL, "malloc");
	fill(want, N, 3);
	FILE *f = fopen(in, "wb");
	CHECK(f != NULL && fwrite(want, 1, N, f) == N && fclose(f) == 0, "write %s", in);

	hcomm_handle_t h;
	CHECK_RC(hcomm_init(&h, &(hcomm_config_t){.mem_pool_size = 16 << 20, .align_size = 4096, .dev_mem_size = 8 << 20}),
	         HCOMM_OK);
	uint32_t tin = 0, tout = 0;
	CHECK_RC(hcomm_add_target(h, &(hcomm_target_config_t){.target = HCOMM_TARGET_FILE, .target_path = in, .dev_mem_size = N},
	                          &tin),
	         HCOMM_OK);
	CHECK_RC(hcomm_add_target(h, &(hcomm_target_config_t){.target = HCOMM_TARGET_FILE, .target_path = out, .dev_mem_size = N},
	                          &tout),
	         HCOMM_OK);
	CHECK(tin == 1 && tout == 2, "targets %u %u", tin, tout);
	void *dev = hcomm_alloc_dev_mem(h, N);
	void *fin = hcomm_alloc_target_mem(h, tin, N);
	void *fout = hcomm_alloc_target_mem(h, tout, N);
	CHECK(dev != NULL && fin == hcomm_target_addr(tin, 0) && fout == hcomm_target_addr(tout, 0), "alloc %p %p %p", dev, fin,
	      fout);
	CHECK_RC(copy_wait(h, dev, fin), HCOMM_OK);  // file → device
	CHECK_RC(copy_wait(h, fout, dev), HCOMM_OK); // device → file
	// A transfer between two targets is a copy's job.
	void *host = hcomm_alloc_host_mem(h, 4096);
	hcomm_transfer_t t = {.src_ptr = fin, .dst_ptr = dev, .size = 4096};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EOPNOTSUPP);
	CHECK_RC(hcomm_copy(h, dev, host, 4096, 0, 0, NULL, NULL, NULL), HCOMM_EFAULT);
	CHECK_RC(hcomm_free_dev_mem(h, fin), HCOMM_OK);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);

	f = fopen(out, "rb");
	CHECK(f != NULL && fread(got, 1, N, f) == N && fclose(f) == 0, "read %s", out);
	CHECK(memcmp(got, want, N) == 0, "%s differs from %s", out, in);
	unlink(in);
	unlink(out);
	free(want);
	free(got);
	printf("ok   files: file → device → file, %d bytes\n", N);
}

static void test_devices(void) {
	hcomm_handle_t h;
	CHECK_RC(hcomm_init(&h, &(hcomm_config_t){.mem_pool_size = 16 << 20, .dev_mem_size = 8 << 20}), HCOMM_OK);
	uint32_t d1 = 0, mem = 0;
	CHECK_RC(hcomm_add_target(h, &(hcomm_target_config_t){.target = HCOMM_TARGET_MOCK, .dev_mem_size = 8 << 20}, &d1),
	         HCOMM_OK);
	CHECK_RC(hcomm_add_target(h, &(hcomm_target_config_t){.target = HCOMM_TARGET_MEMORY}, &mem), HCOMM_OK);
	CHECK_RC(hcomm_add_target(h, NULL, NULL), HCOMM_EINVAL);
	unsigned char *a = hcomm_alloc_host_mem(h, N), *b = hcomm_alloc_host_mem(h, N);
	void *dev0 = hcomm_alloc_dev_mem(h, N), *dev1 = hcomm_alloc_target_mem(h, d1, N);
	CHECK(a != NULL && b != NULL && dev0 != NULL && dev1 != NULL, "alloc");
	fill(a, N, 5);
	hcomm_transfer_t t = {.src_ptr = a, .dst_ptr = dev0, .size = N};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_OK);
	CHECK_RC(hcomm_wait_completion(h, t.id), HCOMM_OK);
	CHECK_RC(copy_wait(h, dev1, dev0), HCOMM_OK); // device → device, through the pool
	t = (hcomm_transfer_t){.src_ptr = dev1, .dst_ptr = b, .size = N};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_OK);
	CHECK_RC(hcomm_wait_completion(h, t.id), HCOMM_OK);
	CHECK(memcmp(a, b, N) == 0, "device 1 holds other bytes than were put on device 0");
	t = (hcomm_transfer_t){.src_ptr = a, .dst_ptr = b, .size = 4096}; // host → host: the memory target
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_OK);
	CHECK_RC(hcomm_wait_completion(h, t.id), HCOMM_OK);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	printf("ok   devices: device → device through the pool, host → host on the memory target\n");
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "files";
	if (strcmp(mode, "files") == 0) {
		const char *dir = getenv("TMPDIR");
		test_files(dir != NULL ? dir : "/tmp");
	} else if (strcmp(mode, "devices") == 0) {
		test_devices();
	} else {
		fprintf(stderr, "usage: test_targets [files|devices]\n");
		return 2;
	}
	return failures != 0;
}
