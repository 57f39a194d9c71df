//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// hcomm's eBPF programs: per-process counters of system calls, user<->kernel
// copies, io_uring requests, page faults and engine batches.
//
// Every program first asks traced(): is the current task the process (tgid)
// or inside the cgroup v2 subtree hcomm-trace watches? Everything else returns
// at once, so other processes are never counted. Counters live in per-CPU
// arrays and are updated with atomic adds: syscall tracepoints run preemptible
// (with migration disabled) on recent kernels, so two tasks can interleave on
// one CPU and a plain read-modify-write could lose an update.
//
// Only tracepoints (tp_btf), raw BTF-typed arguments and uprobes are used:
// no kprobes, no fentry/fexit. Kernel structures are read with CO-RE against
// the committed vmlinux.h (x86-64's; CO-RE relocates every field access to
// the running kernel's layout at load time). What differs per architecture
// (system call numbers and argument registers, O_DIRECT, Go's register ABI)
// is in the __TARGET_ARCH_ block below: bpf2go builds one object for
// x86-64 and one for arm64.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

// ---- per architecture ----
//
// SYS_ARG(regs, n): argument n of the system call whose sys_enter regs is
// (the kernel's struct pt_regs). GO_ARG(ctx, n): integer argument n of a Go
// function at a uprobe on its entry (Go's register ABI). NR_*: system call
// numbers.
#if defined(__TARGET_ARCH_x86)

#define SYS_ARG0(regs) BPF_CORE_READ(regs, di)
#define SYS_ARG1(regs) BPF_CORE_READ(regs, si)
#define SYS_ARG2(regs) BPF_CORE_READ(regs, dx)
#define SYS_ARG3(regs) BPF_CORE_READ(regs, r10)
// Go's register ABI on amd64: integer arguments in RAX, RBX, RCX, RDI,
// RSI, R8, R9, R10, R11, one per argument.
#define GO_ARG0(ctx) ((ctx)->ax)
#define GO_ARG1(ctx) ((ctx)->bx)
#define GO_ARG2(ctx) ((ctx)->cx)
#define O_DIRECT_FLAG 040000

#define NR_READ 0
#define NR_WRITE 1
#define NR_PREAD64 17
#define NR_PWRITE64 18
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDFILE 40
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_EXECVE 59
#define NR_EXIT 60
#define NR_EXIT_GROUP 231
#define NR_SPLICE 275
#define NR_PREADV 295
#define NR_PWRITEV 296
#define NR_RECVMMSG 299
#define NR_SENDMMSG 307
#define NR_EXECVEAT 322
#define NR_COPY_FILE_RANGE 326
#define NR_PREADV2 327
#define NR_PWRITEV2 328

#elif defined(__TARGET_ARCH_arm64)

