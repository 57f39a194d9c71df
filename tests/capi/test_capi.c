// C tests of libhcomm.so through hcomm.h alone (tests/capi/run.sh builds
// them with cc -Wall -Werror and runs them from make test).
//
//   ./test_capi              every test except those that need a fault
//   ./test_capi NAME...      the named tests (finalize_canceled needs
//                            HCOMM_MOCK_FAULT=stall:N, see run.sh)
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <linux/fs.h>

#include "hcomm.h"
#include "check.h"

// Small, quick engines: a 16 MiB pool, the mock device.
static hcomm_config_t small_cfg(void) {
	hcomm_config_t c = {.mem_pool_size = 16 << 20, .queue_depth = 64, .align_size = 64};
	return c;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
	for (size_t i = 0; i < n; i++) {
		p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
	}
}

// A callback that records what it saw.
struct record {
	_Atomic int calls;
	_Atomic int status;
	_Atomic uint64_t id;
};

static void record_cb(uint64_t id, int status, void *user_data) {
	struct record *r = user_data;
	atomic_store(&r->id, id);
	atomic_store(&r->status, status);
	atomic_fetch_add(&r->calls, 1);
}

static void spin_until(_Atomic int *v, int want, int max_ms) {
	struct timespec ts = {0, 1000000};
	for (int i = 0; i < max_ms && atomic_load(v) < want; i++) {
		nanosleep(&ts, NULL);
	}
}

// ---------------------------------------------------------------------

static void test_codes(void) {
	CHECK(HCOMM_EINVAL == -EINVAL && HCOMM_EFAULT == -EFAULT && HCOMM_EAGAIN == -EAGAIN &&
		      HCOMM_EBADF == -EBADF && HCOMM_ENOMEM == -ENOMEM && HCOMM_ETIMEDOUT == -ETIMEDOUT &&
		      HCOMM_ECANCELED == -ECANCELED && HCOMM_EINPROGRESS == -EINPROGRESS &&
		      HCOMM_ESTALE == -ESTALE && HCOMM_ENOENT == -ENOENT && HCOMM_EIO == -EIO &&
		      HCOMM_ENODEV == -ENODEV && HCOMM_EOPNOTSUPP == -EOPNOTSUPP &&
		      HCOMM_ESHUTDOWN == -ESHUTDOWN && HCOMM_EMFILE == -EMFILE &&
		      HCOMM_EACCES == -EACCES && HCOMM_EBUSY == -EBUSY,
	      "codes are not the negated errnos");
	// HCOMM_EFORK is no errno's negation (Linux errnos end below 200).
	CHECK(HCOMM_EFORK < -200, "HCOMM_EFORK = %d", HCOMM_EFORK);
	CHECK(strstr(hcomm_strerror(HCOMM_EFORK), "fork") != NULL, "strerror(EFORK) = %s", hcomm_strerror(HCOMM_EFORK));
	CHECK(strstr(hcomm_strerror(HCOMM_EBUSY), "in flight") != NULL, "strerror(EBUSY) = %s", hcomm_strerror(HCOMM_EBUSY));
	CHECK(strcmp(hcomm_strerror(HCOMM_OK), "success") == 0, "strerror(0)");
	CHECK(strstr(hcomm_strerror(HCOMM_EFAULT), "pointer") != NULL, "strerror(EFAULT) = %s", hcomm_strerror(HCOMM_EFAULT));
	CHECK(strstr(hcomm_strerror(12345), "unknown") != NULL, "strerror(12345)");
}

static void test_config_errors(void) {
	hcomm_handle_t h = 99;
	CHECK_RC(hcomm_init(NULL, NULL), HCOMM_EINVAL);
	hcomm_config_t c = small_cfg();
	c.queue_depth = 3; // not a power of two
	CHECK_RC(hcomm_init(&h, &c), HCOMM_EINVAL);
	CHECK(h == 0, "handle %llu after a failed init", (unsigned long long)h);
	c = small_cfg();
	c.align_size = 48;
	CHECK_RC(hcomm_init(&h, &c), HCOMM_EINVAL);
	c = small_cfg();
	c.reserved = 1;
	CHECK_RC(hcomm_init(&h, &c), HCOMM_EINVAL);
	c = small_cfg();
	c.target = 42;
	CHECK_RC(hcomm_init(&h, &c), HCOMM_EINVAL);
	c = small_cfg();
	c.target = HCOMM_TARGET_FILE; // no path
	CHECK_RC(hcomm_init(&h, &c), HCOMM_EINVAL);
	c = small_cfg();
	c.target = HCOMM_TARGET_VFIO;
	c.target_path = "0000:7f:1f.7"; // no such device here
	CHECK_RC(hcomm_init(&h, &c), HCOMM_ENODEV);
	c.target_path = "not-a-pci-address";
	CHECK_RC(hcomm_init(&h, &c), HCOMM_ENODEV);
	// Calls on handles that were never valid.
	CHECK(hcomm_alloc_host_mem(0, 64) == NULL && errno == EBADF, "alloc on handle 0: errno %d", errno);
	CHECK_RC(hcomm_free_host_mem(12345, NULL), HCOMM_EBADF);
	CHECK_RC(hcomm_wait_completion(0, 1), HCOMM_EBADF);
	CHECK_RC(hcomm_finalize(0), HCOMM_EBADF);
}

