package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// histSyscalls is how many of the top syscalls get a histogram.
const histSyscalls = 5

// TableOptions shape the text report.
type TableOptions struct {
	Top        int  // syscalls shown (<= 0: all)
	Histograms bool // print log2 latency histograms (top 5 syscalls, io_uring opcodes, engine batch sizes)
	Header     bool // print the process line
}

// WriteJSON writes r as one indented JSON object.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r as text: a syscount-style table, the copy summary,
// io_uring per opcode, page faults, the engine section and (optionally)
// bpftrace-style log2 histograms.
func WriteTable(w io.Writer, r *Report, o TableOptions) error {
	ew := &errWriter{w: w}
	if o.Header {
		fmt.Fprintf(ew, "%s PID %d (%s), %s", r.Mode, r.Process.PID, r.Process.Comm, time.Duration(r.DurationNs).Round(time.Microsecond))
		if r.ExitCode != nil {
			fmt.Fprintf(ew, ", exit status %d", *r.ExitCode)
		}
		fmt.Fprintln(ew)
		if r.Process.Cgroup != "" {
			fmt.Fprintf(ew, "cgroup %s (the command and its children)\n", r.Process.Cgroup)
		}
		fmt.Fprintln(ew)
	}

	names := r.TopSyscalls(o.Top)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SYSCALL\tCOUNT\tERRORS\tTOTAL (us)\tAVG (ns)\t")
	var calls uint64
	for _, s := range r.Syscalls {
		calls += s.Count
	}
	for _, n := range names {
		s := r.Syscalls[n]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%d\t\n", n, s.Count, s.Errors, float64(s.TotalNs)/1e3, s.AvgNs)
	}
	tw.Flush()
	if rest := len(r.Syscalls) - len(names); rest > 0 {
		fmt.Fprintf(ew, "(%d more syscalls not shown)\n", rest)
	}
	fmt.Fprintf(ew, "%d syscalls in total\n\n", calls)

	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "COPY (bytes)\tuser->kernel\tkernel->user\tdirect (DMA)\tzero-copy\tops\t")
	for _, row := range []struct {
		name string
		c    CopySplit
	}{{"syscalls", r.Copy.Syscalls}, {"io_uring", r.Copy.IOURing}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", row.name, row.c.UserToKernelBytes, row.c.KernelToUserBytes,
			row.c.DirectWriteBytes+row.c.DirectReadBytes, row.c.ZeroCopyBytes, row.c.Ops)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t\t\n", r.Copy.UserToKernelBytes, r.Copy.KernelToUserBytes, r.Copy.DirectBytes, r.Copy.ZeroCopyBytes)
	tw.Flush()
	fmt.Fprintln(ew, "(user->kernel and kernel->user: bytes a CPU copied; direct: O_DIRECT, moved by DMA)")
	fmt.Fprintln(ew)

	if len(r.IOURing) > 0 {
		ops := make([]string, 0, len(r.IOURing))
		for k := range r.IOURing {
			ops = append(ops, k)
		}
		sort.Slice(ops, func(i, j int) bool { return r.IOURing[ops[i]].Op < r.IOURing[ops[j]].Op })
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "IO_URING OP\tSUBMITTED\tCOMPLETED\tERRORS\tBYTES\tFIXED BYTES\tDIRECT BYTES\tAVG LAT (ns)\t")
		for _, op := range ops {
			u := r.IOURing[op]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", op, u.Submitted, u.Completed, u.Errors, u.Bytes,
				u.FixedBytes, u.DirectBytes, histAvg(u.LatencyNs))
		}
		tw.Flush()
	} else {
		fmt.Fprintln(ew, "IO_URING: no requests")
	}
	fmt.Fprintln(ew)

	fmt.Fprintf(ew, "PAGE FAULTS: %d (%d on write, %d on instruction fetch)\n\n", r.PageFaults.Total, r.PageFaults.Write, r.PageFaults.Instr)

	e := r.Engine
	if !e.Present {
		fmt.Fprintf(ew, "ENGINE: absent (%s)\n", e.Reason)
	} else {
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ENGINE\tBATCHES\tTRANSFERS\tBYTES\tERRORS\t")
		fmt.Fprintf(tw, "submitted\t%d\t%d\t%d\t\t\n", e.Batches, e.Transfers, e.Bytes)
		fmt.Fprintf(tw, "reaped\t%d\t%d\t%d\t%d\t\n", e.ReapedBatches, e.Completions, e.CompletedBytes, e.Errors)
		paths := make([]string, 0, len(e.Paths))
		for p := range e.Paths {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			fmt.Fprintf(tw, "path %s\t%d\t\t%d\t\t\n", p, e.Paths[p].Batches, e.Paths[p].Bytes)
		}
		tw.Flush()
	}
	if l := r.Lost; l.Events+l.InflightEntries+l.URingUnmatched+l.ProgramMisses > 0 {
		fmt.Fprintf(ew, "\nLOST: %d events (ring buffer full), %d in-flight entries (table full), %d unmatched io_uring completions, %d probe runs skipped (recursion guard)\n",
			l.Events, l.InflightEntries, l.URingUnmatched, l.ProgramMisses)
	}
	if len(r.Unavailable) > 0 {
		fmt.Fprintf(ew, "\nUNAVAILABLE PROBES: %s\n", strings.Join(r.Unavailable, "; "))
	}

	if o.Histograms {
		hn := names
		if len(hn) > histSyscalls {
			hn = hn[:histSyscalls]
		}
		for _, n := range hn {
			if h := r.Syscalls[n].LatencyNs; len(h) > 0 {
				fmt.Fprintf(ew, "\n@syscall_ns[%s]:\n", n)
				WriteHistogram(ew, h)
			}
		}
		for op, u := range r.IOURing {
			if len(u.LatencyNs) > 0 {
				fmt.Fprintf(ew, "\n@io_uring_ns[%s]:\n", op)
				WriteHistogram(ew, u.LatencyNs)
			}
		}
		if len(e.BatchTransfers) > 0 {
			fmt.Fprintf(ew, "\n@engine_batch_transfers:\n")
			WriteHistogram(ew, e.BatchTransfers)
		}
	}
	return ew.err
}