// The kernel's struct pt_regs on arm64, the fields read here: CO-RE finds
// them inside its anonymous union (user_regs / regs[31], sp, pc, pstate).
// Argument 0 is orig_x0, as the kernel's syscall_get_arguments reads it (x0
// is the return value once the call ran).
struct pt_regs___hcomm {
	__u64 regs[31];
	__u64 orig_x0;
} __attribute__((preserve_access_index));
#define SYS_ARG0(regs) BPF_CORE_READ((struct pt_regs___hcomm *)(regs), orig_x0)
#define SYS_ARG1(regs) BPF_CORE_READ((struct pt_regs___hcomm *)(regs), regs[1])
#define SYS_ARG2(regs) BPF_CORE_READ((struct pt_regs___hcomm *)(regs), regs[2])
#define SYS_ARG3(regs) BPF_CORE_READ((struct pt_regs___hcomm *)(regs), regs[3])
// A uprobe's context on arm64 is struct user_pt_regs (the UAPI layout, not
// relocated). Go's register ABI on arm64: integer arguments in R0-R15.
struct user_pt_regs___hcomm {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
#define GO_ARG0(ctx) (((struct user_pt_regs___hcomm *)(ctx))->regs[0])
#define GO_ARG1(ctx) (((struct user_pt_regs___hcomm *)(ctx))->regs[1])
#define GO_ARG2(ctx) (((struct user_pt_regs___hcomm *)(ctx))->regs[2])
#define O_DIRECT_FLAG 0200000 // arm64's own (arch/arm64/include/uapi/asm/fcntl.h)

// The kernel's generic table (include/uapi/asm-generic/unistd.h).
#define NR_READ 63
#define NR_WRITE 64
#define NR_READV 65
#define NR_WRITEV 66
#define NR_PREAD64 67
#define NR_PWRITE64 68
#define NR_PREADV 69
#define NR_PWRITEV 70
#define NR_SENDFILE 71
#define NR_SPLICE 76
#define NR_EXIT 93
#define NR_EXIT_GROUP 94
#define NR_SENDTO 206
#define NR_RECVFROM 207
#define NR_SENDMSG 211
#define NR_RECVMSG 212
#define NR_EXECVE 221
#define NR_RECVMMSG 243
#define NR_SENDMMSG 269
#define NR_EXECVEAT 281
#define NR_COPY_FILE_RANGE 285
#define NR_PREADV2 286
#define NR_PWRITEV2 287

#else
#error "hcomm.bpf.c: build with -target amd64 or arm64 (bpf2go defines __TARGET_ARCH_x86 or __TARGET_ARCH_arm64)"
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// ---- configuration, set by the loader before the programs are loaded ----

#define FILTER_CGROUP 1 // tasks in the cgroup v2 subtree at cgroup_map[0]
#define FILTER_TGID 2   // the thread group target_tgid

const volatile __u32 filter_mode = 0;
const volatile __u32 target_tgid = 0;
// When non-zero, target_tgid is a PID in that PID namespace (dev, inode).
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;
// io_kiocb flag bit meaning "a registered (fixed) buffer is attached"
// (REQ_F_BUF_NODE); the loader reads it from the kernel's BTF because it is
// an anonymous enum that CO-RE cannot relocate. 0 = unknown.
const volatile __u64 req_f_buf_node = 0;
// Cgroup mode: count a thread group only once it, or the process that forked
// it, exec'd inside the cgroup. The command is started by a launcher that runs
// code of its own in the cgroup between clone and execve (Go's fork-to-exec
// path: signal handlers, fds); with this set, only its successful execve and
// what follows is counted, as strace counts the command.
const volatile __u32 arm_on_exec = 0;

// Which system calls the per-syscall tables (sys_stats, sys_minmax,
// task_sys) count; copies, io_uring and faults are not filtered.
#define SF_NAMES 1  // only the numbers set in syscall_set
#define SF_FAILED 2 // only calls that failed (-4095 <= ret < 0)
#define SF_ERRNO 4  // only calls that failed with filter_errno
const volatile __u32 sys_filter = 0;
const volatile __u64 syscall_set[8] = {}; // bit nr%64 of word nr/64
const volatile __s64 filter_errno = 0;

// Per-task breakdown of the syscall table (task_sys): 0 off, 1 by process
// (thread group id), 2 by thread.
#define BY_PROCESS 1
#define BY_THREAD 2
const volatile __u32 by_task = 0;

// ---- shared layout (mirrored in bpf/layout.go) ----

#define MAX_SYSCALLS 512 // syscall numbers; larger ones count at index MAX_SYSCALLS-1
#define HIST_SLOTS 40    // log2 buckets: slot i holds values in [2^(i-1), 2^i), slot 0 holds 0
#define MAX_OPS 64       // io_uring opcodes; OP_AUX collects CQEs without a request
#define OP_AUX 63
#define MAX_PATHS 8 // engine paths

// copy_stats index: (source*3 + dir)*3 + class
#define SRC_SYSCALL 0
#define SRC_URING 1
#define DIR_U2K 0 // user to kernel (write, send)
#define DIR_K2U 1 // kernel to user (read, recv)
#define DIR_K2K 2 // inside the kernel, no user buffer (copy_file_range, sendfile, splice)
#define CLASS_COPY 0
#define CLASS_DIRECT 1   // O_DIRECT on a regular file or block device: DMA, no CPU copy
#define CLASS_ZEROCOPY 2 // MSG_ZEROCOPY / SEND_ZC / RECV_ZC
#define COPY_SLOTS 18

#define EV_ENGINE_SUBMIT 1
#define EV_ENGINE_REAP 2
#define EV_EXEC 3

struct sys_stat {
	__u64 count;
	__u64 errors;
	__u64 total_ns;
	__u64 bytes;
	__u64 hist[HIST_SLOTS];
};

// Fastest and slowest call of a syscall, ns (0: none yet); the loader takes
// the minimum and maximum over CPUs.
struct sys_minmax {
	__u64 min_ns;
	__u64 max_ns;
};

// One (task, syscall) pair of the per-task breakdown.
struct task_key {
	__u32 id; // thread group id (BY_PROCESS) or thread id (BY_THREAD)
	__u32 nr;
};

struct task_stat {
	__u64 count;
	__u64 errors;
	__u64 total_ns;
	__u32 tgid;
	__u32 _pad;
	char comm[16]; // at the first call counted
};

struct copy_stat {
	__u64 ops;
	__u64 bytes;
};

struct uring_stat {
	__u64 submitted;
	__u64 completed;
	__u64 errors;
	__u64 bytes;
	__u64 fixed_reqs;
	__u64 fixed_bytes;
	__u64 direct_bytes;
	__u64 zerocopy_bytes;
	__u64 hist[HIST_SLOTS]; // submit -> complete latency, ns
};

struct fault_stat {
	__u64 total;
	__u64 write;
	__u64 instr;
};

struct engine_stat {
	__u64 submit_batches;
	__u64 submit_transfers;
	__u64 submit_bytes;
	__u64 reap_batches;
	__u64 reap_completions;
	__u64 reap_bytes;
	__u64 reap_errors;
	__u64 path_batches[MAX_PATHS];
	__u64 path_bytes[MAX_PATHS];
	__u64 batch_hist[HIST_SLOTS]; // transfers per submitted batch
};

struct misc_stat {
	__u64 events_lost;      // ring buffer full
	__u64 inflight_lost;    // syscall / io_uring in-flight table full
	__u64 uring_unmatched;  // completions of traced rings without a matching submit
	__u64 task_lost;        // per-task table full
};

struct event {
	__u32 type;
	__u32 pid;
	__u32 tgid;
	__u32 count;
	__u64 ts;
	__u64 bytes;
	__u32 aux; // path (submit) or errors (reap)
	__u32 _pad;
	char comm[16];
	char file[64];
};

struct sys_inflight {
	__u64 ts;
	__u64 vec; // sendmmsg/recvmmsg: user address of the mmsghdr array
	__u32 nr;
	__u8 dir;   // DIR_* + 1 for copying syscalls, 0 otherwise
	__u8 class; // CLASS_*
	__u8 _pad[2];
};

// Kept on a thread group's leader: the group exec'd (or was forked by a
// group that had) inside the cgroup, see arm_on_exec.
struct armed {
	__u8 yes;
};

struct uring_inflight {
	__u64 ts;
};

// Emits struct event into BTF so bpf2go generates its Go type.
const struct event *unused_event __attribute__((unused));

// ---- maps ----

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cgroup_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, struct sys_stat);
} sys_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, struct sys_minmax);
} sys_minmax SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct task_key);
	__type(value, struct task_stat);
} task_sys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COPY_SLOTS);
	__type(key, __u32);
	__type(value, struct copy_stat);
} copy_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_OPS);
	__type(key, __u32);
	__type(value, struct uring_stat);
} uring_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault_stat);
} fault_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct engine_stat);
} engine_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct misc_stat);
} misc_stats SEC(".maps");