static void test_single_with_callback(void) {
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	CHECK_RC(hcomm_init(&h, &c), HCOMM_OK);
	const size_t n = 256 << 10; // above any CPU-path threshold: the DMA engine moves it
	unsigned char *host = hcomm_alloc_host_mem(h, n);
	void *dev = hcomm_alloc_dev_mem(h, n);
	CHECK(host != NULL && dev != NULL, "alloc: %s", strerror(errno));
	CHECK(((uintptr_t)host & 63) == 0, "host %p not 64-byte aligned", (void *)host);
	CHECK((uintptr_t)dev >= HCOMM_DEV_ADDR_BASE, "dev %p below HCOMM_DEV_ADDR_BASE", dev);
	fill(host, n, 1);
	struct record r = {0};
	hcomm_transfer_t t = {.src_ptr = host, .dst_ptr = dev, .size = n, .callback = record_cb, .user_data = &r};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_OK);
	CHECK(t.id != 0, "no id");
	CHECK_RC(hcomm_wait_completion(h, t.id), HCOMM_OK);
	spin_until(&r.calls, 1, 5000);
	CHECK(atomic_load(&r.calls) == 1, "callback ran %d times", atomic_load(&r.calls));
	CHECK(atomic_load(&r.id) == t.id, "callback id %llu, submit id %llu",
	      (unsigned long long)atomic_load(&r.id), (unsigned long long)t.id);
	CHECK(atomic_load(&r.status) == HCOMM_OK, "callback status %d", atomic_load(&r.status));
	// Waiting again for a completed transfer still answers (its slot is not reused yet).
	CHECK_RC(hcomm_wait_completion_timeout(h, t.id, 0), HCOMM_OK);
	// An ID this handle never issued.
	CHECK_RC(hcomm_wait_completion(h, 0), HCOMM_ENOENT);
	CHECK_RC(hcomm_wait_completion(h, t.id ^ (1ULL << 60)), HCOMM_ENOENT);
	CHECK_RC(hcomm_free_host_mem(h, host), HCOMM_OK);
	CHECK_RC(hcomm_free_dev_mem(h, dev), HCOMM_OK);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	CHECK(atomic_load(&r.calls) == 1, "callback ran %d times after finalize", atomic_load(&r.calls));
}

// host→device→host, compared byte for byte, in several sizes (the smaller
// ones take the CPU path into device memory, the larger the DMA engine).
static void test_round_trip(void) {
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	CHECK_RC(hcomm_init(&h, &c), HCOMM_OK);
	static const size_t sizes[] = {1, 63, 64, 4096, 65537, 1 << 20, 3 << 20};
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		size_t n = sizes[k];
		unsigned char *a = hcomm_alloc_host_mem(h, n);
		unsigned char *b = hcomm_alloc_host_mem(h, n);
		unsigned char *dev = hcomm_alloc_dev_mem(h, n + 128);
		CHECK(a && b && dev, "alloc %zu: %s", n, strerror(errno));
		fill(a, n, (unsigned)k + 7);
		memset(b, 0xEE, n);
		// Into device memory at an offset inside the allocation, and back.
		hcomm_transfer_t up = {.src_ptr = a, .dst_ptr = dev + 64, .size = n};
		CHECK_RC(hcomm_submit_transfer(h, &up), HCOMM_OK);
		CHECK_RC(hcomm_wait_completion(h, up.id), HCOMM_OK);
		hcomm_transfer_t down = {.src_ptr = dev + 64, .dst_ptr = b, .size = n};
		CHECK_RC(hcomm_submit_transfer(h, &down), HCOMM_OK);
		CHECK_RC(hcomm_wait_completion(h, down.id), HCOMM_OK);
		CHECK(memcmp(a, b, n) == 0, "round trip of %zu bytes differs", n);
		// device→device, then back out of the second place.
		unsigned char *dev2 = hcomm_alloc_dev_mem(h, n);
		memset(b, 0, n);
		hcomm_transfer_t d2d = {.src_ptr = dev + 64, .dst_ptr = dev2, .size = n};
		CHECK_RC(hcomm_submit_transfer(h, &d2d), HCOMM_OK);
		CHECK_RC(hcomm_wait_completion(h, d2d.id), HCOMM_OK);
		hcomm_transfer_t back = {.src_ptr = dev2, .dst_ptr = b, .size = n};
		CHECK_RC(hcomm_submit_transfer(h, &back), HCOMM_OK);
		CHECK_RC(hcomm_wait_completion(h, back.id), HCOMM_OK);
		CHECK(memcmp(a, b, n) == 0, "device-to-device copy of %zu bytes differs", n);
		CHECK_RC(hcomm_free_dev_mem(h, dev2), HCOMM_OK);
		CHECK_RC(hcomm_free_dev_mem(h, dev), HCOMM_OK);
		CHECK_RC(hcomm_free_host_mem(h, a), HCOMM_OK);
		CHECK_RC(hcomm_free_host_mem(h, b), HCOMM_OK);
	}
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
}

