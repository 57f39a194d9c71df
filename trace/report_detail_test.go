package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/bpf"
)

func TestKernelCopyAndFaultsInReport(t *testing.T) {
	s := sampleSnapshot()
	s.Copy[bpf.CopyIndex(bpf.SrcSyscall, bpf.DirKernelToKernel, bpf.ClassCopy)] = bpf.CopyStat{Ops: 3, Bytes: 3000}
	s.Copy[bpf.CopyIndex(bpf.SrcURing, bpf.DirKernelToKernel, bpf.ClassCopy)] = bpf.CopyStat{Ops: 1, Bytes: 10}
	s.Faults = bpf.FaultStat{Total: 10, Write: 3, Instr: 2}
	s.MinMax[SyscallNumber("write")] = bpf.SysMinmax{MinNs: 7, MaxNs: 9000}
	if got := s.KernelCopyBytes(); got != 3010 {
		t.Errorf("KernelCopyBytes = %d, want 3010", got)
	}
	r := NewReport(s, Meta{Mode: "run"})
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
	if r.SchemaVersion != ReportSchemaVersion || r.Filter != nil || r.By != "" || r.Tasks != nil {
		t.Errorf("schema %d, filter %v, by %q, tasks %v", r.SchemaVersion, r.Filter, r.By, r.Tasks)
	}
}

func TestTaskReportsAndSub(t *testing.T) {
	// This architecture's numbers (read < write < execve on both tables).
	read, write, execve := SyscallNumber("read"), SyscallNumber("write"), SyscallNumber("execve")
	prev := []TaskCount{{ID: 10, TGID: 10, Comm: "sh", Nr: write, Count: 2, TotalNs: 20}}
	cur := []TaskCount{
		{ID: 10, TGID: 10, Comm: "sh", Nr: write, Count: 5, TotalNs: 50},
		{ID: 10, TGID: 10, Comm: "sh", Nr: read, Count: 1, TotalNs: 1},
		{ID: 12, TGID: 12, Comm: "sh", Nr: execve, Count: 1, TotalNs: 9},
		{ID: 12, TGID: 12, Comm: "sh", Nr: write, Count: 4, Errors: 1, TotalNs: 8},
	}
	// Snapshot rows are sorted by (ID, Nr).
	cur = []TaskCount{cur[1], cur[0], cur[3], cur[2]}
	d := subTasks(cur, prev)
	if len(d) != 4 || d[1].Count != 3 || d[1].TotalNs != 30 {
		t.Fatalf("subTasks = %+v", d)
	}
	same := subTasks(cur, cur)
	if len(same) != 0 {
		t.Errorf("no change should give no rows: %+v", same)
	}
	r := NewReport(&Snapshot{Tasks: cur}, Meta{By: ByProcess, Execs: []Exec{{PID: 12, Comm: "tar"}}})
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

func TestFilterVarsAndReport(t *testing.T) {
	tests := []struct {
		name   string
		f      Filter
		mode   uint32
		report string
		err    bool
	}{
		{"none", Filter{}, 0, "<nil>", false},
		{"names", Filter{Syscalls: []string{"write", "io_uring_enter"}}, bpf.SysFilterNames, "&{[write io_uring_enter] false }", false},
		{"failed", Filter{Failed: true}, bpf.SysFilterFailed, "&{[] true }", false},
		{"errno", Filter{Errno: unix.ENOENT}, bpf.SysFilterErrno, "&{[] false ENOENT}", false},
		{"unknown", Filter{Syscalls: []string{"wirte"}}, 0, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]any{}
			err := filterVars(tc.f, vars)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				return
			}
			if vars["sys_filter"] != tc.mode {
				t.Errorf("sys_filter = %v, want %d", vars["sys_filter"], tc.mode)
			}
			if got := fmt.Sprint(filterReport(tc.f)); got != tc.report {
				t.Errorf("filterReport = %s, want %s", got, tc.report)
			}
			if tc.name == "names" {
				set := vars["syscall_set"].([bpf.MaxSyscalls / 64]uint64)
				w := SyscallNumber("write") // this architecture's number
				if set[w/64] != 1<<(w%64) || set[426/64] != 1<<(426%64) {
					t.Errorf("syscall_set = %x", set)
				}
			}
		})
	}
}

func TestIntervalLineAndJSON(t *testing.T) {
	var quiet Snapshot
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

// TestRemoveStaleCgroups: an empty hcomm-trace cgroup whose tracer is gone
// is removed; one of a live tracer, or with a process inside, stays.
func TestRemoveStaleCgroups(t *testing.T) {
	requireTracing(t)
	mnt, err := Cgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	const name = "hcomm-trace-staletest"
	stale := filepath.Join(mnt, fmt.Sprintf("%s-%d-0", name, dead.Process.Pid))
	live := filepath.Join(mnt, fmt.Sprintf("%s-%d-0", name, os.Getppid()))
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(d)
	}
	removed := RemoveStaleCgroups(mnt, name)
	if len(removed) != 1 || removed[0] != stale {
		t.Errorf("removed %v, want [%s]", removed, stale)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live tracer's cgroup was removed: %v", err)
	}
}

func TestParseStatusAndAttachErrors(t *testing.T) {
	st := parseStatus("Name:\tx\nState:\tZ (zombie)\nTgid:\t12\nPid:\t13\n")
	if st["State"] != "Z (zombie)" || st["Tgid"] != "12" || st["Pid"] != "13" {
		t.Errorf("parseStatus = %v", st)
	}
	if err := checkAttachable(os.Getpid()); err != nil {
		t.Errorf("checkAttachable(self) = %v", err)
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, e := range tasks {
		if e.Name() == fmt.Sprint(os.Getpid()) {
			continue
		}
		var tid int
		fmt.Sscan(e.Name(), &tid)
		if err := checkAttachable(tid); !errors.Is(err, ErrNotProcess) {
			t.Errorf("checkAttachable(thread %d) = %v, want ErrNotProcess", tid, err)
		}
		break
	}
}
