package report

import (
	"sort"

	"github.com/hcomm-go/hcomm/trace"

	"golang.org/x/sys/unix"
)

// Report is what hcomm-trace prints: the JSON object of `-o json` (schema in
// docs/tracing.md) and the source of the table. Counters are totals over the
// report's window (the whole trace, or one interval for live deltas).
type Report struct {
	// SchemaVersion is SchemaVersion; it changes when a key changes
	// meaning or disappears (new keys do not change it).
	SchemaVersion int                      `json:"schema_version"`
	Process       trace.ProcessInfo        `json:"process"`
	Mode          string                   `json:"mode"` // "run" or "attach"
	DurationNs    int64                    `json:"duration_ns"`
	ExitCode      *int                     `json:"exit_code,omitempty"`
	Syscalls      map[string]SyscallReport `json:"syscalls"`
	Copy          CopyReport               `json:"copy"`
	IOURing       map[string]URingReport   `json:"io_uring"`
	PageFaults    FaultReport              `json:"page_faults"`
	Engine        EngineReport             `json:"engine"`
	// Filter is the syscall filter the syscall table was counted with
	// (absent: every call).
	Filter *FilterReport `json:"filter,omitempty"`
	// By is "process" or "thread" when Tasks breaks the syscall table down.
	By    string       `json:"by,omitempty"`
	Tasks []TaskReport `json:"tasks,omitempty"`
	Execs []trace.Exec `json:"execs,omitempty"`
	Lost  LostReport   `json:"lost"`
	// Unavailable lists probes that could not be attached (with reasons);
	// their sections read zero.
	Unavailable []string `json:"unavailable,omitempty"`
}

// SchemaVersion is the version of the JSON report's schema
// (docs/tracing.md). Version 2 added schema_version, min_ns/max_ns,
// kernel_copy_bytes, filter, by/tasks, page_faults.read and lost.task_entries,
// and counts from the command's own execve.
const SchemaVersion = 2

// FilterReport echoes Options.Filter.
type FilterReport struct {
	Syscalls []string `json:"syscalls,omitempty"`
	Failed   bool     `json:"failed,omitempty"`
	Errno    string   `json:"errno,omitempty"` // e.g. "ENOENT"
}

// TaskReport is one process's (or thread's) share of the syscall table.
type TaskReport struct {
	ID       int                    `json:"id"`   // PID, or TID with by=thread
	TGID     int                    `json:"tgid"` // the process of a thread
	Comm     string                 `json:"comm"`
	Count    uint64                 `json:"count"` // all its calls
	Syscalls map[string]TaskSyscall `json:"syscalls"`
}

// TaskSyscall is one syscall's line of a TaskReport.
type TaskSyscall struct {
	Count   uint64 `json:"count"`
	Errors  uint64 `json:"errors"`
	TotalNs uint64 `json:"total_ns"`
}

// SyscallReport is one syscall's line.
type SyscallReport struct {
	Nr        int       `json:"nr"`
	Count     uint64    `json:"count"`
	Errors    uint64    `json:"errors"`
	TotalNs   uint64    `json:"total_ns"`
	MinNs     uint64    `json:"min_ns"` // fastest call (0: exit, exit_group)
	AvgNs     uint64    `json:"avg_ns"`
	MaxNs     uint64    `json:"max_ns"`          // slowest call
	Bytes     uint64    `json:"bytes,omitempty"` // copying syscalls: bytes moved (all classes)
	LatencyNs Histogram `json:"latency_ns"`
}

