// Reproducer: a guest soft lockup under QEMU's multi-threaded TCG when the
// kernel live-patches a jump label in the system-call entry path while
// another vCPU runs through it.
//
// Attaching a program to the raw_syscalls tracepoints (or enabling the
// tracefs event) flips the tracepoint's static key: the kernel rewrites
// the jump in trace_sys_enter/trace_sys_exit (inlined into
// syscall_trace_enter/syscall_exit_work) with text_poke_bp (int3 on the
// first byte, the rest, then the first byte). One thread attaches and
// detaches in a loop; the others make system calls in a loop, so they keep
// entering the patched code (the tracepoint also sets
// SYSCALL_WORK_SYSCALL_TRACEPOINT on every task, which sends each system
// call through syscall_trace_enter).
//
//   jumplabel-tcg [bpf|tracefs] [seconds] [syscall-threads]
//
// bpf (default): BPF_PROG_LOAD of a two-instruction raw-tracepoint program
// and BPF_RAW_TRACEPOINT_OPEN on sys_enter and sys_exit, then close — what
// an eBPF tracer does when it starts and stops. tracefs: write 1 and 0 to
// events/raw_syscalls/enable. Prints a line a second and "done" at the end;
// a locked-up guest prints nothing more (and panics with softlockup_panic).
// Raw system calls, no libbpf, no hcomm.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Atomic int stop;
static atomic_long calls;
static atomic_long toggles;

static void *syscaller(void *a) {
	(void)a;
	int word = 0;
	long n = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		syscall(SYS_getppid);
		syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		n += 2;
		if ((n & 1023) == 0) atomic_fetch_add(&calls, 1024);
	}
	return NULL;
}

static int sys_bpf(int cmd, union bpf_attr *attr) {
	return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

static int load_prog(void) {
	struct bpf_insn insns[] = {
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 0}, // r0 = 0
		{.code = BPF_JMP | BPF_EXIT},
	};
	static char log[4096];
	union bpf_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.prog_type = BPF_PROG_TYPE_RAW_TRACEPOINT;
	attr.insns = (uintptr_t)insns;
	attr.insn_cnt = 2;
	attr.license = (uintptr_t) "GPL";
	attr.log_buf = (uintptr_t)log;
	attr.log_size = sizeof log;
	attr.log_level = 1;
	int fd = sys_bpf(BPF_PROG_LOAD, &attr);
	if (fd < 0) {
		fprintf(stderr, "BPF_PROG_LOAD: %s\n%s\n", strerror(errno), log);
		exit(2);
	}
	return fd;
}

static int attach(int prog, const char *tp) {
	union bpf_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.raw_tracepoint.name = (uintptr_t)tp;
	attr.raw_tracepoint.prog_fd = prog;
	int fd = sys_bpf(BPF_RAW_TRACEPOINT_OPEN, &attr);
	if (fd < 0) {
		fprintf(stderr, "BPF_RAW_TRACEPOINT_OPEN %s: %s\n", tp, strerror(errno));
		exit(2);
	}
	return fd;
}

static void write_enable(const char *path, const char *v) {
	int fd = open(path, O_WRONLY);
	if (fd < 0 || write(fd, v, 1) != 1) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		exit(2);
	}
	close(fd);
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "bpf";
	int secs = argc > 2 ? atoi(argv[2]) : 60;
	int nthr = argc > 3 ? atoi(argv[3]) : 2;
	int bpf = strcmp(mode, "bpf") == 0;
	if (!bpf && strcmp(mode, "tracefs") != 0) {
		fprintf(stderr, "usage: %s [bpf|tracefs] [seconds] [syscall-threads]\n", argv[0]);
		return 2;
	}
	const char *en = "/sys/kernel/tracing/events/raw_syscalls/enable";
	int prog = bpf ? load_prog() : -1;
	pthread_t t[64];
	if (nthr < 1 || nthr > 64) nthr = 2;
	for (int i = 0; i < nthr; i++) pthread_create(&t[i], NULL, syscaller, NULL);
	double start = now(), last = start;
	printf("jumplabel-tcg: %s, %d s, %d system-call threads\n", mode, secs, nthr);
	fflush(stdout);
	while (now() - start < secs) {
		if (bpf) {
			int a = attach(prog, "sys_enter"), b = attach(prog, "sys_exit");
			close(a);
			close(b);
		} else {
			write_enable(en, "1");
			write_enable(en, "0");
		}
		atomic_fetch_add(&toggles, 1);
		if (now() - last >= 1) {
			last = now();
			printf("%5.1f s: %ld attach/detach, %ld system calls\n", last - start,
			       atomic_load(&toggles), atomic_load(&calls));
			fflush(stdout);
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < nthr; i++) pthread_join(t[i], NULL);
	printf("done: %ld attach/detach, %ld system calls in %.1f s\n", atomic_load(&toggles),
	       atomic_load(&calls), now() - start);
	return 0;
}
