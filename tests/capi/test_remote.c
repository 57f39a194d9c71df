// The remote target (HCOMM_TARGET_REMOTE, UCX) from C, across two
// processes: tests/capi/run.sh runs it under UCX_TLS=tcp and, with
// HCOMM_REMOTE_SHM, UCX_TLS=shm,tcp.
//
//   ./test_remote tcp|shm        the initiator: starts its peers (fork+exec
//                                of itself: the child execs before it
//                                could use hcomm, per hcomm.h's fork rule)
//                                and runs the checks
//   ./test_remote peer tcp|shm   a peer: listens on 127.0.0.1, exports a
//                                1 MiB block filled with a pattern, prints
//                                "ADDR ip:port OFF offset", then serves
//                                "check OFF LEN SEED" lines from stdin
//                                (are those bytes of its block fill(SEED)?)
//                                until stdin closes.
//
// Checked: host -> remote -> host byte for byte (random sizes and
// offsets), each put's bytes seen in the peer's own memory, the peer's
// pattern read with a get, batches with callbacks, notified puts (each
// notification taken once, in order, after its bytes; hcomm_wait_notification's
// timeouts), every refusal with its
// code (an out-of-bounds remote offset is HCOMM_EFAULT before anything is
// posted, an unknown peer HCOMM_ENXIO, a bad address HCOMM_EINVAL, nothing
// listening HCOMM_ECONNREFUSED), and kill -9 of the peer: transfers to it
// fail with HCOMM_ECONNRESET, the handle stays usable and connects to a new
// peer (over tcp and over shared memory).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "hcomm.h"
#include "check.h"


enum { BLOCK = 1 << 20, PATTERN_SEED = 99 };

static void fill(unsigned char *p, size_t n, unsigned seed) {
	for (size_t i = 0; i < n; i++) {
		p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
	}
}