// CopyReport splits data moved between user and kernel space by whether a
// CPU copied it. UserToKernelBytes and KernelToUserBytes count only CPU
// copies; DirectBytes were moved by DMA (O_DIRECT on a regular file or block
// device); ZeroCopyBytes went through MSG_ZEROCOPY / SEND_ZC / RECV_ZC;
// KernelCopyBytes the kernel moved with no user buffer (copy_file_range,
// sendfile, splice).
type CopyReport struct {
	UserToKernelBytes uint64    `json:"user_to_kernel_bytes"`
	KernelToUserBytes uint64    `json:"kernel_to_user_bytes"`
	DirectBytes       uint64    `json:"direct_bytes"`
	ZeroCopyBytes     uint64    `json:"zerocopy_bytes"`
	KernelCopyBytes   uint64    `json:"kernel_copy_bytes"`
	Syscalls          CopySplit `json:"syscalls"`
	IOURing           CopySplit `json:"io_uring"`
}

// CopySplit is one source's share (copying syscalls or io_uring requests).
type CopySplit struct {
	UserToKernelBytes uint64 `json:"user_to_kernel_bytes"`
	KernelToUserBytes uint64 `json:"kernel_to_user_bytes"`
	DirectWriteBytes  uint64 `json:"direct_write_bytes"`
	DirectReadBytes   uint64 `json:"direct_read_bytes"`
	ZeroCopyBytes     uint64 `json:"zerocopy_bytes"`
	KernelCopyBytes   uint64 `json:"kernel_copy_bytes"`
	Ops               uint64 `json:"ops"` // calls or requests that moved data
}

// URingReport is one io_uring opcode's line.
type URingReport struct {
	Op            int       `json:"op"`
	Submitted     uint64    `json:"submitted"`
	Completed     uint64    `json:"completed"`
	Errors        uint64    `json:"errors"`
	Bytes         uint64    `json:"bytes"`
	FixedRequests uint64    `json:"fixed_requests"`
	FixedBytes    uint64    `json:"fixed_bytes"`
	DirectBytes   uint64    `json:"direct_bytes"`
	ZeroCopyBytes uint64    `json:"zerocopy_bytes"`
	LatencyNs     Histogram `json:"latency_ns"` // submit -> complete
}

// FaultReport counts user page faults by access: Read + Write + Instr = Total.
type FaultReport struct {
	Total uint64 `json:"total"`
	Read  uint64 `json:"read"`
	Write uint64 `json:"write"`
	Instr uint64 `json:"instruction"`
}

// EngineReport is the engine section; Present is false (with Reason) when
// the traced binary lacks the hook symbols.
type EngineReport struct {
	Present        bool                  `json:"present"`
	Reason         string                `json:"reason,omitempty"`
	Binaries       []string              `json:"binaries,omitempty"`
	Batches        uint64                `json:"batches"`
	Transfers      uint64                `json:"transfers"`
	Bytes          uint64                `json:"bytes"`
	ReapedBatches  uint64                `json:"reaped_batches"`
	Completions    uint64                `json:"completions"`
	CompletedBytes uint64                `json:"completed_bytes"`
	Errors         uint64                `json:"errors"`
	Paths          map[string]EnginePath `json:"paths,omitempty"`
	BatchTransfers Histogram             `json:"batch_transfers"` // transfers per batch
}

// EnginePath is one target path's share of the submitted batches.
type EnginePath struct {
	Batches uint64 `json:"batches"`
	Bytes   uint64 `json:"bytes"`
}

// LostReport counts what the probes could not record.
type LostReport struct {
	Events          uint64 `json:"events"`           // ring buffer full
	InflightEntries uint64 `json:"inflight_entries"` // in-flight tables full
	URingUnmatched  uint64 `json:"io_uring_unmatched"`
	ProgramMisses   uint64 `json:"program_misses"` // probe runs skipped by the kernel's recursion guard
	TaskEntries     uint64 `json:"task_entries"`   // per-task table full: calls missing from tasks
}

// Bucket is one log2 histogram bucket: values in [Lo, Hi).
type Bucket struct {
	Lo    uint64 `json:"lo"`
	Hi    uint64 `json:"hi"`
	Count uint64 `json:"count"`
}

// Histogram lists the non-empty buckets, ascending.
type Histogram []Bucket