static void test_batch(void) {
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	CHECK_RC(hcomm_init(&h, &c), HCOMM_OK);
	enum { N = 48, SZ = 64 << 10 };
	unsigned char *src = hcomm_alloc_host_mem(h, N * SZ);
	unsigned char *dst = hcomm_alloc_host_mem(h, N * SZ);
	unsigned char *dev = hcomm_alloc_dev_mem(h, N * SZ);
	CHECK(src && dst && dev, "alloc: %s", strerror(errno));
	fill(src, N * SZ, 3);
	memset(dst, 0, N * SZ);
	struct record r[N];
	memset(r, 0, sizeof r);
	hcomm_transfer_t ts[N];
	for (int i = 0; i < N; i++) {
		ts[i] = (hcomm_transfer_t){.src_ptr = src + i * SZ, .dst_ptr = dev + i * SZ, .size = SZ,
		                           .callback = record_cb, .user_data = &r[i]};
	}
	CHECK_RC(hcomm_submit_batch(h, ts, N), HCOMM_OK);
	for (int i = 0; i < N; i++) {
		CHECK(ts[i].id != 0, "batch entry %d has no id", i);
		for (int j = 0; j < i; j++) {
			CHECK(ts[i].id != ts[j].id, "ids %d and %d equal", i, j);
		}
	}
	for (int i = 0; i < N; i++) {
		CHECK_RC(hcomm_wait_completion(h, ts[i].id), HCOMM_OK);
	}
	for (int i = 0; i < N; i++) {
		spin_until(&r[i].calls, 1, 5000);
		CHECK(atomic_load(&r[i].calls) == 1 && atomic_load(&r[i].id) == ts[i].id && atomic_load(&r[i].status) == 0,
		      "entry %d: %d calls, id %llu, status %d", i, atomic_load(&r[i].calls),
		      (unsigned long long)atomic_load(&r[i].id), atomic_load(&r[i].status));
	}
	// Back in one batch without callbacks.
	for (int i = 0; i < N; i++) {
		ts[i] = (hcomm_transfer_t){.src_ptr = dev + i * SZ, .dst_ptr = dst + i * SZ, .size = SZ};
	}
	CHECK_RC(hcomm_submit_batch(h, ts, N), HCOMM_OK);
	for (int i = 0; i < N; i++) {
		CHECK_RC(hcomm_wait_completion(h, ts[i].id), HCOMM_OK);
	}
	CHECK(memcmp(src, dst, N * SZ) == 0, "batch round trip differs");
	// One bad pointer: nothing is submitted, every id stays 0.
	ts[5].src_ptr = (void *)ts; // stack memory
	CHECK_RC(hcomm_submit_batch(h, ts, N), HCOMM_EFAULT);
	for (int i = 0; i < N; i++) {
		CHECK(ts[i].id == 0, "entry %d submitted from a refused batch", i);
	}
	CHECK_RC(hcomm_submit_batch(h, ts, -1), HCOMM_EINVAL);
	CHECK_RC(hcomm_submit_batch(h, NULL, 0), HCOMM_OK);
	// Longer than the queue: the queue fills, a prefix goes in.
	enum { M = 200 };
	static hcomm_transfer_t big[M];
	struct record rb = {0};
	for (int i = 0; i < M; i++) {
		big[i] = (hcomm_transfer_t){.src_ptr = dev, .dst_ptr = dst, .size = SZ, .callback = record_cb, .user_data = &rb};
	}
	// A full queue submits a prefix and says HCOMM_EAGAIN; the caller
	// resubmits the rest.
	int submitted = 0, rounds = 0;
	while (submitted < M && rounds < 10000) {
		int rc = hcomm_submit_batch(h, big + submitted, M - submitted);
		int k = 0;
		while (submitted + k < M && big[submitted + k].id != 0) {
			k++;
		}
		for (int i = submitted + k; i < M; i++) {
			CHECK(big[i].id == 0, "entry %d submitted after a refused one", i);
		}
		CHECK(rc == HCOMM_OK ? k == M - submitted : rc == HCOMM_EAGAIN && k < M - submitted,
		      "batch of %d: rc %d, %d submitted", M - submitted, rc, k);
		submitted += k;
		if (rc == HCOMM_EAGAIN) {
			struct timespec ts = {0, 200000};
			nanosleep(&ts, NULL);
			rounds++;
		}
	}
	CHECK(submitted == M, "only %d of %d submitted", submitted, M);
	spin_until(&rb.calls, submitted, 10000);
	CHECK(atomic_load(&rb.calls) == submitted, "%d callbacks for %d submitted", atomic_load(&rb.calls), submitted);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	CHECK(atomic_load(&rb.calls) == submitted, "%d callbacks for %d submitted after finalize", atomic_load(&rb.calls), submitted);
}