// The byte fill(p, n, seed) puts at index i.
static unsigned char filled(size_t i, unsigned seed) { return (unsigned char)(seed * 131 + i * 7 + (i >> 8)); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static hcomm_config_t remote_cfg(int shm, const char *listen) {
	hcomm_config_t c = {.mem_pool_size = 16 << 20, .queue_depth = 64, .align_size = 64,
	                    .target = HCOMM_TARGET_REMOTE, .target_path = listen};
	c.flags = shm ? HCOMM_REMOTE_SHM : 0;
	return c;
}

// ---- the peer ---------------------------------------------------------------

// A notification's message: which put it follows, where, and its seed.
struct note_msg {
	uint32_t i, seed;
	uint64_t off, len;
};

// take_notes checks that no notification is pending (HCOMM_ETIMEDOUT at
// once) and answers "ready" — the initiator sends only after that, so a
// notification here before it would be a stray one — then waits for
// count notifications (60 s each) and answers "ok" when each came once, in
// order (seq and i counting up from the first), with the bytes of its put
// already in blk when it was taken, and none after the last (10 ms);
// otherwise "bad" and what was wrong.
static void take_notes(hcomm_handle_t h, const unsigned char *blk, uint64_t off, unsigned count) {
	char err[256] = "";
	hcomm_notification_t n;
	int rc = hcomm_wait_notification(h, &n, 0);
	if (rc != HCOMM_ETIMEDOUT) {
		printf("bad wait(0) with none pending: %d\n", rc);
		fflush(stdout);
		return;
	}
	printf("ready\n");
	fflush(stdout);
	uint64_t seq0 = 0;
	for (unsigned k = 0; k < count && !err[0]; k++) {
		memset(&n, 0xee, sizeof n);
		rc = hcomm_wait_notification(h, &n, 60000);
		struct note_msg m;
		if (rc != HCOMM_OK) {
			snprintf(err, sizeof err, "notification %u: %s (%s)", k, hcomm_strerror(rc), hcomm_last_error());
			break;
		}
		if (k == 0) {
			seq0 = n.seq;
		}
		if (n.size != sizeof m || n.seq != seq0 + k) {
			snprintf(err, sizeof err, "notification %u: size %u seq %llu (first %llu)", k, n.size,
			         (unsigned long long)n.seq, (unsigned long long)seq0);
			break;
		}
		memcpy(&m, n.msg, sizeof m);
		if (m.i != (uint32_t)k || m.off < off || m.off - off + m.len > BLOCK) {
			snprintf(err, sizeof err, "notification %u: for put %u at %llu+%llu", k, m.i, (unsigned long long)m.off,
			         (unsigned long long)m.len);
			break;
		}
		for (size_t j = 0; j < m.len; j++) {
			if (blk[m.off - off + j] != filled(j, m.seed)) {
				snprintf(err, sizeof err, "notification %u taken before its bytes: byte %zu is %#x, want %#x", k, j,
				         blk[m.off - off + j], filled(j, m.seed));
				break;
			}
		}
	}
	if (!err[0] && (rc = hcomm_wait_notification(h, &n, 10)) != HCOMM_ETIMEDOUT) {
		snprintf(err, sizeof err, "wait(10 ms) after the last: %d", rc);
	}
	if (err[0]) {
		printf("bad %s\n", err);
	} else {
		printf("ok\n");
	}
	fflush(stdout);
}

static int serve(int shm) {
	alarm(300); // a hang becomes a failure
	hcomm_handle_t h;
	hcomm_config_t c = remote_cfg(shm, "127.0.0.1:0");
	int rc = hcomm_init(&h, &c);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "peer: hcomm_init: %s: %s\n", hcomm_strerror(rc), hcomm_last_error());
		return 1;
	}
	unsigned char *blk = hcomm_alloc_host_mem(h, BLOCK);
	char addr[64];
	uint64_t off = 0;
	if (blk == NULL || hcomm_listen_addr(h, addr, sizeof addr) != HCOMM_OK ||
	    hcomm_remote_offset(h, blk, &off) != HCOMM_OK) {
		fprintf(stderr, "peer: set-up: %s\n", hcomm_last_error());
		return 1;
	}
	fill(blk, BLOCK, PATTERN_SEED);
	printf("ADDR %s OFF %llu\n", addr, (unsigned long long)off);
	fflush(stdout);
	char line[256];
	while (fgets(line, sizeof line, stdin) != NULL) {
		unsigned long long o, n;
		unsigned seed;
		unsigned count;
		if (sscanf(line, "notes %u", &count) == 1) {
			take_notes(h, blk, off, count);
			continue;
		}
		if (sscanf(line, "check %llu %llu %u", &o, &n, &seed) != 3 || o < off || o - off + n > BLOCK) {
			printf("bad command %s", line);
			fflush(stdout);
			continue;
		}
		size_t base = o - off, bad = SIZE_MAX;
		for (size_t i = 0; i < n; i++) {
			if (blk[base + i] != filled(i, seed)) {
				bad = i;
				break;
			}
		}
		if (bad == SIZE_MAX) {
			printf("ok\n");
		} else {
			printf("bad byte %zu: %#x, want %#x\n", bad, blk[base + bad], filled(bad, seed));
		}
		fflush(stdout);
	}
	rc = hcomm_finalize(h);
	return rc == HCOMM_OK ? 0 : 1;
}

// ---- the initiator -------------------------------------------------------

struct peer {
	pid_t pid;
	FILE *in, *out; // its stdin (we write), its stdout (we read)
	char addr[64];
	uint64_t off; // its block's offset in its window
};