// NewHistogram converts the programs' log2 slots.
func NewHistogram(slots []uint64) Histogram {
	h := Histogram{}
	for i, c := range slots {
		if c == 0 {
			continue
		}
		lo, hi := slotRange(i)
		h = append(h, Bucket{Lo: lo, Hi: hi, Count: c})
	}
	return h
}

// slotRange is the value range of log2 slot i: 0 -> [0,1), i -> [2^(i-1), 2^i).
func slotRange(i int) (lo, hi uint64) {
	if i == 0 {
		return 0, 1
	}
	return 1 << (i - 1), 1 << i
}

// Count is the number of samples.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, b := range h {
		n += b.Count
	}
	return n
}

// New builds a report from a snapshot (or a delta of two).
func New(s *trace.Snapshot, m trace.Meta) *Report {
	r := &Report{
		SchemaVersion: SchemaVersion,
		Process:       m.Process, Mode: m.Mode, DurationNs: m.Duration.Nanoseconds(), ExitCode: m.ExitCode,
		Execs: m.Execs, Unavailable: m.Unavailable, By: m.By.String(),
	}
	r.Syscalls = syscallReports(s)
	r.Copy = copyReport(s)
	r.IOURing = uringReports(s)
	f := s.Faults
	r.PageFaults = FaultReport{Total: f.Total, Read: f.Total - min(f.Total, f.Write+f.Instr), Write: f.Write, Instr: f.Instr}
	r.Engine = engineReport(s, m.Engine)
	r.Filter = filterReport(m.Filter)
	r.Tasks = taskReports(s.Tasks, m.Execs)
	r.Lost = LostReport{Events: s.Misc.EventsLost, InflightEntries: s.Misc.InflightLost, URingUnmatched: s.Misc.UringUnmatched,
		ProgramMisses: s.ProgramMisses, TaskEntries: s.Misc.TaskLost}
	return r
}

func syscallReports(s *trace.Snapshot) map[string]SyscallReport {
	out := map[string]SyscallReport{}
	for nr := range s.Syscalls {
		st := &s.Syscalls[nr]
		if st.Count == 0 {
			continue
		}
		out[trace.SyscallName(nr)] = SyscallReport{
			Nr: nr, Count: st.Count, Errors: st.Errors, TotalNs: st.TotalNs, AvgNs: st.TotalNs / st.Count,
			MinNs: s.MinMax[nr].MinNs, MaxNs: s.MinMax[nr].MaxNs, Bytes: st.Bytes, LatencyNs: NewHistogram(st.Hist[:]),
		}
	}
	return out
}

func copyReport(s *trace.Snapshot) CopyReport {
	split := func(src trace.Source) CopySplit {
		return CopySplit{
			UserToKernelBytes: s.Bytes(src, trace.UserToKernel, trace.ClassCopy),
			KernelToUserBytes: s.Bytes(src, trace.KernelToUser, trace.ClassCopy),
			DirectWriteBytes:  s.Bytes(src, trace.UserToKernel, trace.ClassDirect),
			DirectReadBytes:   s.Bytes(src, trace.KernelToUser, trace.ClassDirect),
			ZeroCopyBytes:     s.Bytes(src, trace.UserToKernel, trace.ClassZeroCopy) + s.Bytes(src, trace.KernelToUser, trace.ClassZeroCopy),
			KernelCopyBytes:   s.Bytes(src, trace.KernelToKernel, trace.ClassCopy),
			Ops:               s.Ops(src),
		}
	}
	return CopyReport{
		UserToKernelBytes: s.UserToKernelBytes(), KernelToUserBytes: s.KernelToUserBytes(),
		DirectBytes: s.DirectBytes(), ZeroCopyBytes: s.ZeroCopyBytes(), KernelCopyBytes: s.KernelCopyBytes(),
		Syscalls: split(trace.SourceSyscall), IOURing: split(trace.SourceIOURing),
	}
}

