package trace

import (
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/internal/bpf"
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
)

// Directions lists every Direction, for loops.
var Directions = []Direction{UserToKernel, KernelToUser}

func (d Direction) String() string {
	if d == KernelToUser {
		return "kernel_to_user"
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