static void test_bad_pointers(void) {
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	CHECK_RC(hcomm_init(&h, &c), HCOMM_OK);
	unsigned char *host = hcomm_alloc_host_mem(h, 4096);
	unsigned char *dev = hcomm_alloc_dev_mem(h, 4096);
	unsigned char *heap = malloc(4096);
	unsigned char stack[64];
	CHECK(host && dev && heap, "alloc");
	struct record r = {0};
	struct {
		void *src, *dst;
		size_t n;
		int want;
		const char *what;
	} cases[] = {
		{heap, dev, 64, HCOMM_EFAULT, "malloc'd source"},
		{dev, heap, 64, HCOMM_EFAULT, "malloc'd destination"},
		{stack, dev, 64, HCOMM_EFAULT, "stack source"},
		{NULL, dev, 64, HCOMM_EFAULT, "NULL source"},
		{host, NULL, 64, HCOMM_EFAULT, "NULL destination"},
		{host, dev, 4097, HCOMM_EFAULT, "past the end of both blocks"},
		{host + 4000, dev, 200, HCOMM_EFAULT, "host range leaves its block"},
		{host, dev + 4000, 200, HCOMM_EFAULT, "device range leaves its allocation"},
		{host, dev + 8192, 64, HCOMM_EFAULT, "unallocated device memory"},
		{host, (void *)(uintptr_t)(HCOMM_DEV_ADDR_BASE + (1ULL << 40)), 64, HCOMM_EFAULT, "beyond device memory"},
		{host, (void *)(uintptr_t)UINT64_MAX, 64, HCOMM_EFAULT, "all-ones address"},
		{host, dev, 0, HCOMM_EINVAL, "zero size"},
		{host, host + 2048, 64, HCOMM_EOPNOTSUPP, "host to host on a device"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		hcomm_transfer_t t = {.src_ptr = cases[i].src, .dst_ptr = cases[i].dst, .size = cases[i].n,
		                      .callback = record_cb, .user_data = &r, .id = 77};
		int rc = hcomm_submit_transfer(h, &t);
		CHECK(rc == cases[i].want, "%s: got %d (%s), want %d", cases[i].what, rc, hcomm_strerror(rc), cases[i].want);
		CHECK(t.id == 0, "%s: id %llu", cases[i].what, (unsigned long long)t.id);
	}
	CHECK_RC(hcomm_submit_transfer(h, NULL), HCOMM_EINVAL);
	// Frees: only exact pointers that are live.
	CHECK_RC(hcomm_free_host_mem(h, heap), HCOMM_EFAULT);
	CHECK_RC(hcomm_free_host_mem(h, host + 64), HCOMM_EFAULT);
	CHECK_RC(hcomm_free_host_mem(h, dev), HCOMM_EFAULT);
	CHECK_RC(hcomm_free_dev_mem(h, host), HCOMM_EFAULT);
	CHECK_RC(hcomm_free_dev_mem(h, dev + 64), HCOMM_EFAULT);
	CHECK_RC(hcomm_free_host_mem(h, host), HCOMM_OK);
	CHECK_RC(hcomm_free_host_mem(h, host), HCOMM_EFAULT); // double free
	CHECK_RC(hcomm_free_dev_mem(h, dev), HCOMM_OK);
	CHECK_RC(hcomm_free_dev_mem(h, dev), HCOMM_EFAULT);
	// Freed memory is refused by submit.
	unsigned char *dev2 = hcomm_alloc_dev_mem(h, 4096);
	hcomm_transfer_t t = {.src_ptr = host, .dst_ptr = dev2, .size = 64};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EFAULT);
	// Allocation errors.
	CHECK(hcomm_alloc_host_mem(h, 0) == NULL && errno == EINVAL, "alloc 0: errno %d", errno);
	CHECK(hcomm_alloc_host_mem(h, (size_t)1 << 40) == NULL && (errno == ENOMEM || errno == EINVAL), "alloc 1 TiB: errno %d", errno);
	CHECK(hcomm_alloc_dev_mem(h, (size_t)1 << 40) == NULL && errno == ENOMEM, "dev alloc 1 TiB: errno %d", errno);
	CHECK(atomic_load(&r.calls) == 0, "a refused transfer ran its callback");
	free(heap);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	// The handle is gone.
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EBADF);
	CHECK_RC(hcomm_finalize(h), HCOMM_EBADF);
	CHECK(hcomm_alloc_host_mem(h, 64) == NULL && errno == EBADF, "alloc after finalize: errno %d", errno);
}

// Finalize while transfers are in flight: every callback runs exactly once
// (completed or canceled), finalize returns, the handle is gone.
static void finalize_in_flight(int timeout_ms, int expect_canceled) {
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	CHECK_RC(hcomm_init(&h, &c), HCOMM_OK);
	enum { N = 64, SZ = 128 << 10 };
	unsigned char *src = hcomm_alloc_host_mem(h, SZ);
	unsigned char *dev = hcomm_alloc_dev_mem(h, SZ);
	CHECK(src && dev, "alloc");
	static struct record r[N];
	memset(r, 0, sizeof r);
	int submitted = 0;
	uint64_t first = 0;
	for (int i = 0; i < N; i++) {
		hcomm_transfer_t t = {.src_ptr = src, .dst_ptr = dev, .size = SZ, .callback = record_cb, .user_data = &r[i]};
		int rc = hcomm_submit_transfer(h, &t);
		if (rc == HCOMM_OK && first == 0) {
			first = t.id;
		}
		CHECK(rc == HCOMM_OK || rc == HCOMM_EAGAIN, "submit %d: %d", i, rc);
		if (rc == HCOMM_OK) {
			submitted++;
		} else {
			atomic_store(&r[i].calls, -1000); // not submitted: must never be called
		}
	}
	if (expect_canceled) {
		// The stalled transfer is still in flight: a bounded wait says so.
		CHECK_RC(hcomm_wait_completion_timeout(h, first, 20), HCOMM_EINPROGRESS);
		CHECK_RC(hcomm_wait_completion_timeout(h, first, 0), HCOMM_EINPROGRESS);
	}
	int rc = timeout_ms < 0 ? hcomm_finalize(h) : hcomm_finalize_timeout(h, timeout_ms);
	CHECK_RC(rc, HCOMM_OK);
	int ok = 0, canceled = 0, other = 0;
	for (int i = 0; i < N; i++) {
		int calls = atomic_load(&r[i].calls);
		if (calls == -1000) {
			continue;
		}
		CHECK(calls == 1, "transfer %d: callback ran %d times", i, calls);
		switch (atomic_load(&r[i].status)) {
		case HCOMM_OK: ok++; break;
		case HCOMM_ECANCELED: canceled++; break;
		default: other++;
		}
	}
	printf("    finalize_timeout(%d): %d submitted: %d completed, %d canceled, %d other\n", timeout_ms, submitted, ok, canceled, other);
	CHECK(ok + canceled == submitted && other == 0, "statuses: %d ok, %d canceled, %d other", ok, canceled, other);
	if (expect_canceled) {
		// The device stalls on its first descriptor: nothing can complete
		// before finalize cancels.
		CHECK(canceled == submitted && submitted > 0, "%d canceled of %d", canceled, submitted);
	} else if (timeout_ms < 0) {
		CHECK(ok == submitted, "unbounded finalize canceled %d", canceled);
	}
	CHECK_RC(hcomm_wait_completion(h, 1), HCOMM_EBADF);
}