func histAvg(h Histogram) string {
	// Buckets only bound each sample; the mid-point estimate is labelled "~".
	var n, sum uint64
	for _, b := range h {
		n += b.Count
		sum += b.Count * ((b.Lo + b.Hi) / 2)
	}
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("~%d", sum/n)
}

// WriteHistogram prints h the way bpftrace prints hist(): one line per
// bucket from the first to the last non-empty one.
func WriteHistogram(w io.Writer, h Histogram) {
	if len(h) == 0 {
		return
	}
	var max uint64
	for _, b := range h {
		if b.Count > max {
			max = b.Count
		}
	}
	byLo := map[uint64]uint64{}
	for _, b := range h {
		byLo[b.Lo] = b.Count
	}
	const width = 52
	for lo, hi := h[0].Lo, h[0].Hi; lo <= h[len(h)-1].Lo; {
		c := byLo[lo]
		bar := int(c * width / max)
		fmt.Fprintf(w, "[%s, %s)%s %8d |%s%s|\n", humanPow(lo), humanPow(hi),
			strings.Repeat(" ", max0(12-len(humanPow(lo))-len(humanPow(hi)))), c,
			strings.Repeat("@", bar), strings.Repeat(" ", width-bar))
		if lo == 0 {
			lo, hi = 1, 2
		} else {
			lo, hi = hi, hi*2
		}
	}
}

func max0(v int) int {
	if v < 0 {
		return 0
	}
	return v
}

// humanPow writes powers of two the bpftrace way: 512, 1K, 2M, 4G.
func humanPow(v uint64) string {
	switch {
	case v >= 1<<40 && v%(1<<40) == 0:
		return fmt.Sprintf("%dT", v>>40)
	case v >= 1<<30 && v%(1<<30) == 0:
		return fmt.Sprintf("%dG", v>>30)
	case v >= 1<<20 && v%(1<<20) == 0:
		return fmt.Sprintf("%dM", v>>20)
	case v >= 1<<10 && v%(1<<10) == 0:
		return fmt.Sprintf("%dK", v>>10)
	}
	return fmt.Sprintf("%d", v)
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
