package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/bpf"
	"github.com/hcomm-go/hcomm/trace"
)

func sampleSnapshot() *trace.Snapshot {
	s := &trace.Snapshot{}
	write, read := trace.SyscallNumber("write"), trace.SyscallNumber("read") // this architecture's numbers
	s.Syscalls[write] = bpf.SysStat{Count: 10, Errors: 1, TotalNs: 10000, Bytes: 1000}
	s.Syscalls[write].Hist[10] = 10 // [512, 1K)
	s.Syscalls[read] = bpf.SysStat{Count: 3, TotalNs: 300}
	s.Copy[bpf.CopyIndex(bpf.SrcSyscall, bpf.DirUserToKernel, bpf.ClassCopy)] = bpf.CopyStat{Ops: 9, Bytes: 900}
	s.Copy[bpf.CopyIndex(bpf.SrcSyscall, bpf.DirUserToKernel, bpf.ClassDirect)] = bpf.CopyStat{Ops: 1, Bytes: 4096}
	s.Copy[bpf.CopyIndex(bpf.SrcURing, bpf.DirKernelToUser, bpf.ClassCopy)] = bpf.CopyStat{Ops: 2, Bytes: 50}
	s.URing[5] = bpf.UringStat{Submitted: 4, Completed: 4, Bytes: 400, FixedReqs: 4, FixedBytes: 400}
	s.URing[5].Hist[12] = 4
	s.Engine = bpf.EngineStat{SubmitBatches: 2, SubmitTransfers: 7, SubmitBytes: 7000}
	s.Engine.PathBatches[2] = 2
	s.Engine.PathBytes[2] = 7000
	return s
}

// TestWriteTableDeterministic prints a report with several io_uring
// opcodes, engine paths and equal-time syscalls many times: the text must
// not change (sections that come from maps are sorted).
func TestWriteTableDeterministic(t *testing.T) {
	s := sampleSnapshot()
	for op := 0; op < 8; op++ {
		s.URing[op].Submitted, s.URing[op].Completed = 1, 1
		s.URing[op].Hist[3] = 1
	}
	for nr := 0; nr < 40; nr++ {
		s.Syscalls[nr].Count, s.Syscalls[nr].TotalNs = 2, 100
		s.Syscalls[nr].Hist[5] = 2
	}
	for p := range s.Engine.PathBatches {
		s.Engine.PathBatches[p], s.Engine.PathBytes[p] = 1, 4096
	}
	r := New(s, trace.Meta{Mode: "run", Engine: trace.EngineStatus{Present: true}})
	var first string
	for i := 0; i < 20; i++ {
		var b bytes.Buffer
		if err := WriteTable(&b, r, TableOptions{Histograms: true, Header: true}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = b.String()
		} else if b.String() != first {
			t.Fatalf("run %d printed a different table", i)
		}
	}
	if !strings.Contains(first, "path path(7)") || !strings.Contains(first, "path nvme") {
		t.Errorf("engine paths not named:\n%s", first)
	}
}

func TestHumanPowAndSlots(t *testing.T) {
	tests := []struct {
		v    uint64
		want string
	}{{0, "0"}, {512, "512"}, {1024, "1K"}, {3 << 20, "3M"}, {1 << 30, "1G"}, {1 << 41, "2T"}}
	for _, tc := range tests {
		if got := humanPow(tc.v); got != tc.want {
			t.Errorf("humanPow(%d) = %q, want %q", tc.v, got, tc.want)
		}
	}
	if lo, hi := slotRange(0); lo != 0 || hi != 1 {
		t.Errorf("slot 0 = [%d,%d)", lo, hi)
	}
	if lo, hi := slotRange(11); lo != 1024 || hi != 2048 {
		t.Errorf("slot 11 = [%d,%d)", lo, hi)
	}
}