// The syscall in flight, per thread: task-local storage (no hashing, no
// shared lock; freed with the task).
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sys_inflight);
} sys_inflight SEC(".maps");

// io_uring requests in flight, by struct io_kiocb address. LRU so that
// requests that never post a CQE (IOSQE_CQE_SKIP_SUCCESS) cannot fill it;
// per-CPU LRU lists (BPF_F_NO_COMMON_LRU) avoid a global lock on submit.
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct armed);
} armed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct uring_inflight);
} uring_inflight SEC(".maps");

// io_uring contexts (struct io_ring_ctx address) created or used by the
// traced process: completions without a request (or whose submit predates
// the trace) are attributed through them.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} uring_rings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

// ---- helpers ----

// in_set: is the current task the traced thread group, or in the cgroup?
static __always_inline bool in_set(void)
{
	if (filter_mode == FILTER_CGROUP)
		return bpf_current_task_under_cgroup(&cgroup_map, 0) == 1;
	if (filter_mode == FILTER_TGID) {
		if (pidns_ino) {
			struct bpf_pidns_info ns = {};
			if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)))
				return false;
			return ns.tgid == target_tgid;
		}
		return (bpf_get_current_pid_tgid() >> 32) == target_tgid;
	}
	return false;
}

// is_armed: has the current thread group exec'd (see arm_on_exec)? Kept
// on the group leader, so threads, io_uring workers included, share it.
static __always_inline bool is_armed(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct armed *a;

	if (!arm_on_exec)
		return true;
	a = bpf_task_storage_get(&armed, task->group_leader, 0, 0);
	return a && a->yes;
}

