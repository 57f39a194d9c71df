// Package trace observes one process from outside, through eBPF: it loads
// the programs of bpf, filters them in the kernel to a thread group
// (Attach) or to a fresh cgroup v2 subtree in which it starts a command
// (StartCommand, counting from the command's own execve), reads the per-CPU
// counters into a Snapshot (and Meta, what a session knows besides
// counters). Package trace/report turns snapshots into reports (the
// syscount-style table, log2 histograms, JSON) and compact intervals: this
// package is the mechanism, that one the presentation. Read a Snapshot through
// its accessors (UserToKernelBytes, KernelToUserBytes, DirectBytes,
// KernelCopyBytes, Bytes, SyscallCounts, ...). Prometheus metrics are served
// by cmd/hcomm-trace; this package does not import the client library.
//
// It counts system calls per number (count, errors, time, min/max, log2
// latency histogram; optionally only some names, failed calls or one errno,
// and per process or thread: Options.Filter, Options.By), the bytes the
// copying system calls and io_uring requests moved between user and kernel
// space — split into bytes a CPU copied, bytes moved by DMA (O_DIRECT) and
// zero-copy sends — the bytes the kernel moved with no user buffer
// (copy_file_range, sendfile, splice), io_uring requests per opcode with
// submit→complete latency, user page faults, and the engine's batches
// through uprobes on its hook functions (see Hooks: the symbol names are a
// stable contract; trace never imports engine).
//
// Requirements: Linux on amd64 or arm64 (the programs are built for each,
// with its system call table; user page faults are counted on amd64 only,
// the one architecture with a page_fault_user tracepoint), root or CAP_BPF+CAP_PERFMON (checked up
// front, see CheckPrivileges), kernel BTF, tp_btf and uprobes; StartCommand
// also needs a mounted cgroup v2 hierarchy (hybrid set-ups are fine: the
// filter uses the cgroup v2 membership every task has).
//
// Sentinel errors, for errors.Is:
//
//   - ErrNotPrivileged: the capabilities to load tracing programs are missing
//     (the message names which).
//   - ErrProcessGone: the process to attach to does not exist, exited, or is
//     a zombie.
//   - ErrNotProcess: the PID to attach to is a thread of another process
//     (the message names the process).
//   - ErrNoCgroup2: no cgroup v2 hierarchy is mounted, or it is not writable.
//   - ErrEngineAbsent: the traced binary lacks the engine hook symbols; the
//     rest of the trace still works and the report marks the engine absent.
//   - ErrNotSupported: the platform cannot run the programs (not amd64 or
//     arm64 Linux, or a required tracepoint is missing from the kernel). It wraps
//     errors.ErrUnsupported and is hcomm's shared sentinel, the same value
//     as engine.ErrNotSupported.
package trace
