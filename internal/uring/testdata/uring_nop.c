// uring_nop.c — the C baseline for BenchmarkNop: liburing, the same
// ring set-up (128 entries; SINGLE_ISSUER|DEFER_TASKRUN|COOP_TASKRUN|
// TASKRUN_FLAG tried, dropped on EINVAL; registered ring fd) and the same
// calls per batch (queue k NOPs, one io_uring_submit, reap with
// io_uring_peek_batch_cqe, wait only if some are missing).
//
//   cc -O2 -o uring_nop uring_nop.c -luring
//   ./uring_nop BATCH NOPS     prints: batch=B nops=N Mops/s=X submits=S
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: %s BATCH NOPS\n", argv[0]);
		return 2;
	}
	unsigned batch = (unsigned)atoi(argv[1]);
	long nops = atol(argv[2]);
	if (batch < 1 || batch > 128 || nops < 1) {
		fprintf(stderr, "batch must be 1..128, nops positive\n");
		return 2;
	}
	static const unsigned tries[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		0,
	};
	struct io_uring ring;
	int ret = -EINVAL;
	unsigned flags = 0;
	for (size_t i = 0; i < sizeof tries / sizeof tries[0] && ret == -EINVAL; i++) {
		struct io_uring_params p;
		memset(&p, 0, sizeof p);
		p.flags = flags = tries[i];
		ret = io_uring_queue_init_params(128, &ring, &p);
	}
	if (ret < 0) {
		fprintf(stderr, "io_uring_queue_init_params: %s\n", strerror(-ret));
		return 1;
	}
	if (io_uring_register_ring_fd(&ring) != 1) {
		fprintf(stderr, "warning: ring fd not registered\n");
	}
	struct io_uring_cqe *cqes[128];
	long submits = 0;
	double t0 = now();
	for (long done = 0; done < nops;) {
		unsigned k = batch;
		if (nops - done < k)
			k = (unsigned)(nops - done);
		for (unsigned i = 0; i < k; i++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data64(sqe, i);
		}
		ret = io_uring_submit(&ring);
		submits++;
		if (ret < 0) {
			fprintf(stderr, "io_uring_submit: %s\n", strerror(-ret));
			return 1;
		}
		for (unsigned got = 0; got < k;) {
			unsigned n = io_uring_peek_batch_cqe(&ring, cqes, k - got);
			io_uring_cq_advance(&ring, n);
			got += n;
			if (got < k) {
				struct io_uring_cqe *cqe;
				ret = io_uring_wait_cqe_nr(&ring, &cqe, k - got);
				if (ret < 0) {
					fprintf(stderr, "io_uring_wait_cqe_nr: %s\n", strerror(-ret));
					return 1;
				}
			}
		}
		done += k;
	}
	double dt = now() - t0;
	printf("batch=%u nops=%ld Mops/s=%.3f ns/op=%.1f submits=%ld flags=%#x\n", batch, nops, nops / dt / 1e6,
	       dt * 1e9 / nops, submits, flags);
	io_uring_queue_exit(&ring);
	return 0;
}