static void test_finalize_in_flight(void) {
	finalize_in_flight(-1, 0); // drain: all complete
	finalize_in_flight(0, 0);  // cancel at once: some complete, the rest are canceled
}

static void test_finalize_canceled(void) {
	const char *f = getenv("HCOMM_MOCK_FAULT");
	CHECK(f != NULL && strncmp(f, "stall:1", 8) == 0, "run with HCOMM_MOCK_FAULT=stall:1 (got %s)", f ? f : "nothing");
	finalize_in_flight(50, 1);
}

// Several threads submitting at once, each waiting for its own transfers.
static hcomm_handle_t mt_h;
static unsigned char *mt_src, *mt_dev;
static _Atomic int mt_calls;
static void count_cb(uint64_t id, int status, void *user_data) {
	(void)id;
	(void)user_data;
	if (status == HCOMM_OK) {
		atomic_fetch_add(&mt_calls, 1);
	}
}
static void *mt_worker(void *arg) {
	long k = (long)arg;
	long bad = 0;
	for (int i = 0; i < 500; i++) {
		hcomm_transfer_t t = {.src_ptr = mt_src + k * 4096, .dst_ptr = mt_dev + k * 4096, .size = 4096, .callback = count_cb};
		int rc;
		while ((rc = hcomm_submit_transfer(mt_h, &t)) == HCOMM_EAGAIN) {
			sched_yield();
		}
		if (rc != HCOMM_OK) {
			fprintf(stderr, "thread %ld: submit %d: %s\n", k, i, hcomm_strerror(rc));
			bad++;
			continue;
		}
		rc = hcomm_wait_completion(mt_h, t.id);
		if (rc == HCOMM_ESTALE) {
			// Legal: 64 later transfers of other threads completed and
			// reused the slot before this wait looked. Not a failure.
			continue;
		}
		if (rc != HCOMM_OK) {
			fprintf(stderr, "thread %ld: wait %d: %s\n", k, i, hcomm_strerror(rc));
			bad++;
		}
	}
	return (void *)bad;
}
static void test_threads(void) {
	hcomm_config_t c = small_cfg();
	CHECK_RC(hcomm_init(&mt_h, &c), HCOMM_OK);
	mt_src = hcomm_alloc_host_mem(mt_h, 4 * 4096);
	mt_dev = hcomm_alloc_dev_mem(mt_h, 4 * 4096);
	atomic_store(&mt_calls, 0);
	pthread_t th[4];
	for (long k = 0; k < 4; k++) {
		pthread_create(&th[k], NULL, mt_worker, (void *)k);
	}
	long bad = 0;
	for (int k = 0; k < 4; k++) {
		void *r;
		pthread_join(th[k], &r);
		bad += (long)r;
	}
	CHECK_RC(hcomm_finalize(mt_h), HCOMM_OK);
	CHECK(atomic_load(&mt_calls) == 2000, "%d successful callbacks of 2000", atomic_load(&mt_calls));
	CHECK(bad == 0, "%ld submits or waits failed", bad);
}