static int start_peer(struct peer *p, const char *mode) {
	// This program's path, read before fork (under valgrind /proc/self/exe
	// is valgrind's own binary; its readlink names this one).
	char self[4096];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
	if (sl <= 0) {
		perror("readlink /proc/self/exe");
		return -1;
	}
	self[sl] = 0;
	int to[2], from[2];
	if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
		perror("pipe");
		return -1;
	}
	p->pid = fork();
	if (p->pid < 0) {
		perror("fork");
		return -1;
	}
	if (p->pid == 0) {
		// The child of a process that loaded libhcomm: exec at once (no
		// hcomm call here: it would return HCOMM_EFORK).
		dup2(to[0], 0);
		dup2(from[1], 1);
		execl(self, "test_remote", "peer", mode, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	p->in = fdopen(to[1], "w");
	p->out = fdopen(from[0], "r");
	char line[256];
	unsigned long long off;
	if (fgets(line, sizeof line, p->out) == NULL || sscanf(line, "ADDR %63s OFF %llu", p->addr, &off) != 2) {
		fprintf(stderr, "peer did not start (said %s)\n", line);
		return -1;
	}
	p->off = off;
	return 0;
}

// stop_peer closes its stdin and waits for it; killed: kill -9 first.
static int stop_peer(struct peer *p, int killed) {
	if (killed) {
		kill(p->pid, SIGKILL);
	}
	fclose(p->in);
	fclose(p->out);
	int st = 0;
	waitpid(p->pid, &st, 0);
	return killed ? (WIFSIGNALED(st) ? 0 : -1) : (WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1);
}

// peer_has asks the peer whether window bytes [o, o+n) are fill(seed).
static int peer_has(struct peer *p, uint64_t o, size_t n, unsigned seed, char *answer, size_t len) {
	fprintf(p->in, "check %llu %zu %u\n", (unsigned long long)o, n, seed);
	fflush(p->in);
	if (fgets(answer, (int)len, p->out) == NULL) {
		snprintf(answer, len, "(no answer)");
		return 0;
	}
	return strcmp(answer, "ok\n") == 0;
}

struct counter {
	_Atomic int calls;
	_Atomic int bad;
};

static void count_cb(uint64_t id, int status, void *user_data) {
	struct counter *c = user_data;
	if (status != HCOMM_OK || id == 0) {
		atomic_fetch_add(&c->bad, 1);
	}
	atomic_fetch_add(&c->calls, 1);
}

static int xfer(hcomm_handle_t h, void *src, void *dst, size_t n) {
	hcomm_transfer_t t = {.src_ptr = src, .dst_ptr = dst, .size = n};
	int rc = hcomm_submit_transfer(h, &t);
	if (rc != HCOMM_OK) {
		return rc;
	}
	return hcomm_wait_completion_timeout(h, t.id, 60000);
}

static void round_trips(hcomm_handle_t h, uint32_t peer, struct peer *p) {
	unsigned char *src = hcomm_alloc_host_mem(h, BLOCK), *dst = hcomm_alloc_host_mem(h, BLOCK);
	CHECK(src != NULL && dst != NULL, "alloc: errno %d", errno);
	char answer[256];

	// The peer's pattern, read with a get.
	CHECK_RC(xfer(h, hcomm_remote_addr(peer, p->off), dst, 8192), HCOMM_OK);
	for (size_t i = 0; i < 8192; i++) {
		CHECK(dst[i] == filled(i, PATTERN_SEED), "peer's byte %zu: %#x, want %#x", i, dst[i], filled(i, PATTERN_SEED));
	}

	// Random sizes and offsets: put, the peer sees the bytes, get back.
	for (unsigned r = 1; r <= 24; r++) {
		size_t n = 1 + next_rand() % (r % 3 == 0 ? 64 : BLOCK);
		size_t o = next_rand() % (BLOCK - n + 1);
		size_t so = next_rand() % (BLOCK - n + 1), doff = next_rand() % (BLOCK - n + 1);
		fill(src + so, n, r);
		memset(dst + doff, 0, n);
		CHECK_RC(xfer(h, src + so, hcomm_remote_addr(peer, p->off + o), n), HCOMM_OK);
		CHECK(peer_has(p, p->off + o, n, r, answer, sizeof answer), "round %u (%zu B at %zu): peer says %s", r, n, o, answer);
		CHECK_RC(xfer(h, hcomm_remote_addr(peer, p->off + o), dst + doff, n), HCOMM_OK);
		CHECK(memcmp(dst + doff, src + so, n) == 0, "round %u: %zu B at %zu came back different", r, n, o);
	}

	// A batch of 32 puts with callbacks, then 32 gets.
	enum { NB = 32, SZ = 4096 };
	hcomm_transfer_t ts[NB];
	struct counter cnt = {0};
	fill(src, NB * SZ, 7);
	for (int i = 0; i < NB; i++) {
		ts[i] = (hcomm_transfer_t){.src_ptr = src + i * SZ, .dst_ptr = hcomm_remote_addr(peer, p->off + (NB - 1 - i) * SZ),
		                           .size = SZ, .callback = count_cb, .user_data = &cnt};
	}
	CHECK_RC(hcomm_submit_batch(h, ts, NB), HCOMM_OK);
	for (int i = 0; i < NB; i++) {
		CHECK_RC(hcomm_wait_completion_timeout(h, ts[i].id, 60000), HCOMM_OK);
	}
	for (int i = 0; i < 2000 && atomic_load(&cnt.calls) < NB; i++) {
		usleep(1000); // callbacks run after the ID's result is published
	}
	CHECK(atomic_load(&cnt.calls) == NB && atomic_load(&cnt.bad) == 0, "puts: %d callbacks, %d bad", atomic_load(&cnt.calls), atomic_load(&cnt.bad));
	memset(dst, 0, NB * SZ);
	for (int i = 0; i < NB; i++) {
		ts[i] = (hcomm_transfer_t){.src_ptr = hcomm_remote_addr(peer, p->off + i * SZ), .dst_ptr = dst + i * SZ, .size = SZ};
	}
	CHECK_RC(hcomm_submit_batch(h, ts, NB), HCOMM_OK);
	for (int i = 0; i < NB; i++) {
		CHECK_RC(hcomm_wait_completion_timeout(h, ts[i].id, 60000), HCOMM_OK);
		CHECK(memcmp(dst + i * SZ, src + (NB - 1 - i) * SZ, SZ) == 0, "batch block %d differs", i);
	}
	hcomm_free_host_mem(h, src);
	hcomm_free_host_mem(h, dst);
}

static void refusals(hcomm_handle_t h, uint32_t peer, struct peer *p) {
	unsigned char *src = hcomm_alloc_host_mem(h, 4096);
	CHECK(src != NULL, "alloc");
	hcomm_transfer_t t = {.src_ptr = src, .size = 64};
	// Out of the peer's window: refused before posting, with the detail.
	t.dst_ptr = hcomm_remote_addr(peer, 1ull << 40);
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EFAULT);
	CHECK(t.id == 0, "id %llu for a refused transfer", (unsigned long long)t.id);
	CHECK(strstr(hcomm_last_error(), "window") != NULL, "last error: %s", hcomm_last_error());
	t.dst_ptr = hcomm_remote_addr(peer, HCOMM_REMOTE_MAX_OFFSET); // all ones
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EFAULT);
	t.dst_ptr = hcomm_remote_addr(HCOMM_REMOTE_MAX_PEER + 1, 0);
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EFAULT);
	// A get from out of bounds.
	t.src_ptr = hcomm_remote_addr(peer, (1ull << 40) - 1);
	t.dst_ptr = src;
	t.size = 2;
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EFAULT);
	// A peer this handle never had.
	t = (hcomm_transfer_t){.src_ptr = src, .dst_ptr = hcomm_remote_addr(peer + 9, p->off), .size = 64};
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_ENXIO);
	// Host to host, remote to remote: not this target's.
	t.dst_ptr = src + 1024;
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EOPNOTSUPP);
	t.src_ptr = hcomm_remote_addr(peer, p->off);
	t.dst_ptr = hcomm_remote_addr(peer, p->off + 4096);
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EOPNOTSUPP);
	// A batch with one bad remote range is refused whole.
	struct counter cnt = {0};
	hcomm_transfer_t ts[3] = {
	    {.src_ptr = src, .dst_ptr = hcomm_remote_addr(peer, p->off), .size = 64, .callback = count_cb, .user_data = &cnt},
	    {.src_ptr = src, .dst_ptr = hcomm_remote_addr(peer, 1ull << 40), .size = 64, .callback = count_cb, .user_data = &cnt},
	    {.src_ptr = src, .dst_ptr = hcomm_remote_addr(peer, p->off + 64), .size = 64, .callback = count_cb, .user_data = &cnt},
	};
	CHECK_RC(hcomm_submit_batch(h, ts, 3), HCOMM_EFAULT);
	CHECK(ts[0].id == 0 && ts[1].id == 0 && ts[2].id == 0, "ids of a refused batch");
	usleep(20000);
	CHECK(atomic_load(&cnt.calls) == 0, "%d callbacks for a refused batch", atomic_load(&cnt.calls));
	// Device memory: none on this target.
	errno = 0;
	CHECK(hcomm_alloc_dev_mem(h, 4096) == NULL && errno == EOPNOTSUPP, "alloc_dev_mem: errno %d", errno);
	// Addresses.
	uint32_t id = 77;
	CHECK_RC(hcomm_connect(h, "nonsense", &id), HCOMM_EINVAL);
	CHECK_RC(hcomm_connect(h, "localhost:1", &id), HCOMM_EINVAL);
	CHECK_RC(hcomm_connect(h, NULL, &id), HCOMM_EINVAL);
	CHECK(id == 77, "peer written by a failed connect: %u", id);
	// A port nobody listens on.
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(s, (struct sockaddr *)&sa, &sl) == 0, "socket");
	close(s);
	char free_addr[64];
	snprintf(free_addr, sizeof free_addr, "127.0.0.1:%d", ntohs(sa.sin_port));
	CHECK_RC(hcomm_connect_timeout(h, free_addr, 30000, &id), HCOMM_ECONNREFUSED);
	CHECK_RC(hcomm_disconnect(h, peer + 9), HCOMM_ENXIO);
	hcomm_free_host_mem(h, src);
}

