package trace

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/bpf"
)

func TestSubTasks(t *testing.T) {
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
}

func TestFilterVars(t *testing.T) {
	tests := []struct {
		name string
		f    Filter
		mode uint32
		err  bool
	}{
		{"none", Filter{}, 0, false},
		{"names", Filter{Syscalls: []string{"write", "io_uring_enter"}}, bpf.SysFilterNames, false},
		{"failed", Filter{Failed: true}, bpf.SysFilterFailed, false},
		{"errno", Filter{Errno: unix.ENOENT}, bpf.SysFilterErrno, false},
		{"unknown", Filter{Syscalls: []string{"wirte"}}, 0, true},
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
