package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hcomm-go/hcomm/trace"
)

// Interval is the compact change over one live interval (hcomm-trace -i):
// only what moved, and no per-call detail (latency, histograms) that the
// final report has.
type Interval struct {
	Mode       string            `json:"mode"` // "interval"
	Time       time.Time         `json:"time"` // end of the interval
	IntervalNs int64             `json:"interval_ns"`
	Calls      uint64            `json:"calls"`              // syscalls completed
	Errors     uint64            `json:"errors"`             // of which failed
	Syscalls   map[string]uint64 `json:"syscalls,omitempty"` // count per syscall
	Copy       *IntervalCopy     `json:"copy,omitempty"`
	IOURing    map[string]uint64 `json:"io_uring,omitempty"` // completions per opcode
	PageFaults uint64            `json:"page_faults,omitempty"`
	Engine     *IntervalEngine   `json:"engine,omitempty"`
}

// IntervalCopy is the bytes moved in an interval, by class.
type IntervalCopy struct {
	UserToKernelBytes uint64 `json:"user_to_kernel_bytes"`
	KernelToUserBytes uint64 `json:"kernel_to_user_bytes"`
	DirectBytes       uint64 `json:"direct_bytes"`
	ZeroCopyBytes     uint64 `json:"zerocopy_bytes"`
	KernelCopyBytes   uint64 `json:"kernel_copy_bytes"`
}

// IntervalEngine is the engine's batches in an interval.
type IntervalEngine struct {
	Batches     uint64 `json:"batches"`
	Transfers   uint64 `json:"transfers"`
	Bytes       uint64 `json:"bytes"`
	Completions uint64 `json:"completions"`
}

// NewInterval summarizes d, the change between two snapshots span apart.
func NewInterval(d *trace.Snapshot, span time.Duration) *Interval {
	iv := &Interval{Mode: "interval", Time: d.Taken, IntervalNs: span.Nanoseconds()}
	for nr := range d.Syscalls {
		st := &d.Syscalls[nr]
		if st.Count == 0 {
			continue
		}
		if iv.Syscalls == nil {
			iv.Syscalls = map[string]uint64{}
		}
		iv.Syscalls[trace.SyscallName(nr)] = st.Count
		iv.Calls += st.Count
		iv.Errors += st.Errors
	}
	c := IntervalCopy{d.UserToKernelBytes(), d.KernelToUserBytes(), d.DirectBytes(), d.ZeroCopyBytes(), d.KernelCopyBytes()}
	if c != (IntervalCopy{}) {
		iv.Copy = &c
	}
	for op := range d.URing {
		if n := d.URing[op].Completed; n != 0 {
			if iv.IOURing == nil {
				iv.IOURing = map[string]uint64{}
			}
			iv.IOURing[trace.URingOpName(op)] = n
		}
	}
	iv.PageFaults = d.Faults.Total
	e := IntervalEngine{d.Engine.SubmitBatches, d.Engine.SubmitTransfers, d.Engine.SubmitBytes, d.Engine.ReapCompletions}
	if e != (IntervalEngine{}) {
		iv.Engine = &e
	}
	return iv
}

// WriteLine prints iv as one line: the time, the calls (the top syscalls by
// count, at most top), then only the sections that moved.
func (iv *Interval) WriteLine(w io.Writer, top int) error {
	var parts []string
	if iv.Calls > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%d syscalls", iv.Calls)
		if iv.Errors > 0 {
			fmt.Fprintf(&b, " (%d failed)", iv.Errors)
		}
		names := byCount(iv.Syscalls)
		rest := 0
		if top > 0 && len(names) > top {
			names, rest = names[:top], len(names)-top
		}
		for _, n := range names {
			fmt.Fprintf(&b, " %s %d", n, iv.Syscalls[n])
		}
		if rest > 0 {
			fmt.Fprintf(&b, " +%d more", rest)
		}
		parts = append(parts, b.String())
	}
	if c := iv.Copy; c != nil {
		p := fmt.Sprintf("copied u->k %d k->u %d B", c.UserToKernelBytes, c.KernelToUserBytes)
		for _, x := range []struct {
			name string
			v    uint64
		}{{"direct", c.DirectBytes}, {"zero-copy", c.ZeroCopyBytes}, {"in-kernel", c.KernelCopyBytes}} {
			if x.v > 0 {
				p += fmt.Sprintf(", %s %d B", x.name, x.v)
			}
		}
		parts = append(parts, p)
	}
	if len(iv.IOURing) > 0 {
		p := "io_uring"
		for _, op := range byCount(iv.IOURing) {
			p += fmt.Sprintf(" %s %d", op, iv.IOURing[op])
		}
		parts = append(parts, p)
	}
	if iv.PageFaults > 0 {
		parts = append(parts, fmt.Sprintf("%d page faults", iv.PageFaults))
	}
	if e := iv.Engine; e != nil {
		parts = append(parts, fmt.Sprintf("engine %d batches %d transfers %d B %d completions", e.Batches, e.Transfers, e.Bytes, e.Completions))
	}
	if len(parts) == 0 {
		parts = append(parts, "idle")
	}
	_, err := fmt.Fprintf(w, "%s +%s: %s\n", iv.Time.Format("15:04:05"), time.Duration(iv.IntervalNs).Round(time.Millisecond), strings.Join(parts, " | "))
	return err
}

// byCount returns m's keys by descending value, then name.
func byCount(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}
