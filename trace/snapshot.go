package trace

import (
	"cmp"
	"slices"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/bpf"
)

// Snapshot is the counters of one moment, summed over CPUs. All fields are
// cumulative since the tracer started; Sub gives the change between two.
type Snapshot struct {
	Taken    time.Time
	Syscalls [bpf.MaxSyscalls]bpf.SysStat
	// MinMax is the fastest and slowest call of each syscall since the
	// tracer started (0: none); Sub keeps the later snapshot's.
	MinMax [bpf.MaxSyscalls]bpf.SysMinmax
	// Tasks is the per-process or per-thread breakdown of the syscall table
	// (Options.By), ordered by ID then syscall number; nil when off.
	Tasks  []TaskCount
	Copy   [bpf.CopySlots]bpf.CopyStat
	URing  [bpf.MaxOps]bpf.UringStat
	Faults bpf.FaultStat
	Engine bpf.EngineStat
	Misc   bpf.MiscStat
	// ProgramMisses counts probe runs the kernel skipped because the same
	// program was already running on that CPU (recursion protection); a
	// non-zero value means counts are low by up to that much.
	ProgramMisses uint64
}

// TaskCount is one process's (or thread's) calls of one syscall.
type TaskCount struct {
	ID      int    // thread group id (ByProcess) or thread id (ByThread)
	TGID    int    // its thread group
	Comm    string // the task's name at its first counted call
	Nr      int    // syscall number
	Count   uint64
	Errors  uint64
	TotalNs uint64
}

func compareTasks(a, b TaskCount) int {
	if c := cmp.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	return cmp.Compare(a.Nr, b.Nr)
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
	d.Tasks = subTasks(s.Tasks, prev.Tasks)
	subWords(&d.Faults, &prev.Faults)
	subWords(&d.Engine, &prev.Engine)
	subWords(&d.Misc, &prev.Misc)
	d.ProgramMisses -= prev.ProgramMisses
	return &d
}

// subTasks returns cur minus prev per (ID, syscall), dropping rows that did
// not change. Both are ordered by compareTasks.
func subTasks(cur, prev []TaskCount) []TaskCount {
	if cur == nil {
		return nil
	}
	out := make([]TaskCount, 0, len(cur))
	for _, c := range cur {
		if i, ok := slices.BinarySearchFunc(prev, c, compareTasks); ok {
			p := prev[i]
			c.Count -= p.Count
			c.Errors -= p.Errors
			c.TotalNs -= p.TotalNs
		}
		if c.Count != 0 {
			out = append(out, c)
		}
	}
	return out
}

// Source says which mechanism moved bytes: the copying system calls or
// io_uring requests.
type Source int

// Sources.
const (
	SourceSyscall Source = bpf.SrcSyscall
	SourceIOURing Source = bpf.SrcURing
)

// Sources lists every Source, for loops.
var Sources = []Source{SourceSyscall, SourceIOURing}

func (s Source) String() string {
	if s == SourceIOURing {
		return "io_uring"
	}
	return "syscall"
}

// Direction says where bytes went.
type Direction int

// Directions.
const (
	UserToKernel Direction = bpf.DirUserToKernel // write, send
	KernelToUser Direction = bpf.DirKernelToUser // read, recv
	// KernelToKernel is data the kernel moved on the process's behalf with
	// no user buffer: copy_file_range, sendfile, splice (and io_uring
	// SPLICE). Counted in class ClassCopy.
	KernelToKernel Direction = bpf.DirKernelToKernel
)

// Directions lists every Direction, for loops.
var Directions = []Direction{UserToKernel, KernelToUser, KernelToKernel}

func (d Direction) String() string {
	switch d {
	case KernelToUser:
		return "kernel_to_user"
	case KernelToKernel:
		return "kernel_to_kernel"
	}
	return "user_to_kernel"
}

// Class says how bytes moved.
type Class int