// The file target: device addresses are file offsets.
static void test_file_target(void) {
	char path[] = "/tmp/hcomm-capi-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	c.target = HCOMM_TARGET_FILE;
	c.target_path = path;
	c.dev_mem_size = 1 << 20;
	int rc = hcomm_init(&h, &c);
	if (rc != HCOMM_OK) {
		unlink(path);
		close(fd);
	}
	CHECK_RC(rc, HCOMM_OK);
	const size_t n = 8192;
	unsigned char *a = hcomm_alloc_host_mem(h, n), *b = hcomm_alloc_host_mem(h, n);
	unsigned char *off = hcomm_alloc_dev_mem(h, n);
	fill(a, n, 9);
	hcomm_transfer_t w = {.src_ptr = a, .dst_ptr = off, .size = n};
	CHECK_RC(hcomm_submit_transfer(h, &w), HCOMM_OK);
	CHECK_RC(hcomm_wait_completion(h, w.id), HCOMM_OK);
	unsigned char disk[8192];
	CHECK(pread(fd, disk, n, (off_t)((uintptr_t)off - HCOMM_DEV_ADDR_BASE)) == (ssize_t)n, "pread");
	CHECK(memcmp(disk, a, n) == 0, "file bytes differ from the host buffer");
	hcomm_transfer_t r = {.src_ptr = off, .dst_ptr = b, .size = n};
	CHECK_RC(hcomm_submit_transfer(h, &r), HCOMM_OK);
	CHECK_RC(hcomm_wait_completion(h, r.id), HCOMM_OK);
	CHECK(memcmp(a, b, n) == 0, "file round trip differs");
	hcomm_transfer_t hh = {.src_ptr = a, .dst_ptr = b, .size = 64};
	CHECK_RC(hcomm_submit_transfer(h, &hh), HCOMM_EOPNOTSUPP);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	close(fd);
	unlink(path);
}

// The memory target: host to host, no device memory.
static void test_memory_target(void) {
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	c.target = HCOMM_TARGET_MEMORY;
	CHECK_RC(hcomm_init(&h, &c), HCOMM_OK);
	unsigned char *a = hcomm_alloc_host_mem(h, 4096), *b = hcomm_alloc_host_mem(h, 4096);
	CHECK(hcomm_alloc_dev_mem(h, 64) == NULL && errno == EOPNOTSUPP, "dev alloc on memory target: errno %d", errno);
	fill(a, 4096, 5);
	struct record r = {0};
	hcomm_transfer_t t = {.src_ptr = a, .dst_ptr = b, .size = 4096, .callback = record_cb, .user_data = &r};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_OK);
	CHECK_RC(hcomm_wait_completion(h, t.id), HCOMM_OK);
	CHECK(memcmp(a, b, 4096) == 0, "memory copy differs");
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	CHECK(atomic_load(&r.calls) == 1, "callback ran %d times", atomic_load(&r.calls));
}

// ---- hcomm_last_error, fork, registered memory, targets that cannot be opened

static void *other_thread_error(void *arg) {
	(void)arg;
	return (void *)hcomm_last_error();
}

static void test_last_error(void) {
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	c.queue_depth = 100;
	CHECK_RC(hcomm_init(&h, &c), HCOMM_EINVAL);
	const char *e = hcomm_last_error();
	CHECK(strstr(e, "100") != NULL && strstr(e, "power of two") != NULL, "last error after queue_depth 100: \"%s\"", e);
	// Thread-local: a thread on which nothing failed sees "".
	pthread_t th;
	void *other;
	CHECK(pthread_create(&th, NULL, other_thread_error, NULL) == 0, "pthread_create");
	pthread_join(th, &other);
	CHECK(other != NULL && ((const char *)other)[0] == 0, "other thread's last error: \"%s\"", (const char *)other);
	// A success leaves it; the next failure replaces it.
	CHECK_RC(hcomm_init(&h, NULL), HCOMM_OK);
	CHECK(strstr(hcomm_last_error(), "100") != NULL, "cleared by a success: \"%s\"", hcomm_last_error());
	int x;
	hcomm_transfer_t t = {.src_ptr = &x, .dst_ptr = &x, .size = 4};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EFAULT);
	CHECK(strstr(hcomm_last_error(), "src_ptr") != NULL, "last error after a stack pointer: \"%s\"", hcomm_last_error());
	// A code without a detailed message still gets its text.
	CHECK_RC(hcomm_wait_completion(h, 12345), HCOMM_ENOENT);
	CHECK(strlen(hcomm_last_error()) > 0, "no message after ENOENT");
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	CHECK_RC(hcomm_finalize(h), HCOMM_EBADF);
	CHECK(strlen(hcomm_last_error()) > 0, "no message after EBADF");
}

// in_child runs fn in a forked child and returns what it exited with (-1:
// killed, e.g. by the alarm that catches a hang).
static int in_child(int (*fn)(void *), void *arg) {
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		alarm(20); // a hang in the runtime would end here, as a failure
		_exit(fn(arg));
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		return -2;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int child_calls(void *arg) {
	hcomm_handle_t parent = arg ? *(hcomm_handle_t *)arg : 0;
	hcomm_handle_t h = 7;
	if (hcomm_init(&h, NULL) != HCOMM_EFORK || h != 0) {
		return 10;
	}
	if (strstr(hcomm_last_error(), "fork") == NULL) {
		return 11;
	}
	errno = 0;
	if (hcomm_alloc_host_mem(parent, 64) != NULL || errno != -HCOMM_EFORK) {
		return 12;
	}
	hcomm_transfer_t t = {.src_ptr = &h, .dst_ptr = &h, .size = 8, .id = 99};
	if (hcomm_submit_transfer(parent, &t) != HCOMM_EFORK || t.id != 0) {
		return 13;
	}
	if (hcomm_wait_completion(parent, 1) != HCOMM_EFORK || hcomm_finalize(parent) != HCOMM_EFORK ||
	    hcomm_register_host_mem(parent, &h, 8) != HCOMM_EFORK) {
		return 14;
	}
	if (strcmp(hcomm_version(NULL, NULL, NULL), HCOMM_VERSION_STRING) != 0) {
		return 15;
	}
	return 0;
}

// The child of a process that holds an engine: every call is HCOMM_EFORK,
// at once; the parent's engine is unharmed.
static void test_fork(void) {
	hcomm_handle_t h;
	CHECK_RC(hcomm_init(&h, NULL), HCOMM_OK);
	int rc = in_child(child_calls, &h);
	CHECK(rc == 0, "child: %d (10..15: a call did not return HCOMM_EFORK; -1: killed, a hang)", rc);
	unsigned char *a = hcomm_alloc_host_mem(h, 4096), *d = hcomm_alloc_dev_mem(h, 4096);
	CHECK(a != NULL && d != NULL, "parent alloc after fork");
	hcomm_transfer_t t = {.src_ptr = a, .dst_ptr = d, .size = 4096};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_OK);
	CHECK_RC(hcomm_wait_completion(h, t.id), HCOMM_OK);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
}