func TestWriteTableAndJSON(t *testing.T) {
	r := New(sampleSnapshot(), trace.Meta{Mode: "attach", Process: trace.ProcessInfo{PID: 42, Comm: "x"},
		Engine: trace.EngineStatus{Reason: "no symbol"}})
	var tb bytes.Buffer
	if err := WriteTable(&tb, r, TableOptions{Top: 10, Histograms: true, Header: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"attach PID 42 (x)", "write", "WRITE_FIXED", "ENGINE: absent (no symbol)", "@syscall_ns[write]:", "[512, 1K)"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	var jb bytes.Buffer
	if err := WriteJSON(&jb, r); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(jb.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Syscalls, r.Syscalls) || back.Copy != r.Copy {
		t.Error("JSON round trip changed the report")
	}
}

func TestNewReport(t *testing.T) {
	r := New(sampleSnapshot(), trace.Meta{Mode: "run", Engine: trace.EngineStatus{Present: true}})
	w := r.Syscalls["write"]
	if w.Count != 10 || w.Errors != 1 || w.AvgNs != 1000 || w.Bytes != 1000 {
		t.Errorf("write = %+v", w)
	}
	if len(w.LatencyNs) != 1 || w.LatencyNs[0] != (Bucket{Lo: 512, Hi: 1024, Count: 10}) {
		t.Errorf("write histogram = %+v", w.LatencyNs)
	}
	if r.Copy.UserToKernelBytes != 900 || r.Copy.DirectBytes != 4096 || r.Copy.KernelToUserBytes != 50 {
		t.Errorf("copy = %+v", r.Copy)
	}
	if r.Copy.Syscalls.Ops != 10 || r.Copy.IOURing.Ops != 2 {
		t.Errorf("ops = %d, %d", r.Copy.Syscalls.Ops, r.Copy.IOURing.Ops)
	}
	if u := r.IOURing["WRITE_FIXED"]; u.Submitted != 4 || u.FixedBytes != 400 {
		t.Errorf("WRITE_FIXED = %+v", u)
	}
	if r.Engine.Transfers != 7 || r.Engine.Paths["file"].Bytes != 7000 {
		t.Errorf("engine = %+v", r.Engine)
	}
	if got := r.TopSyscalls(1); len(got) != 1 || got[0] != "write" {
		t.Errorf("TopSyscalls(1) = %v", got)
	}
}

func TestIntervalLineAndJSON(t *testing.T) {
	var quiet trace.Snapshot
	quiet.Taken = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b bytes.Buffer
	if err := NewInterval(&quiet, time.Second).WriteLine(&b, 5); err != nil {
		t.Fatal(err)
	}
	if b.String() != "03:04:05 +1s: idle\n" {
		t.Errorf("idle line %q", b.String())
	}
	s := sampleSnapshot()
	s.Taken = quiet.Taken
	iv := NewInterval(s, time.Second)
	b.Reset()
	iv.WriteLine(&b, 1)
	want := "03:04:05 +1s: 13 syscalls (1 failed) write 10 +1 more | copied u->k 900 k->u 50 B, direct 4096 B | io_uring WRITE_FIXED 4 | engine 2 batches 7 transfers 7000 B 0 completions\n"
	if b.String() != want {
		t.Errorf("line\n%q, want\n%q", b.String(), want)
	}
	b.Reset()
	if err := WriteJSONLine(&b, iv); err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.String(), "\n") != 1 {
		t.Errorf("not one line: %q", b.String())
	}
	var back Interval
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Calls != 13 || back.Syscalls["write"] != 10 {
		t.Errorf("round trip: %v %+v", err, back)
	}
}

func TestKernelCopyAndFaultsInReport(t *testing.T) {
	s := sampleSnapshot()
	s.Copy[bpf.CopyIndex(bpf.SrcSyscall, bpf.DirKernelToKernel, bpf.ClassCopy)] = bpf.CopyStat{Ops: 3, Bytes: 3000}
	s.Copy[bpf.CopyIndex(bpf.SrcURing, bpf.DirKernelToKernel, bpf.ClassCopy)] = bpf.CopyStat{Ops: 1, Bytes: 10}
	s.Faults = bpf.FaultStat{Total: 10, Write: 3, Instr: 2}
	s.MinMax[trace.SyscallNumber("write")] = bpf.SysMinmax{MinNs: 7, MaxNs: 9000}
	if got := s.KernelCopyBytes(); got != 3010 {
		t.Errorf("KernelCopyBytes = %d, want 3010", got)
	}
	r := New(s, trace.Meta{Mode: "run"})
	if r.Copy.KernelCopyBytes != 3010 || r.Copy.Syscalls.KernelCopyBytes != 3000 || r.Copy.IOURing.KernelCopyBytes != 10 {
		t.Errorf("copy = %+v", r.Copy)
	}
	if r.Copy.Syscalls.Ops != 13 {
		t.Errorf("syscall ops = %d, want 13 (kernel-internal calls included)", r.Copy.Syscalls.Ops)
	}
	if f := r.PageFaults; f.Read != 5 || f.Write != 3 || f.Instr != 2 {
		t.Errorf("faults = %+v", f)
	}
	if w := r.Syscalls["write"]; w.MinNs != 7 || w.MaxNs != 9000 {
		t.Errorf("write min/max = %d/%d", w.MinNs, w.MaxNs)
	}
	if r.SchemaVersion != SchemaVersion || r.Filter != nil || r.By != "" || r.Tasks != nil {
		t.Errorf("schema %d, filter %v, by %q, tasks %v", r.SchemaVersion, r.Filter, r.By, r.Tasks)
	}
}

func TestTaskReports(t *testing.T) {
	// This architecture's numbers (read < write < execve on both tables).
	read, write, execve := trace.SyscallNumber("read"), trace.SyscallNumber("write"), trace.SyscallNumber("execve")
	// Snapshot rows are sorted by (ID, Nr).
	cur := []trace.TaskCount{
		{ID: 10, TGID: 10, Comm: "sh", Nr: read, Count: 1, TotalNs: 1},
		{ID: 10, TGID: 10, Comm: "sh", Nr: write, Count: 5, TotalNs: 50},
		{ID: 12, TGID: 12, Comm: "sh", Nr: write, Count: 4, Errors: 1, TotalNs: 8},
		{ID: 12, TGID: 12, Comm: "sh", Nr: execve, Count: 1, TotalNs: 9},
	}
	r := New(&trace.Snapshot{Tasks: cur}, trace.Meta{By: trace.ByProcess, Execs: []trace.Exec{{PID: 12, Comm: "tar"}}})
	if r.By != "process" || len(r.Tasks) != 2 {
		t.Fatalf("by %q, tasks %+v", r.By, r.Tasks)
	}
	if a, b := r.Tasks[0], r.Tasks[1]; a.ID != 10 || a.Comm != "sh" || a.Count != 6 || b.Comm != "tar" || b.Count != 5 ||
		b.Syscalls["write"] != (TaskSyscall{Count: 4, Errors: 1, TotalNs: 8}) {
		t.Errorf("tasks = %+v", r.Tasks)
	}
	var tb bytes.Buffer
	if err := WriteTable(&tb, r, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), "2 processes") || !strings.Contains(tb.String(), "tar") {
		t.Errorf("table:\n%s", tb.String())
	}
}

func TestFilterReport(t *testing.T) {
	tests := []struct {
		name   string
		f      trace.Filter
		report string
	}{
		{"none", trace.Filter{}, "<nil>"},
		{"names", trace.Filter{Syscalls: []string{"write", "io_uring_enter"}}, "&{[write io_uring_enter] false }"},
		{"failed", trace.Filter{Failed: true}, "&{[] true }"},
		{"errno", trace.Filter{Errno: unix.ENOENT}, "&{[] false ENOENT}"},
	}
	for _, tc := range tests {
		if got := fmt.Sprint(filterReport(tc.f)); got != tc.report {
			t.Errorf("%s: filterReport = %s, want %s", tc.name, got, tc.report)
		}
	}
}