// Classes.
const (
	ClassCopy     Class = bpf.ClassCopy     // a CPU copied them
	ClassDirect   Class = bpf.ClassDirect   // O_DIRECT on a regular file or block device: DMA
	ClassZeroCopy Class = bpf.ClassZeroCopy // MSG_ZEROCOPY, SEND_ZC, SENDMSG_ZC, RECV_ZC
)

// Classes lists every Class, for loops.
var Classes = []Class{ClassCopy, ClassDirect, ClassZeroCopy}

func (c Class) String() string {
	switch c {
	case ClassDirect:
		return "direct"
	case ClassZeroCopy:
		return "zerocopy"
	}
	return "copy"
}

// Bytes returns the bytes moved by one source in one direction and class.
func (s *Snapshot) Bytes(src Source, dir Direction, class Class) uint64 {
	return s.Copy[bpf.CopyIndex(int(src), int(dir), int(class))].Bytes
}

// Ops returns how many calls or requests of src moved data.
func (s *Snapshot) Ops(src Source) uint64 {
	var n uint64
	for _, dir := range Directions {
		for _, class := range Classes {
			n += s.Copy[bpf.CopyIndex(int(src), int(dir), int(class))].Ops
		}
	}
	return n
}

// bothSources sums one (direction, class) over the copying system calls and
// io_uring requests.
func (s *Snapshot) bothSources(dir Direction, class Class) uint64 {
	return s.Bytes(SourceSyscall, dir, class) + s.Bytes(SourceIOURing, dir, class)
}

// UserToKernelBytes is the bytes a CPU copied from user to kernel memory
// (write, send and their io_uring requests on files without O_DIRECT),
// over system calls and io_uring together.
func (s *Snapshot) UserToKernelBytes() uint64 {
	return s.bothSources(UserToKernel, ClassCopy)
}

// KernelToUserBytes is the bytes a CPU copied from kernel to user memory
// (read, recv and their io_uring requests), over system calls and io_uring.
func (s *Snapshot) KernelToUserBytes() uint64 {
	return s.bothSources(KernelToUser, ClassCopy)
}

// CopiedBytes is UserToKernelBytes + KernelToUserBytes: every byte a CPU
// copied between user and kernel memory.
func (s *Snapshot) CopiedBytes() uint64 { return s.UserToKernelBytes() + s.KernelToUserBytes() }

// DirectBytes is the bytes moved by DMA without a CPU copy (O_DIRECT on a
// regular file or block device), both directions, system calls and io_uring.
func (s *Snapshot) DirectBytes() uint64 {
	return s.bothSources(UserToKernel, ClassDirect) + s.bothSources(KernelToUser, ClassDirect)
}

// ZeroCopyBytes is the bytes of zero-copy sends and receives (MSG_ZEROCOPY,
// io_uring SEND_ZC, SENDMSG_ZC, RECV_ZC).
func (s *Snapshot) ZeroCopyBytes() uint64 {
	return s.bothSources(UserToKernel, ClassZeroCopy) + s.bothSources(KernelToUser, ClassZeroCopy)
}

// KernelCopyBytes is the bytes the kernel moved for the process without a
// user buffer (copy_file_range, sendfile, splice, io_uring SPLICE): data
// that never crossed the user/kernel boundary, whatever the kernel did
// with it inside (a copy, a page reference, a reflink).
func (s *Snapshot) KernelCopyBytes() uint64 {
	return s.bothSources(KernelToKernel, ClassCopy)
}

// SyscallCount is the number of completed calls of syscall nr.
func (s *Snapshot) SyscallCount(nr int) uint64 {
	if nr < 0 || nr >= len(s.Syscalls) {
		return 0
	}
	return s.Syscalls[nr].Count
}

// SyscallCounts maps the name of every syscall that ran to its count.
func (s *Snapshot) SyscallCounts() map[string]uint64 {
	m := map[string]uint64{}
	for nr := range s.Syscalls {
		if c := s.Syscalls[nr].Count; c != 0 {
			m[SyscallName(nr)] = c
		}
	}
	return m
}