// fork_noinit runs first in its own process (run.sh): the parent never
// entered the library, the child still must not hang.
static void test_fork_noinit(void) {
	int rc = in_child(child_calls, NULL);
	CHECK(rc == 0, "child: %d (10..15: a call did not return HCOMM_EFORK; -1: killed, a hang)", rc);
	hcomm_handle_t h;
	CHECK_RC(hcomm_init(&h, NULL), HCOMM_OK);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
}

static void *map_pages(size_t n) {
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

// register_on: caller memory used in place on target (mock: through device
// memory; memory: host to host), and every misuse refused.
static void register_on(int target) {
	const size_t n = 1 << 20, ps = (size_t)sysconf(_SC_PAGESIZE);
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	c.target = target;
	CHECK_RC(hcomm_init(&h, &c), HCOMM_OK);
	unsigned char *src = map_pages(n), *dst = map_pages(n);
	CHECK(src != NULL && dst != NULL, "mmap");
	fill(src, n, 21);
	CHECK_RC(hcomm_register_host_mem(h, src, n), HCOMM_OK);
	CHECK_RC(hcomm_register_host_mem(h, dst, n), HCOMM_OK);
	struct record r = {0};
	if (target == HCOMM_TARGET_MEMORY) {
		hcomm_transfer_t t = {.src_ptr = src, .dst_ptr = dst, .size = n, .callback = record_cb, .user_data = &r};
		CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_OK);
		CHECK_RC(hcomm_wait_completion(h, t.id), HCOMM_OK);
	} else {
		unsigned char *dev = hcomm_alloc_dev_mem(h, n);
		CHECK(dev != NULL, "alloc_dev_mem: %s", hcomm_last_error());
		hcomm_transfer_t ts[2] = {
			{.src_ptr = src, .dst_ptr = dev, .size = n},
			{.src_ptr = dev + 4096, .dst_ptr = dst + 4096, .size = n - 8192, .callback = record_cb, .user_data = &r},
		};
		CHECK_RC(hcomm_submit_transfer(h, &ts[0]), HCOMM_OK);
		CHECK_RC(hcomm_wait_completion(h, ts[0].id), HCOMM_OK);
		CHECK_RC(hcomm_submit_transfer(h, &ts[1]), HCOMM_OK);
		CHECK_RC(hcomm_wait_completion(h, ts[1].id), HCOMM_OK);
		memcpy(dst, src, 4096); // the ends the second transfer skipped
		memcpy(dst + n - 4096, src + n - 4096, 4096);
	}
	spin_until(&r.calls, 1, 5000);
	CHECK(atomic_load(&r.calls) == 1 && atomic_load(&r.status) == HCOMM_OK, "callback: %d calls, status %d", atomic_load(&r.calls), atomic_load(&r.status));
	CHECK(memcmp(src, dst, n) == 0, "registered round trip differs");
	// Misuse.
	unsigned char *pool = hcomm_alloc_host_mem(h, 2 * ps);
	CHECK(pool != NULL, "alloc_host_mem");
	CHECK_RC(hcomm_register_host_mem(h, src + 64, ps), HCOMM_EINVAL);      // not page aligned
	CHECK_RC(hcomm_register_host_mem(h, src, ps + 1), HCOMM_EINVAL);       // not whole pages
	CHECK_RC(hcomm_register_host_mem(h, src + ps, ps), HCOMM_EINVAL);      // overlaps a registration
	CHECK(strstr(hcomm_last_error(), "overlaps") != NULL, "last error: %s", hcomm_last_error());
	CHECK_RC(hcomm_register_host_mem(h, NULL, ps), HCOMM_EINVAL);
	CHECK_RC(hcomm_free_host_mem(h, src), HCOMM_EINVAL);                  // registered: unregister it
	CHECK_RC(hcomm_unregister_host_mem(h, pool), HCOMM_EINVAL);           // pool memory: free it
	CHECK_RC(hcomm_unregister_host_mem(h, src + ps), HCOMM_EFAULT);       // not a registration's start
	CHECK_RC(hcomm_unregister_host_mem(h, src), HCOMM_OK);
	CHECK_RC(hcomm_unregister_host_mem(h, src), HCOMM_EFAULT);            // twice
	hcomm_transfer_t gone = {.src_ptr = src, .dst_ptr = dst, .size = 64};
	if (target != HCOMM_TARGET_MEMORY) {
		gone.dst_ptr = hcomm_alloc_dev_mem(h, 64);
	}
	CHECK_RC(hcomm_submit_transfer(h, &gone), HCOMM_EFAULT);              // unregistered memory
	// dst stays registered: finalize unregisters it; the memory is ours again.
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	memset(dst, 0, n);
	CHECK(munmap(src, n) == 0 && munmap(dst, n) == 0, "munmap");
}

