package trace

import (
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/bpf"
)

// TestCounterTypesAreAllUint64 guards words(): every map value type must
// be made of uint64 fields and arrays only (plus zero-size markers).
func TestCounterTypesAreAllUint64(t *testing.T) {
	for _, v := range []any{bpf.SysStat{}, bpf.CopyStat{}, bpf.UringStat{}, bpf.FaultStat{},
		bpf.EngineStat{}, bpf.MiscStat{}} {
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			k := f.Type
			if k.Kind() == reflect.Array {
				k = k.Elem()
			}
			if f.Type.Size() != 0 && k.Kind() != reflect.Uint64 {
				t.Errorf("%s.%s is %s, not uint64", typ.Name(), f.Name, f.Type)
			}
		}
	}
}

func sampleSnapshot() *Snapshot {
	s := &Snapshot{}
	write, read := SyscallNumber("write"), SyscallNumber("read") // this architecture's numbers
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

func TestSnapshotSub(t *testing.T) {
	write, read := SyscallNumber("write"), SyscallNumber("read")
	a := sampleSnapshot()
	b := sampleSnapshot()
	b.Syscalls[write].Count += 5
	b.Engine.SubmitBatches += 3
	b.URing[5].Hist[12] += 2
	d := b.Sub(a)
	if d.Syscalls[write].Count != 5 || d.Engine.SubmitBatches != 3 || d.URing[5].Hist[12] != 2 || d.Syscalls[read].Count != 0 {
		t.Errorf("delta: write %d, batches %d, hist %d, read %d", d.Syscalls[write].Count, d.Engine.SubmitBatches, d.URing[5].Hist[12], d.Syscalls[read].Count)
	}
	if a.Syscalls[write].Count != 10 {
		t.Error("Sub modified its argument")
	}
}

func TestNames(t *testing.T) {
	// write's number per architecture: x86-64's own table, arm64's the
	// kernel's generic one; io_uring_enter is 426 on both (the numbers
	// every architecture shares since 424).
	write := map[string]int{"amd64": 1, "arm64": 64}[runtime.GOARCH]
	if SyscallName(write) != "write" || SyscallName(426) != "io_uring_enter" || SyscallName(bpf.MaxSyscalls-1) != "other" {
		t.Errorf("names: %s %s %s", SyscallName(write), SyscallName(426), SyscallName(bpf.MaxSyscalls-1))
	}
	if SyscallNumber("write") != write || SyscallNumber("nope") != -1 {
		t.Error("SyscallNumber")
	}
	if runtime.GOARCH == "arm64" && SyscallNumber("open") != -1 {
		t.Error("arm64 has no open(2): the table is not the generic one")
	}
	if URingOpName(5) != "WRITE_FIXED" || URingOpName(bpf.OpAux) != "AUX" || URingOpName(62) != "PIPE" {
		t.Error("URingOpName")
	}
	if EnginePathName(0) != "dma" || EnginePathName(2) != "file" || EnginePathName(3) != "memory" || EnginePathName(7) != "path(7)" || EnginePathName(4) != "nvme" || EnginePathName(5) != "remote" || EnginePathName(-1) != "path(-1)" {
		t.Error("EnginePathName")
	}
}

func TestParseCgroup2Mount(t *testing.T) {
	tests := []struct {
		name, in, want string
		err            error
	}{
		{"hybrid", "30 25 0:26 / /sys/fs/cgroup/unified rw,relatime shared:6 - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified", nil},
		{"escaped", `30 25 0:26 / /mnt/cg\040two rw - cgroup2 none rw` + "\n", "/mnt/cg two", nil},
		{"v1 only", "31 25 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", "", ErrNoCgroup2},
		{"garbage", "nonsense\n - \n", "", ErrNoCgroup2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCgroup2Mount(strings.NewReader(tc.in))
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func FuzzParseCgroup2Mount(f *testing.F) {
	f.Add("30 25 0:26 / /sys/fs/cgroup/unified rw,relatime shared:6 - cgroup2 cgroup2 rw\n")
	f.Add(`1 2 3:4 / /a\040b\134c rw - cgroup2 x rw`)
	f.Add("\\\\\\ - cgroup2")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseCgroup2Mount(strings.NewReader(in))
		if err == nil && got == "" && !strings.Contains(in, "cgroup2") {
			t.Errorf("found an empty mount point in %q", in)
		}
		if err != nil && !errors.Is(err, ErrNoCgroup2) {
			t.Errorf("unexpected error kind: %v", err)
		}
	})
}

func TestSnapshotAccessors(t *testing.T) {
	s := sampleSnapshot()
	tests := []struct {
		name      string
		got, want uint64
	}{
		{"UserToKernelBytes", s.UserToKernelBytes(), 900},
		{"KernelToUserBytes", s.KernelToUserBytes(), 50},
		{"CopiedBytes", s.CopiedBytes(), 950},
		{"DirectBytes", s.DirectBytes(), 4096},
		{"ZeroCopyBytes", s.ZeroCopyBytes(), 0},
		{"Ops(syscall)", s.Ops(SourceSyscall), 10},
		{"Ops(io_uring)", s.Ops(SourceIOURing), 2},
		{"SyscallCount(write)", s.SyscallCount(SyscallNumber("write")), 10},
		{"SyscallCount(-1)", s.SyscallCount(-1), 0},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if c := s.SyscallCounts(); len(c) != 2 || c["write"] != 10 || c["read"] != 3 {
		t.Errorf("SyscallCounts = %v", c)
	}
}
