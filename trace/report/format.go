package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
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
// bpftrace-style log2 histograms. Every section lists its rows in a fixed
// order, so the same report always prints the same text.
func WriteTable(w io.Writer, r *Report, o TableOptions) error {
	ew := &errWriter{w: w}
	if o.Header {
		writeHeader(ew, r)
	}
	names := r.TopSyscalls(o.Top)
	writeSyscalls(ew, r, names)
	writeTasks(ew, r, o.Top)
	writeCopies(ew, r)
	writeURing(ew, r)
	fmt.Fprintf(ew, "PAGE FAULTS: %d (%d on read, %d on write, %d on instruction fetch)\n\n",
		r.PageFaults.Total, r.PageFaults.Read, r.PageFaults.Write, r.PageFaults.Instr)
	writeEngine(ew, r.Engine)
	writeLost(ew, r)
	if o.Histograms {
		writeHistograms(ew, r, names)
	}
	return ew.err
}

// newTable is the column layout of every table: right-aligned, two spaces.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

func writeHeader(w io.Writer, r *Report) {
	fmt.Fprintf(w, "%s PID %d (%s), %s", r.Mode, r.Process.PID, r.Process.Comm, time.Duration(r.DurationNs).Round(time.Microsecond))
	if r.ExitCode != nil {
		fmt.Fprintf(w, ", exit status %d", *r.ExitCode)
	}
	fmt.Fprintln(w)
	if r.Process.Cgroup != "" {
		fmt.Fprintf(w, "cgroup %s (the command and its children)\n", r.Process.Cgroup)
	}
	fmt.Fprintln(w)
}

// us formats nanoseconds as microseconds, the one unit of the syscall
// tables.
func us(ns uint64) string { return strconv.FormatFloat(float64(ns)/1e3, 'f', 1, 64) }

// writeSyscalls prints the rows of names (already ordered) and the total.
func writeSyscalls(w io.Writer, r *Report, names []string) {
	if f := r.Filter; f != nil {
		fmt.Fprintf(w, "filter:%s\n", filterText(f))
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "SYSCALL\tCOUNT\tERRORS\tTOTAL (us)\tMIN (us)\tAVG (us)\tMAX (us)\t")
	for _, n := range names {
		s := r.Syscalls[n]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", n, s.Count, s.Errors, us(s.TotalNs), us(s.MinNs), us(s.AvgNs), us(s.MaxNs))
	}
	tw.Flush()
	if rest := len(r.Syscalls) - len(names); rest > 0 {
		fmt.Fprintf(w, "(%d more syscalls not shown)\n", rest)
	}
	var calls uint64
	for _, s := range r.Syscalls {
		calls += s.Count
	}
	fmt.Fprintf(w, "%d syscalls in total\n\n", calls)
}

func filterText(f *FilterReport) string {
	var b strings.Builder
	if len(f.Syscalls) > 0 {
		fmt.Fprintf(&b, " syscalls %s", strings.Join(f.Syscalls, ","))
	}
	if f.Errno != "" {
		fmt.Fprintf(&b, " failed with %s", f.Errno)
	} else if f.Failed {
		b.WriteString(" failed calls only")
	}
	return b.String()
}

// writeTasks prints the per-process (or per-thread) breakdown: each task's
// top syscalls by total time, tasks in ID order.
func writeTasks(w io.Writer, r *Report, top int) {
	if r.By == "" {
		return
	}
	id := "PID"
	if r.By == "thread" {
		id = "TID"
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "%s\tCOMM\tSYSCALL\tCOUNT\tERRORS\tTOTAL (us)\t\n", id)
	for _, t := range r.Tasks {
		for i, n := range topTaskSyscalls(t, top) {
			s := t.Syscalls[n]
			if i == 0 {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t\n", t.ID, t.Comm, n, s.Count, s.Errors, us(s.TotalNs))
			} else {
				fmt.Fprintf(tw, "\t\t%s\t%d\t%d\t%s\t\n", n, s.Count, s.Errors, us(s.TotalNs))
			}
		}
	}
	tw.Flush()
	plural := map[string]string{"process": "processes", "thread": "threads"}
	fmt.Fprintf(w, "%d %s\n\n", len(r.Tasks), plural[r.By])
}

// topTaskSyscalls orders a task's syscalls like TopSyscalls.
func topTaskSyscalls(t TaskReport, n int) []string {
	return topSyscalls(t.Syscalls, func(s TaskSyscall) (uint64, uint64) { return s.TotalNs, s.Count }, n)
}