static __always_inline bool traced(void)
{
	return in_set() && is_armed();
}

// log2 bucket: 0 -> 0, [2^(i-1), 2^i) -> i, clamped to HIST_SLOTS-1.
static __always_inline __u32 slot(__u64 v)
{
	__u32 r = 0, s;
	if (!v)
		return 0;
	s = (v > 0xFFFFFFFFULL) << 5; v >>= s; r |= s;
	s = (v > 0xFFFF) << 4; v >>= s; r |= s;
	s = (v > 0xFF) << 3; v >>= s; r |= s;
	s = (v > 0xF) << 2; v >>= s; r |= s;
	s = (v > 0x3) << 1; v >>= s; r |= s;
	r |= (v >> 1);
	r += 1;
	if (r >= HIST_SLOTS)
		r = HIST_SLOTS - 1;
	return r;
}

#define ADD(p, v) __sync_fetch_and_add(&(p), (v))

static __always_inline void misc_add(int which)
{
	__u32 k = 0;
	struct misc_stat *m = bpf_map_lookup_elem(&misc_stats, &k);
	if (!m)
		return;
	if (which == 0)
		ADD(m->events_lost, 1);
	else if (which == 1)
		ADD(m->inflight_lost, 1);
	else if (which == 2)
		ADD(m->uring_unmatched, 1);
	else
		ADD(m->task_lost, 1);
}

#define S_IFMT_ 0170000
#define S_IFREG_ 0100000
#define S_IFBLK_ 0060000
#define TMPFS_MAGIC_ 0x01021994 // tmpfs accepts O_DIRECT since 6.6 but still copies

// file_class says whether I/O on f moves data by DMA (O_DIRECT on a regular
// file or block device of a file system that honours it) or by a CPU copy.
static __always_inline __u8 file_class(struct file *f)
{
	unsigned int flags;
	umode_t mode;
	unsigned long magic;

	if (!f)
		return CLASS_COPY;
	flags = BPF_CORE_READ(f, f_flags);
	if (!(flags & O_DIRECT_FLAG))
		return CLASS_COPY;
	mode = BPF_CORE_READ(f, f_inode, i_mode);
	if ((mode & S_IFMT_) != S_IFREG_ && (mode & S_IFMT_) != S_IFBLK_)
		return CLASS_COPY; // e.g. a packet-mode pipe: still copied
	// A block device honours O_DIRECT whatever file system holds its node
	// (devtmpfs has tmpfs's magic): only a regular file's is asked.
	if ((mode & S_IFMT_) == S_IFBLK_)
		return CLASS_DIRECT;
	magic = BPF_CORE_READ(f, f_inode, i_sb, s_magic);
	if (magic == TMPFS_MAGIC_)
		return CLASS_COPY;
	return CLASS_DIRECT;
}

// fd_file returns the current task's struct file for fd, read through its
// file table (task->files->fdt->fd[fd]).
static __always_inline struct file *fd_file(long fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt;
	struct file **fds;
	struct file *f = NULL;
	unsigned int max;

	if (fd < 0)
		return NULL;
	fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt)
		return NULL;
	max = BPF_CORE_READ(fdt, max_fds);
	if ((unsigned long)fd >= max)
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

static __always_inline void copy_add(__u32 src, __u32 dir, __u32 class, __u64 bytes)
{
	__u32 k = (src * 3 + dir) * 3 + class;
	struct copy_stat *c;
	if (k >= COPY_SLOTS)
		return;
	c = bpf_map_lookup_elem(&copy_stats, &k);
	if (!c)
		return;
	ADD(c->ops, 1);
	ADD(c->bytes, bytes);
}

// ---- system calls ----

#define MSG_ZEROCOPY_ 0x4000000

// selected: does the per-syscall table count this call (sys_filter)?
// ret is ignored for exit and exit_group, which never return.
static __always_inline bool selected(__u32 nr, long ret, bool returns)
{
	if (sys_filter & SF_NAMES) {
		if (nr >= MAX_SYSCALLS || !(syscall_set[(nr / 64) & 7] & (1ULL << (nr % 64))))
			return false;
	}
	if (sys_filter & (SF_FAILED | SF_ERRNO)) {
		if (!returns || !(ret < 0 && ret >= -4095))
			return false;
		if ((sys_filter & SF_ERRNO) && ret != -filter_errno)
			return false;
	}
	return true;
}

