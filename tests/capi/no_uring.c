// no_uring: runs a program with io_uring_setup(2) failing with ENOSYS (a
// seccomp filter), so that hcomm's engine sleeps in poll(2) instead of
// io_uring_enter(2).
//
//   no_uring valgrind ... ./seed_example
//
// Why: valgrind 3.19 (Debian 12) runs io_uring_enter as a non-blocking
// system call, holding its global lock while the engine's reaper thread
// waits in the kernel for a completion, so every other thread (the device,
// the submitter) stops and the program deadlocks under valgrind. The engine
// detects a missing io_uring and falls back to poll(2), which valgrind
// knows blocks. See docs/capi.md.
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: no_uring PROGRAM [ARG...]\n");
		return 2;
	}
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fprog = {.len = sizeof prog / sizeof prog[0], .filter = prog};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
		fprintf(stderr, "no_uring: seccomp: %s\n", strerror(errno));
		return 2;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_uring: exec %s: %s\n", argv[1], strerror(errno));
	return 127;
}