// notify: puts each followed by a notification in one batch (random sizes,
// each into its own 4 KiB slot of the peer's block); the peer takes them
// (take_notes) while they come and checks each one's bytes. Then what a
// notification may not be.
static void notify(hcomm_handle_t h, uint32_t peer, struct peer *p) {
	enum { SLOT = 4096, N = BLOCK / SLOT };
	unsigned char *src = hcomm_alloc_host_mem(h, BLOCK);
	struct note_msg *msgs = hcomm_alloc_host_mem(h, N * sizeof *msgs);
	CHECK(src != NULL && msgs != NULL, "alloc: errno %d", errno);
	fprintf(p->in, "notes %d\n", N);
	fflush(p->in);
	char answer[256];
	// The peer first checks that nothing is pending: nothing is sent
	// before it says so.
	if (fgets(answer, sizeof answer, p->out) == NULL || strcmp(answer, "ready\n") != 0) {
		CHECK(0, "peer before the notifications: %s", answer);
		hcomm_free_host_mem(h, src);
		hcomm_free_host_mem(h, msgs);
		return;
	}
	struct counter cnt = {0};
	hcomm_transfer_t ts[2 * N];
	for (int i = 0; i < N; i++) {
		size_t n = 1 + next_rand() % SLOT;
		fill(src + i * SLOT, n, 1000 + i);
		msgs[i] = (struct note_msg){.i = (uint32_t)i, .seed = 1000 + i, .off = p->off + i * SLOT, .len = n};
		ts[2 * i] = (hcomm_transfer_t){.src_ptr = src + i * SLOT, .dst_ptr = hcomm_remote_addr(peer, msgs[i].off), .size = n};
		ts[2 * i + 1] = (hcomm_transfer_t){.src_ptr = &msgs[i], .dst_ptr = hcomm_notify_addr(peer), .size = sizeof msgs[i],
		                                   .callback = count_cb, .user_data = &cnt};
	}
	// In batches of 8 puts and their notifications (the queue holds 64),
	// each waited for before the next.
	for (int i = 0; i < 2 * N; i += 16) {
		CHECK_RC(hcomm_submit_batch(h, ts + i, 16), HCOMM_OK);
		for (int k = i; k < i + 16; k++) {
			CHECK_RC(hcomm_wait_completion_timeout(h, ts[k].id, 60000), HCOMM_OK);
		}
	}
	CHECK(fgets(answer, sizeof answer, p->out) != NULL && strcmp(answer, "ok\n") == 0, "peer took notifications: %s", answer);
	for (int i = 0; i < 2000 && atomic_load(&cnt.calls) < N; i++) {
		usleep(1000); // callbacks run after the ID's result is published
	}
	CHECK(atomic_load(&cnt.calls) == N && atomic_load(&cnt.bad) == 0, "notifications: %d callbacks, %d bad",
	      atomic_load(&cnt.calls), atomic_load(&cnt.bad));

	// Refused before anything is posted.
	hcomm_transfer_t t = {.src_ptr = src, .dst_ptr = hcomm_notify_addr(peer), .size = HCOMM_NOTIFY_MAX + 1};
	int rc = hcomm_submit_transfer(h, &t);
	CHECK(rc == HCOMM_EINVAL, "notification of %d bytes: %d (%s)", HCOMM_NOTIFY_MAX + 1, rc, hcomm_strerror(rc));
	t.size = 8;
	t.dst_ptr = (char *)hcomm_notify_addr(peer) + 8; // not a notification address
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EFAULT);
	t.dst_ptr = hcomm_notify_addr(peer + 9);
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_ENXIO);
	t.dst_ptr = hcomm_notify_addr(HCOMM_REMOTE_MAX_PEER + 1);
	CHECK_RC(hcomm_submit_transfer(h, &t), HCOMM_EFAULT);
	t = (hcomm_transfer_t){.src_ptr = hcomm_notify_addr(peer), .dst_ptr = src, .size = 8}; // a "get" of one
	rc = hcomm_submit_transfer(h, &t);
	CHECK(rc != HCOMM_OK, "a get from a notification address was submitted");
	CHECK_RC(hcomm_wait_notification(h, NULL, 0), HCOMM_EINVAL);
	hcomm_notification_t n;
	CHECK_RC(hcomm_wait_notification(h, &n, 0), HCOMM_ETIMEDOUT);
	CHECK_RC(hcomm_wait_notification(0, &n, 0), HCOMM_EBADF);
	// A handle that is not remote has none.
	hcomm_handle_t m;
	hcomm_config_t mc = {.mem_pool_size = 1 << 20, .target = HCOMM_TARGET_MEMORY};
	CHECK_RC(hcomm_init(&m, &mc), HCOMM_OK);
	CHECK_RC(hcomm_wait_notification(m, &n, 0), HCOMM_EOPNOTSUPP);
	CHECK_RC(hcomm_finalize(m), HCOMM_OK);
	hcomm_free_host_mem(h, src);
	hcomm_free_host_mem(h, msgs);
}