// task_add counts one call in the per-task breakdown (by_task).
static __always_inline void task_add(__u32 nr, bool failed, __u64 d)
{
	__u64 pt = bpf_get_current_pid_tgid();
	struct task_key k = {.nr = nr};
	struct task_stat *t;

	k.id = by_task == BY_THREAD ? (__u32)pt : pt >> 32;
	t = bpf_map_lookup_elem(&task_sys, &k);
	if (!t) {
		struct task_stat zero = {.tgid = pt >> 32};
		bpf_get_current_comm(zero.comm, sizeof(zero.comm));
		if (bpf_map_update_elem(&task_sys, &k, &zero, BPF_NOEXIST) && !bpf_map_lookup_elem(&task_sys, &k)) {
			misc_add(3);
			return;
		}
		t = bpf_map_lookup_elem(&task_sys, &k);
		if (!t)
			return;
	}
	ADD(t->count, 1);
	if (failed)
		ADD(t->errors, 1);
	ADD(t->total_ns, d);
}

// minmax_add folds d into the fastest and slowest call of nr. The value is
// per CPU; the compare-and-swap keeps it right if a preempted program
// interleaves with another on the same CPU.
static __always_inline void minmax_add(__u32 nr, __u64 d)
{
	struct sys_minmax *m = bpf_map_lookup_elem(&sys_minmax, &nr);
	__u64 cur;

	if (!m)
		return;
	for (int i = 0; i < 4; i++) {
		cur = m->min_ns;
		if (cur && cur <= d)
			break;
		if (__sync_val_compare_and_swap(&m->min_ns, cur, d) == cur)
			break;
	}
	for (int i = 0; i < 4; i++) {
		cur = m->max_ns;
		if (cur >= d)
			break;
		if (__sync_val_compare_and_swap(&m->max_ns, cur, d) == cur)
			break;
	}
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	struct sys_inflight in = {}, *slot_;

	if (!in_set())
		return 0;
	if (!is_armed() && id != NR_EXECVE && id != NR_EXECVEAT)
		return 0; // the launcher's code before the command's execve
	if (id == NR_EXIT || id == NR_EXIT_GROUP) { // no sys_exit follows
		__u32 nr = id;
		struct sys_stat *s;
		if (!selected(nr, 0, false))
			return 0;
		s = bpf_map_lookup_elem(&sys_stats, &nr);
		if (s)
			ADD(s->count, 1); // counted, no duration
		if (by_task)
			task_add(nr, false, 0);
		return 0;
	}
	in.ts = bpf_ktime_get_ns();
	in.nr = id;
	switch (id) {
	case NR_READ:
	case NR_PREAD64:
	case NR_READV:
	case NR_PREADV:
	case NR_PREADV2:
		in.dir = DIR_K2U + 1;
		in.class = file_class(fd_file(SYS_ARG0(regs)));
		break;
	case NR_WRITE:
	case NR_PWRITE64:
	case NR_WRITEV:
	case NR_PWRITEV:
	case NR_PWRITEV2:
		in.dir = DIR_U2K + 1;
		in.class = file_class(fd_file(SYS_ARG0(regs)));
		break;
	case NR_RECVFROM:
	case NR_RECVMSG:
		in.dir = DIR_K2U + 1;
		break;
	case NR_RECVMMSG: // recvmmsg(fd, vec, vlen, flags, timeout)
		in.dir = DIR_K2U + 1;
		in.vec = SYS_ARG1(regs);
		break;
	case NR_SENDTO: // sendto(fd, buf, len, flags, ...)
		in.dir = DIR_U2K + 1;
		if (SYS_ARG3(regs) & MSG_ZEROCOPY_)
			in.class = CLASS_ZEROCOPY;
		break;
	case NR_SENDMSG: // sendmsg(fd, msg, flags)
		in.dir = DIR_U2K + 1;
		if (SYS_ARG2(regs) & MSG_ZEROCOPY_)
			in.class = CLASS_ZEROCOPY;
		break;
	case NR_SENDMMSG: // sendmmsg(fd, vec, vlen, flags)
		in.dir = DIR_U2K + 1;
		in.vec = SYS_ARG1(regs);
		if (SYS_ARG3(regs) & MSG_ZEROCOPY_)
			in.class = CLASS_ZEROCOPY;
		break;
	case NR_SENDFILE:
	case NR_SPLICE:
	case NR_COPY_FILE_RANGE:
		in.dir = DIR_K2K + 1;
		break;
	}
	slot_ = bpf_task_storage_get(&sys_inflight, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!slot_) {
		misc_add(1);
		return 0;
	}
	*slot_ = in;
	return 0;
}