func writeCopies(w io.Writer, r *Report) {
	tw := newTable(w)
	fmt.Fprintln(tw, "COPY (bytes)\tuser->kernel\tkernel->user\tdirect (DMA)\tzero-copy\tin-kernel\tops\t")
	for _, row := range []struct {
		name string
		c    CopySplit
	}{{"syscalls", r.Copy.Syscalls}, {"io_uring", r.Copy.IOURing}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", row.name, row.c.UserToKernelBytes, row.c.KernelToUserBytes,
			row.c.DirectWriteBytes+row.c.DirectReadBytes, row.c.ZeroCopyBytes, row.c.KernelCopyBytes, row.c.Ops)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t\t\n", r.Copy.UserToKernelBytes, r.Copy.KernelToUserBytes, r.Copy.DirectBytes,
		r.Copy.ZeroCopyBytes, r.Copy.KernelCopyBytes)
	tw.Flush()
	fmt.Fprintln(w, "(user->kernel and kernel->user: bytes a CPU copied; direct: O_DIRECT, moved by DMA;")
	fmt.Fprintln(w, " in-kernel: copy_file_range, sendfile, splice, with no user buffer)")
	fmt.Fprintln(w)
}

// uringOpsInOrder returns the opcode names of r ordered by opcode number.
func uringOpsInOrder(r *Report) []string {
	ops := make([]string, 0, len(r.IOURing))
	for k := range r.IOURing {
		ops = append(ops, k)
	}
	sort.Slice(ops, func(i, j int) bool { return r.IOURing[ops[i]].Op < r.IOURing[ops[j]].Op })
	return ops
}

func writeURing(w io.Writer, r *Report) {
	if len(r.IOURing) == 0 {
		fmt.Fprintln(w, "IO_URING: no requests")
		fmt.Fprintln(w)
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "IO_URING OP\tSUBMITTED\tCOMPLETED\tERRORS\tBYTES\tFIXED BYTES\tDIRECT BYTES\tAVG LAT (ns)\t")
	for _, op := range uringOpsInOrder(r) {
		u := r.IOURing[op]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", op, u.Submitted, u.Completed, u.Errors, u.Bytes,
			u.FixedBytes, u.DirectBytes, histAvg(u.LatencyNs))
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func writeEngine(w io.Writer, e EngineReport) {
	if !e.Present {
		fmt.Fprintf(w, "ENGINE: absent (%s)\n", e.Reason)
		return
	}
	tw := newTable(w)
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

func writeLost(w io.Writer, r *Report) {
	if l := r.Lost; l.Events+l.InflightEntries+l.URingUnmatched+l.ProgramMisses > 0 {
		fmt.Fprintf(w, "\nLOST: %d events (ring buffer full), %d in-flight entries (table full), %d unmatched io_uring completions, %d probe runs skipped (recursion guard)\n",
			l.Events, l.InflightEntries, l.URingUnmatched, l.ProgramMisses)
	}
	if len(r.Unavailable) > 0 {
		fmt.Fprintf(w, "\nUNAVAILABLE PROBES: %s\n", strings.Join(r.Unavailable, "; "))
	}
}

// writeHistograms prints the latency histograms of the first histSyscalls
// of names, of every io_uring opcode (by opcode number) and the engine's
// transfers per batch.
func writeHistograms(w io.Writer, r *Report, names []string) {
	if len(names) > histSyscalls {
		names = names[:histSyscalls]
	}
	for _, n := range names {
		if h := r.Syscalls[n].LatencyNs; len(h) > 0 {
			fmt.Fprintf(w, "\n@syscall_ns[%s]:\n", n)
			WriteHistogram(w, h)
		}
	}
	for _, op := range uringOpsInOrder(r) {
		if h := r.IOURing[op].LatencyNs; len(h) > 0 {
			fmt.Fprintf(w, "\n@io_uring_ns[%s]:\n", op)
			WriteHistogram(w, h)
		}
	}
	if h := r.Engine.BatchTransfers; len(h) > 0 {
		fmt.Fprintf(w, "\n@engine_batch_transfers:\n")
		WriteHistogram(w, h)
	}
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
	var peak uint64
	for _, b := range h {
		peak = max(peak, b.Count)
	}
	byLo := map[uint64]uint64{}
	for _, b := range h {
		byLo[b.Lo] = b.Count
	}
	const width = 52
	for lo, hi := h[0].Lo, h[0].Hi; lo <= h[len(h)-1].Lo; {
		c := byLo[lo]
		bar := int(c * width / peak)
		fmt.Fprintf(w, "[%s, %s)%s %8d |%s%s|\n", humanPow(lo), humanPow(hi),
			strings.Repeat(" ", max(0, 12-len(humanPow(lo))-len(humanPow(hi)))), c,
			strings.Repeat("@", bar), strings.Repeat(" ", width-bar))
		if lo == 0 {
			lo, hi = 1, 2
		} else {
			lo, hi = hi, hi*2
		}
	}
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

// WriteJSONLine writes v as one compact JSON line (the -i intervals).
func WriteJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