// kill_peer: kill -9 of the peer; a transfer to it then fails with
// HCOMM_ECONNRESET (refused at submit or completed with it, depending on
// when UCX noticed), never hangs; a new peer connects and works.
static void kill_peer(hcomm_handle_t h, uint32_t peer, struct peer *p, const char *mode) {
	unsigned char *src = hcomm_alloc_host_mem(h, 4096);
	CHECK(src != NULL, "alloc");
	CHECK(stop_peer(p, 1) == 0, "peer did not die of SIGKILL");
	// Until UCX notices, puts may still "complete" (tcp buffers them;
	// over shared memory a put is a copy into the dead peer's segment,
	// still mapped here); the one in flight when it does fails with
	// HCOMM_ECONNRESET (or, if
	// UCX reports a plain transport error, HCOMM_EIO); from then on the
	// peer is gone and submits are refused with HCOMM_ECONNRESET.
	int rc = HCOMM_OK;
	for (int i = 0; i < 600 && rc == HCOMM_OK; i++) {
		rc = xfer(h, src, hcomm_remote_addr(peer, p->off), 4096);
		if (rc == HCOMM_OK) {
			usleep(50000);
		}
	}
	CHECK(rc == HCOMM_ECONNRESET || rc == HCOMM_EIO, "transfer to a killed peer: %d (%s)", rc, hcomm_strerror(rc));
	hcomm_transfer_t t = {.src_ptr = src, .dst_ptr = hcomm_remote_addr(peer, p->off), .size = 64};
	for (int i = 0; i < 600 && (rc = hcomm_submit_transfer(h, &t)) == HCOMM_OK; i++) {
		hcomm_wait_completion_timeout(h, t.id, 60000);
		usleep(50000);
	}
	CHECK_RC(rc, HCOMM_ECONNRESET);
	struct peer p2;
	CHECK(start_peer(&p2, mode) == 0, "second peer");
	uint32_t peer2;
	CHECK_RC(hcomm_connect_timeout(h, p2.addr, 30000, &peer2), HCOMM_OK);
	CHECK(peer2 != peer, "peer ID reused: %u", peer2);
	fill(src, 4096, 5);
	CHECK_RC(xfer(h, src, hcomm_remote_addr(peer2, p2.off + 4096), 4096), HCOMM_OK);
	char answer[256];
	CHECK(peer_has(&p2, p2.off + 4096, 4096, 5, answer, sizeof answer), "new peer says %s", answer);
	CHECK(stop_peer(&p2, 0) == 0, "second peer failed");
	hcomm_free_host_mem(h, src);
}

