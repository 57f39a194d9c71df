// Package selftrace counts, with eBPF (package trace), what a child process
// does between two points of its own choosing: the parent starts the child
// (usually the same binary in a worker mode) under trace; the child sets
// up, calls Begin, does the work to be counted, calls End, and reports a
// JSON line. The parent snapshots the counters at Begin and End, so set-up,
// warm-up and teardown stay out of the count, and the tracer's own reader
// goroutine lives in the parent, not in the counted process.
//
// The handshake runs over the child's stdin and stdout (the child must not
// print anything else to stdout) and costs the window exactly one read(2)
// (the child's wake-up at Begin) and one write(2) (its "done" at End);
// Run subtracts both, so the delta is the work's alone.
//
// hcomm-bench and hcomm-demo use it; it needs what trace needs (root or
// CAP_BPF+CAP_PERFMON, see trace.CheckPrivileges), and Linux.
//
// Sentinel error for errors.Is (errors.go): ErrChild.
package selftrace
