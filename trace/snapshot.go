package trace

import (
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/bpf"
)

// Snapshot is the counters of one moment, summed over CPUs. All fields are
// cumulative since the tracer started; Sub gives the change between two.
type Snapshot struct {
	Taken    time.Time
	Syscalls [bpf.MaxSyscalls]bpf.HcommSysStat
	Copy     [bpf.CopySlots]bpf.HcommCopyStat
	URing    [bpf.MaxOps]bpf.HcommUringStat
	Faults   bpf.HcommFaultStat
	Engine   bpf.HcommEngineStat
	Misc     bpf.HcommMiscStat
	// ProgramMisses counts probe runs the kernel skipped because the same
	// program was already running on that CPU (recursion protection); a
	// non-zero value means counts are low by up to that much.
	ProgramMisses uint64
}

// words views a struct made only of uint64 fields and arrays (every map
// value type of hcomm.bpf.c; snapshot_test.go checks it) as a slice, so sums
// and differences need no per-field code.
func words[T any](p *T) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), unsafe.Sizeof(*p)/8)
}

func addWords[T any](dst *T, src *T) {
	d, s := words(dst), words(src)
	for i := range d {
		d[i] += s[i]
	}
}

func subWords[T any](dst *T, src *T) {
	d, s := words(dst), words(src)
	for i := range d {
		d[i] -= s[i]
	}
}

// Sub returns s minus prev: what happened between the two snapshots.
func (s *Snapshot) Sub(prev *Snapshot) *Snapshot {
	d := *s
	if prev == nil {
		return &d
	}
	for i := range d.Syscalls {
		subWords(&d.Syscalls[i], &prev.Syscalls[i])
	}
	for i := range d.Copy {
		subWords(&d.Copy[i], &prev.Copy[i])
	}
	for i := range d.URing {
		subWords(&d.URing[i], &prev.URing[i])
	}
	subWords(&d.Faults, &prev.Faults)
	subWords(&d.Engine, &prev.Engine)
	subWords(&d.Misc, &prev.Misc)
	d.ProgramMisses -= prev.ProgramMisses
	return &d
}

// CopyBytes returns the bytes of one copy_stats slot (source, direction,
// class: bpf.Src*, bpf.Dir*, bpf.Class*).
func (s *Snapshot) CopyBytes(src, dir, class int) uint64 {
	return s.Copy[bpf.CopyIndex(src, dir, class)].Bytes
}

// SyscallCount is the number of completed calls of syscall nr.
func (s *Snapshot) SyscallCount(nr int) uint64 {
	if nr < 0 || nr >= len(s.Syscalls) {
		return 0
	}
	return s.Syscalls[nr].Count
}