static int initiate(const char *mode) {
	int shm = strcmp(mode, "shm") == 0;
	alarm(600);
	// UCX reads UCX_TLS at hcomm_init; the peers inherit it.
	setenv("UCX_TLS", shm ? "shm,tcp" : "tcp", 1);
	struct peer p;
	if (start_peer(&p, mode) != 0) {
		return 1;
	}
	hcomm_handle_t h;
	hcomm_config_t c = remote_cfg(shm, NULL); // no listener: it only initiates
	int rc = hcomm_init(&h, &c);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "hcomm_init: %s: %s\n", hcomm_strerror(rc), hcomm_last_error());
		return 1;
	}
	char addr[64] = "x";
	if (hcomm_listen_addr(h, addr, sizeof addr) != HCOMM_OK || addr[0] != 0) {
		fprintf(stderr, "listen address without a listener: %s\n", addr);
		failures++;
	}
	uint32_t peer = 12345;
	rc = hcomm_connect_timeout(h, p.addr, 30000, &peer);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "hcomm_connect(%s): %s: %s\n", p.addr, hcomm_strerror(rc), hcomm_last_error());
		return 1;
	}
	struct {
		const char *name;
		void (*fn)(hcomm_handle_t, uint32_t, struct peer *);
	} tests[] = {{"round_trips", round_trips}, {"notify", notify}, {"refusals", refusals}};
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		int before = failures;
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		tests[i].fn(h, peer, &p);
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("%s %s/%s (%.0f ms)\n", failures == before ? "ok  " : "FAIL", tests[i].name, mode,
		       (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
	}
	int before = failures;
	kill_peer(h, peer, &p, mode);
	printf("%s kill_peer/%s\n", failures == before ? "ok  " : "FAIL", mode);
	rc = hcomm_finalize(h);
	if (rc != HCOMM_OK) {
		fprintf(stderr, "hcomm_finalize: %s\n", hcomm_strerror(rc));
		failures++;
	}
	if (failures) {
		printf("FAIL: %d failed checks\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}

int main(int argc, char **argv) {
	if (argc == 3 && strcmp(argv[1], "peer") == 0) {
		return serve(strcmp(argv[2], "shm") == 0);
	}
	if (argc == 2 && (strcmp(argv[1], "tcp") == 0 || strcmp(argv[1], "shm") == 0)) {
		return initiate(argv[1]);
	}
	fprintf(stderr, "usage: test_remote tcp|shm\n");
	return 2;
}