#define MMSG_MAX 64
#define MMSGHDR_SIZE 64   // struct mmsghdr on 64-bit Linux
#define MMSG_LEN_OFFSET 56 // offsetof(struct mmsghdr, msg_len)

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	struct sys_inflight *in;
	struct sys_stat *s;
	__u64 now, d, bytes = 0;
	__u32 nr;
	bool failed;

	if (!in_set())
		return 0;
	in = bpf_task_storage_get(&sys_inflight, bpf_get_current_task_btf(), 0, 0);
	if (!in || !in->ts)
		return 0; // entered before tracing started
	if (!is_armed()) {
		in->ts = 0; // a failed execve of the launcher
		return 0;
	}
	now = bpf_ktime_get_ns();
	nr = in->nr;
	if (nr >= MAX_SYSCALLS)
		nr = MAX_SYSCALLS - 1;
	if (in->dir && ret > 0) {
		if (in->vec) {
			// sendmmsg/recvmmsg return a message count; the bytes are
			// in each mmsghdr's msg_len, written by the kernel.
			for (int i = 0; i < MMSG_MAX; i++) {
				__u32 len = 0;
				if (i >= ret)
					break;
				bpf_probe_read_user(&len, sizeof(len),
						    (void *)(in->vec + i * MMSGHDR_SIZE + MMSG_LEN_OFFSET));
				bytes += len;
			}
		} else {
			bytes = ret;
		}
		copy_add(SRC_SYSCALL, in->dir - 1, in->class, bytes);
	}
	d = now - in->ts;
	in->ts = 0;
	if (!selected(nr, ret, true))
		return 0;
	failed = ret < 0 && ret >= -4095;
	s = bpf_map_lookup_elem(&sys_stats, &nr);
	if (s) {
		ADD(s->count, 1);
		if (failed)
			ADD(s->errors, 1);
		ADD(s->total_ns, d);
		ADD(s->bytes, bytes);
		__u32 sl = slot(d);
		if (sl < HIST_SLOTS)
			ADD(s->hist[sl], 1);
	}
	minmax_add(nr, d);
	if (by_task)
		task_add(nr, failed, d);
	return 0;
}

// ---- io_uring ----

#define CQE_F_MORE (1U << 1)
#define CQE_F_NOTIF (1U << 3)

static __always_inline int op_dir(__u8 op) // DIR_* + 1, or 0 for no data
{
	switch (op) {
	case 2:  // WRITEV
	case 5:  // WRITE_FIXED
	case 9:  // SENDMSG
	case 23: // WRITE
	case 26: // SEND
	case 47: // SEND_ZC
	case 48: // SENDMSG_ZC
	case 61: // WRITEV_FIXED
		return DIR_U2K + 1;
	case 1:  // READV
	case 4:  // READ_FIXED
	case 10: // RECVMSG
	case 22: // READ
	case 27: // RECV
	case 49: // READ_MULTISHOT
	case 58: // RECV_ZC
	case 60: // READV_FIXED
		return DIR_K2U + 1;
	case 30: // SPLICE
		return DIR_K2K + 1;
	}
	return 0;
}

static __always_inline bool op_fixed(__u8 op)
{
	return op == 4 || op == 5 || op == 60 || op == 61;
}

static __always_inline bool op_zerocopy(__u8 op)
{
	return op == 47 || op == 48 || op == 58;
}

static __always_inline void ring_mark(struct io_ring_ctx *ctx)
{
	__u64 k = (__u64)ctx;
	__u8 one = 1;
	if (!bpf_map_lookup_elem(&uring_rings, &k)) // a lookup is cheaper than an update
		bpf_map_update_elem(&uring_rings, &k, &one, BPF_ANY);
}

SEC("tp_btf/io_uring_create")
int BPF_PROG(uring_create, int fd, void *rctx, __u32 sq_entries, __u32 cq_entries, __u32 flags)
{
	if (!traced())
		return 0;
	ring_mark(rctx);
	return 0;
}

SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(uring_submit, struct io_kiocb *req)
{
	struct uring_inflight in = {};
	struct uring_stat *s;
	__u64 key = (__u64)req;
	__u32 op;

	if (!traced())
		return 0;
	op = BPF_CORE_READ(req, opcode);
	if (op >= OP_AUX)
		op = OP_AUX;
	s = bpf_map_lookup_elem(&uring_stats, &op);
	if (s)
		ADD(s->submitted, 1);
	in.ts = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&uring_inflight, &key, &in, BPF_ANY))
		misc_add(1);
	ring_mark(BPF_CORE_READ(req, ctx));
	return 0;
}

// Completions can be posted from another task (task work, io-wq, IOPOLL,
// interrupt context), so they are attributed by the request (seen at submit);
// by the ring only for completions without a request (auxiliary CQEs,
// zero-copy notifications) or, in a traced task, for requests submitted
// before the trace.
static __always_inline int uring_completed(void *rctx, void *reqp, __s32 res, __u32 cflags)
{
	struct io_kiocb *req = reqp;
	struct uring_inflight *in = NULL;
	struct uring_stat *s;
	__u64 key = (__u64)req, now = 0, lat = 0;
	__u32 op = OP_AUX;
	int dir;

	if (key)
		in = bpf_map_lookup_elem(&uring_inflight, &key);
	if (!in) {
		__u64 ck = (__u64)rctx;
		if (!bpf_map_lookup_elem(&uring_rings, &ck))
			return 0;
		// A request not seen at submit (submitted before the trace) is
		// counted only when its completion runs in a traced task: the
		// ring's address may have been reused by another process's ring
		// after the traced one was freed.
		if (key && !traced())
			return 0;
		if (key)
			misc_add(2);
	} else {
		now = bpf_ktime_get_ns();
		lat = now - in->ts;
	}
	if (req && !(cflags & CQE_F_NOTIF)) {
		op = BPF_CORE_READ(req, opcode);
		if (op >= OP_AUX)
			op = OP_AUX;
	}
	s = bpf_map_lookup_elem(&uring_stats, &op);
	if (!s)
		return 0;
	ADD(s->completed, 1);
	if (res < 0)
		ADD(s->errors, 1);
	if (in) {
		__u32 sl = slot(lat);
		if (sl < HIST_SLOTS)
			ADD(s->hist[sl], 1);
		if (!(cflags & CQE_F_MORE))
			bpf_map_delete_elem(&uring_inflight, &key);
	}
	dir = op == OP_AUX ? 0 : op_dir(op);
	if (dir && res > 0) {
		__u8 class;
		bool fixed = op_fixed(op);
		if (req_f_buf_node && (BPF_CORE_READ(req, flags) & req_f_buf_node))
			fixed = true;
		if (op_zerocopy(op))
			class = CLASS_ZEROCOPY;
		else
			class = file_class(BPF_CORE_READ(req, file));
		ADD(s->bytes, res);
		if (fixed) {
			ADD(s->fixed_reqs, 1);
			ADD(s->fixed_bytes, res);
		}
		if (class == CLASS_DIRECT)
			ADD(s->direct_bytes, res);
		else if (class == CLASS_ZEROCOPY)
			ADD(s->zerocopy_bytes, res);
		copy_add(SRC_URING, dir - 1, class, res);
	} else if (op_fixed(op)) {
		ADD(s->fixed_reqs, 1);
	}
	return 0;
}

SEC("tp_btf/io_uring_complete")
int BPF_PROG(uring_complete, struct io_ring_ctx *rctx, void *reqp, struct io_uring_cqe *cqe)
{
	return uring_completed(rctx, reqp, BPF_CORE_READ(cqe, res), BPF_CORE_READ(cqe, flags));
}

// The same tracepoint in kernels before the CQE was passed whole (6.1 has
// this form): io_uring_complete(ctx, req, user_data, res, cflags, extra1,
// extra2). The tracer loads the one that matches the kernel's BTF.
SEC("tp_btf/io_uring_complete")
int BPF_PROG(uring_complete_args, void *rctx, void *reqp, __u64 user_data, int res, unsigned cflags)
{
	return uring_completed(rctx, reqp, res, cflags);
}

// ---- page faults ----