static void test_register(void) {
	register_on(HCOMM_TARGET_MOCK);
	register_on(HCOMM_TARGET_MEMORY);
}

// register_busy (HCOMM_MOCK_FAULT=stall:1, see run.sh): the device stalls
// on a transfer from registered memory; unregister refuses (HCOMM_EBUSY)
// until the transfer ended, then succeeds.
static void test_register_busy(void) {
	const size_t n = 1 << 20;
	hcomm_handle_t h;
	CHECK_RC(hcomm_init(&h, NULL), HCOMM_OK);
	unsigned char *mem = map_pages(n), *dev = hcomm_alloc_dev_mem(h, n);
	CHECK(mem != NULL && dev != NULL, "alloc");
	CHECK_RC(hcomm_register_host_mem(h, mem, n), HCOMM_OK);
	hcomm_transfer_t t = {.src_ptr = mem, .dst_ptr = dev, .size = n};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_OK);
	CHECK_RC(hcomm_unregister_host_mem(h, mem), HCOMM_EBUSY);
	CHECK(strstr(hcomm_last_error(), "in flight") != NULL, "last error: %s", hcomm_last_error());
	CHECK_RC(hcomm_wait_completion(h, t.id), HCOMM_ETIMEDOUT); // the stall, timed out by the engine
	CHECK_RC(hcomm_unregister_host_mem(h, mem), HCOMM_OK);
	CHECK_RC(hcomm_finalize(h), HCOMM_OK);
	munmap(mem, n);
}

// Targets that cannot be opened get a code of hcomm.h, never a raw errno
// (a directory gave -21, an immutable file -1).
static void test_bad_targets(void) {
	hcomm_handle_t h;
	hcomm_config_t c = small_cfg();
	c.target = HCOMM_TARGET_FILE;
	c.target_path = "/tmp";
	CHECK_RC(hcomm_init(&h, &c), HCOMM_EINVAL);
	CHECK(strstr(hcomm_last_error(), "/tmp") != NULL, "last error: %s", hcomm_last_error());
	c.target_path = "/nonexistent-dir/x";
	CHECK_RC(hcomm_init(&h, &c), HCOMM_ENODEV);
	char path[] = "/var/tmp/hcomm-immutable-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
	int flags = 0;
	if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0 || (flags |= FS_IMMUTABLE_FL, ioctl(fd, FS_IOC_SETFLAGS, &flags)) != 0) {
		printf("SKIP bad_targets: immutable file: FS_IOC_SETFLAGS: %s (file system or privilege)\n", strerror(errno));
		close(fd);
		unlink(path);
		return;
	}
	c.target_path = path;
	int rc = hcomm_init(&h, &c);
	flags &= ~FS_IMMUTABLE_FL;
	ioctl(fd, FS_IOC_SETFLAGS, &flags);
	close(fd);
	unlink(path);
	CHECK(rc == HCOMM_EACCES, "immutable file: %d (%s), want HCOMM_EACCES", rc, hcomm_strerror(rc));
}

struct test {
	const char *name;
	void (*fn)(void);
	int by_name_only;
};
static const struct test tests[] = {
	{"codes", test_codes, 0},
	{"config_errors", test_config_errors, 0},
	{"single_with_callback", test_single_with_callback, 0},
	{"round_trip", test_round_trip, 0},
	{"batch", test_batch, 0},
	{"bad_pointers", test_bad_pointers, 0},
	{"finalize_in_flight", test_finalize_in_flight, 0},
	{"finalize_canceled", test_finalize_canceled, 1},
	{"threads", test_threads, 0},
	{"file_target", test_file_target, 0},
	{"memory_target", test_memory_target, 0},
	{"last_error", test_last_error, 0},
	{"fork", test_fork, 0},
	{"fork_noinit", test_fork_noinit, 1},
	{"register", test_register, 0},
	{"register_busy", test_register_busy, 1},
	{"bad_targets", test_bad_targets, 0},
};

static void run(const struct test *t) {
	int before = failures;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	t->fn();
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
	printf("%s %s (%.0f ms)\n", failures == before ? "ok  " : "FAIL", t->name, ms);
}

int main(int argc, char **argv) {
	size_t nt = sizeof tests / sizeof tests[0];
	if (argc == 1) {
		for (size_t i = 0; i < nt; i++) {
			if (!tests[i].by_name_only) {
				run(&tests[i]);
			}
		}
	}
	for (int a = 1; a < argc; a++) {
		size_t i = 0;
		while (i < nt && strcmp(tests[i].name, argv[a]) != 0) {
			i++;
		}
		if (i == nt) {
			fprintf(stderr, "no test %s\n", argv[a]);
			return 2;
		}
		run(&tests[i]);
	}
	if (failures) {
		printf("FAIL: %d failed checks\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
