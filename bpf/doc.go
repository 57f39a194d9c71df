// Package bpf holds hcomm's eBPF programs: the C source (hcomm.bpf.c), the
// vmlinux.h it is compiled against (generated with bpftool from
// /sys/kernel/btf/vmlinux and committed), and the loader and object that
// bpf2go generated from them (hcomm_x86_bpfel.go/.o for amd64,
// hcomm_arm64_bpfel.go/.o for arm64, also committed), so that users need
// neither clang nor kernel headers. What it exports is small: Spec (the
// parsed object), the map value types (SysStat, CopyStat, ...) and the
// layout constants shared with the C code (layout.go); the generated loader
// itself is unexported.
//
// The programs count, for one process (a thread group, or every task of a
// cgroup v2 subtree), and nothing else:
//
//   - system calls (tp_btf/sys_enter, tp_btf/sys_exit): count, errors, time
//     and a log2 latency histogram per syscall number;
//   - user<->kernel bytes of the copying system calls (read, write, pread64,
//     pwrite64, readv, writev, preadv, pwritev, preadv2, pwritev2, sendto,
//     recvfrom, sendmsg, recvmsg, sendmmsg, recvmmsg) from their results,
//     classified by the file's O_DIRECT flag read through the task's file
//     table with CO-RE (copy, direct or zero-copy);
//   - io_uring (tp_btf/io_uring_create, io_uring_submit_req,
//     io_uring_complete): per opcode submitted, completed, errors, bytes, fixed
//     vs non-fixed buffers, direct vs copied, submit->complete latency;
//   - user page faults (tp_btf/page_fault_user, an x86 tracepoint: not
//     counted on arm64);
//   - execs inside the traced set (tp_btf/sched_process_exec, ring buffer);
//   - engine batches: uprobes on the engine's hook functions (engine_submit,
//     engine_reap), read from Go's register ABI, counted and streamed through
//     the ring buffer.
//
// Only tracepoints and uprobes are used: the kernels hcomm targets may lack
// kprobes and refuse fentry/fexit. The layout constants the programs share
// with Go are in layout.go. Package trace loads and attaches the programs
// and aggregates the maps; this package only carries them.
//
// One object per architecture: hcomm.bpf.c's __TARGET_ARCH_ block holds
// what differs (system call numbers and argument registers, O_DIRECT, Go's
// register ABI); kernel structures are read with CO-RE, relocated at load
// time to the running kernel's layout, so one vmlinux.h (x86-64's) serves
// both.
package bpf