SEC("tp_btf/page_fault_user")
int BPF_PROG(page_fault_user, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	__u32 k = 0;
	struct fault_stat *f;

	if (!traced())
		return 0;
	f = bpf_map_lookup_elem(&fault_stats, &k);
	if (!f)
		return 0;
	ADD(f->total, 1);
	// page_fault_user is x86's (arch/x86/include/asm/trace/exceptions.h):
	// other kernels lack it and the tracer leaves this program out.
	if (error_code & 2) // X86_PF_WRITE
		ADD(f->write, 1);
	if (error_code & 16) // X86_PF_INSTR
		ADD(f->instr, 1);
	return 0;
}

// ---- process exec and fork (which programs ran; arming, see arm_on_exec) ----

SEC("tp_btf/sched_process_exec")
int BPF_PROG(process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct event *e;

	if (!in_set())
		return 0;
	if (arm_on_exec) {
		// After de_thread the exec'ing task leads its thread group.
		struct armed *a = bpf_task_storage_get(&armed, p->group_leader, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!a) {
			misc_add(1);
			return 0;
		}
		a->yes = 1;
	}
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		misc_add(0);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->type = EV_EXEC;
	e->ts = bpf_ktime_get_ns();
	e->pid = BPF_CORE_READ(p, pid);
	e->tgid = BPF_CORE_READ(p, tgid);
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), p->comm);
	bpf_probe_read_kernel_str(e->file, sizeof(e->file), BPF_CORE_READ(bprm, filename));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

// A process forked by an armed thread group is armed from its first
// instruction (threads share their group's mark and need nothing). The
// child has not run yet: the tracepoint fires before it is woken.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
	struct armed *a;

	if (!arm_on_exec || !in_set() || !is_armed())
		return 0;
	if (child->pid != child->tgid)
		return 0; // a thread
	a = bpf_task_storage_get(&armed, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!a) {
		misc_add(1);
		return 0;
	}
	a->yes = 1;
	return 0;
}

// ---- engine batch hooks (uprobes on Go functions) ----
//
// The engine's hooks are //go:noinline Go functions; Go's register ABI
// passes integer arguments one per register (GO_ARG above: RAX, RBX, RCX on
// amd64; R0, R1, R2 on arm64), so at function entry:
//   hookSubmitBatch(count uint32, bytes uint64, path uint8): GO_ARG0, 1, 2
//   hookReapBatch(count uint32, bytes uint64, errors uint32):  GO_ARG0, 1, 2
// Narrow arguments are masked: Go leaves the upper bits unspecified.

static __always_inline void engine_event(__u32 type, __u32 count, __u64 bytes, __u32 aux)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	__u64 pt = bpf_get_current_pid_tgid();

	if (!e) {
		misc_add(0);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->type = type;
	e->ts = bpf_ktime_get_ns();
	e->pid = (__u32)pt;
	e->tgid = pt >> 32;
	e->count = count;
	e->bytes = bytes;
	e->aux = aux;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

SEC("uprobe")
int engine_submit(struct pt_regs *ctx)
{
	__u32 k = 0, count, path, sl;
	__u64 bytes;
	struct engine_stat *s;

	if (!traced())
		return 0;
	count = (__u32)GO_ARG0(ctx);
	bytes = GO_ARG1(ctx);
	path = (__u8)GO_ARG2(ctx);
	s = bpf_map_lookup_elem(&engine_stats, &k);
	if (s) {
		ADD(s->submit_batches, 1);
		ADD(s->submit_transfers, count);
		ADD(s->submit_bytes, bytes);
		if (path < MAX_PATHS) {
			ADD(s->path_batches[path], 1);
			ADD(s->path_bytes[path], bytes);
		}
		sl = slot(count);
		if (sl < HIST_SLOTS)
			ADD(s->batch_hist[sl], 1);
	}
	engine_event(EV_ENGINE_SUBMIT, count, bytes, path);
	return 0;
}

SEC("uprobe")
int engine_reap(struct pt_regs *ctx)
{
	__u32 k = 0, count, errors;
	__u64 bytes;
	struct engine_stat *s;

	if (!traced())
		return 0;
	count = (__u32)GO_ARG0(ctx);
	bytes = GO_ARG1(ctx);
	errors = (__u32)GO_ARG2(ctx);
	s = bpf_map_lookup_elem(&engine_stats, &k);
	if (s) {
		ADD(s->reap_batches, 1);
		ADD(s->reap_completions, count);
		ADD(s->reap_bytes, bytes);
		ADD(s->reap_errors, errors);
	}
	engine_event(EV_ENGINE_REAP, count, bytes, errors);
	return 0;
}
