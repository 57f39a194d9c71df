// Reproducer: io_uring requests punted to io-wq complete with -ECANCELED
// when the submitting thread is being sent signals while io-wq creates its
// first worker. Each round runs in a fresh thread (a fresh io-wq), submits
// N buffered writes, and waits for all of them; a signal thread sends
// SIGUSR1 to the round's thread every few microseconds.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define N 64
#define SZ 65536

static const char *path;
static int nosig;
static _Atomic pid_t target;
static _Atomic int stop;
static atomic_long sigs;

static void onsig(int s) { (void)s; atomic_fetch_add(&sigs, 1); }

static void *signaller(void *a) {
	(void)a;
	while (!atomic_load(&stop)) {
		pid_t t = atomic_load(&target);
		if (t && !nosig) syscall(SYS_tgkill, getpid(), t, SIGUSR1);
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void *round_fn(void *arg) {
	long *canceled = arg;
	struct io_uring_params p;
	memset(&p, 0, sizeof p);
	int fd = syscall(SYS_io_uring_setup, N, &p);
	if (fd < 0) { perror("io_uring_setup"); exit(2); }
	size_t sqsz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cqsz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	char *sq = mmap(0, sqsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
	char *cq = mmap(0, cqsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING);
	struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof *sqes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) { perror("mmap"); exit(2); }
	int file = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (file < 0) { perror(path); exit(2); }
	char *buf = aligned_alloc(4096, SZ);
	memset(buf, 0x5a, SZ);
	unsigned *sqtail = (unsigned *)(sq + p.sq_off.tail), *sqarr = (unsigned *)(sq + p.sq_off.array);
	unsigned mask = *(unsigned *)(sq + p.sq_off.ring_mask);
	unsigned tail = *sqtail;
	for (int i = 0; i < N; i++) {
		struct io_uring_sqe *e = &sqes[tail & mask];
		memset(e, 0, sizeof *e);
		e->opcode = IORING_OP_WRITE;
		e->fd = file;
		e->addr = (unsigned long)buf;
		e->len = SZ;
		e->off = (unsigned long long)i * SZ;
		e->user_data = i;
		sqarr[tail & mask] = tail & mask;
		tail++;
	}
	atomic_store_explicit((_Atomic unsigned *)sqtail, tail, memory_order_release);
	atomic_store(&target, (pid_t)syscall(SYS_gettid));
	int done = 0, submitted = 0;
	unsigned *cqhead = (unsigned *)(cq + p.cq_off.head), *cqtail = (unsigned *)(cq + p.cq_off.tail);
	unsigned cmask = *(unsigned *)(cq + p.cq_off.ring_mask);
	struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	while (done < N) {
		int r = syscall(SYS_io_uring_enter, fd, N - submitted, 1, IORING_ENTER_GETEVENTS, NULL, 0);
		if (r < 0 && errno != EINTR) { perror("io_uring_enter"); exit(2); }
		if (r > 0) submitted += r;
		unsigned h = *cqhead, t = atomic_load_explicit((_Atomic unsigned *)cqtail, memory_order_acquire);
		for (; h != t; h++) {
			struct io_uring_cqe *c = &cqes[h & cmask];
			if (c->res == -ECANCELED) (*canceled)++;
			else if (c->res != SZ) { fprintf(stderr, "write %llu: res %d\n", (unsigned long long)c->user_data, c->res); exit(2); }
			done++;
		}
		atomic_store_explicit((_Atomic unsigned *)cqhead, h, memory_order_release);
	}
	atomic_store(&target, 0);
	close(file);
	close(fd);
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 3) { fprintf(stderr, "usage: %s FILE ROUNDS [nosig]\n", argv[0]); return 2; }
	path = argv[1];
	int rounds = atoi(argv[2]);
	nosig = argc > 3;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = onsig;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	pthread_t st;
	pthread_create(&st, NULL, signaller, NULL);
	int bad = 0;
	long total = 0;
	for (int r = 0; r < rounds; r++) {
		long canceled = 0;
		pthread_t t;
		pthread_create(&t, NULL, round_fn, &canceled);
		pthread_join(t, NULL);
		if (canceled) { bad++; total += canceled; printf("round %d: %ld of %d writes -ECANCELED\n", r, canceled, N); }
	}
	atomic_store(&stop, 1);
	pthread_join(st, NULL);
	printf("%d of %d rounds had canceled writes (%ld writes), %ld signals\n", bad, rounds, total, (long)atomic_load(&sigs));
	return bad ? 1 : 0;
}