func uringReports(s *trace.Snapshot) map[string]URingReport {
	out := map[string]URingReport{}
	for op := range s.URing {
		u := &s.URing[op]
		if u.Submitted == 0 && u.Completed == 0 {
			continue
		}
		out[trace.URingOpName(op)] = URingReport{
			Op: op, Submitted: u.Submitted, Completed: u.Completed, Errors: u.Errors, Bytes: u.Bytes,
			FixedRequests: u.FixedReqs, FixedBytes: u.FixedBytes, DirectBytes: u.DirectBytes,
			ZeroCopyBytes: u.ZerocopyBytes, LatencyNs: NewHistogram(u.Hist[:]),
		}
	}
	return out
}

func engineReport(s *trace.Snapshot, st trace.EngineStatus) EngineReport {
	e := &s.Engine
	r := EngineReport{
		Present: st.Present, Reason: st.Reason, Binaries: st.Binaries,
		Batches: e.SubmitBatches, Transfers: e.SubmitTransfers, Bytes: e.SubmitBytes,
		ReapedBatches: e.ReapBatches, Completions: e.ReapCompletions, CompletedBytes: e.ReapBytes,
		Errors: e.ReapErrors, BatchTransfers: NewHistogram(e.BatchHist[:]),
	}
	for p := range e.PathBatches {
		if e.PathBatches[p] == 0 {
			continue
		}
		if r.Paths == nil {
			r.Paths = map[string]EnginePath{}
		}
		r.Paths[trace.EnginePathName(p)] = EnginePath{Batches: e.PathBatches[p], Bytes: e.PathBytes[p]}
	}
	return r
}

func filterReport(f trace.Filter) *FilterReport {
	if f.IsZero() {
		return nil
	}
	r := &FilterReport{Syscalls: f.Syscalls, Failed: f.Failed}
	if f.Errno != 0 {
		r.Errno = unix.ErrnoName(f.Errno)
	}
	return r
}

// taskReports groups the per-task rows by task, named after the task's
// last exec when it had one (a forked child keeps its parent's name until
// it execs), else after the name it had at its first counted call.
func taskReports(rows []trace.TaskCount, execs []trace.Exec) []TaskReport {
	if len(rows) == 0 {
		return nil
	}
	execComm := map[int]string{}
	for _, e := range execs {
		execComm[e.PID] = e.Comm
	}
	var out []TaskReport
	for _, row := range rows {
		if len(out) == 0 || out[len(out)-1].ID != row.ID {
			comm, ok := execComm[row.ID]
			if !ok {
				comm = row.Comm
			}
			out = append(out, TaskReport{ID: row.ID, TGID: row.TGID, Comm: comm, Syscalls: map[string]TaskSyscall{}})
		}
		t := &out[len(out)-1]
		t.Count += row.Count
		t.Syscalls[trace.SyscallName(row.Nr)] = TaskSyscall{Count: row.Count, Errors: row.Errors, TotalNs: row.TotalNs}
	}
	return out
}

// TopSyscalls returns the syscall names ordered by total time, then count,
// at most n (n <= 0: all).
func (r *Report) TopSyscalls(n int) []string {
	return topSyscalls(r.Syscalls, func(s SyscallReport) (uint64, uint64) { return s.TotalNs, s.Count }, n)
}

// topSyscalls orders the names of m by total time, then count, then name
// (weight gives both), and keeps at most n (n <= 0: all). One ordering for
// the whole-process table and each task's.
func topSyscalls[V any](m map[string]V, weight func(V) (totalNs, count uint64), n int) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		at, ac := weight(m[names[i]])
		bt, bc := weight(m[names[j]])
		if at != bt {
			return at > bt
		}
		if ac != bc {
			return ac > bc
		}
		return names[i] < names[j]
	})
	if n > 0 && len(names) > n {
		names = names[:n]
	}
	return names
}
