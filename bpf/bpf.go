package bpf

import "github.com/cilium/ebpf"

// Spec returns the programs, maps and configuration variables of this
// architecture's object (hcomm_x86_bpfel.o on amd64, hcomm_arm64_bpfel.o
// on arm64), parsed but not loaded: the loader (package trace) sets the
// variables, drops the programs whose tracepoints the kernel lacks, and
// loads the rest.
func Spec() (*ebpf.CollectionSpec, error) { return loadHcomm() }

// The values of the programs' maps and ring buffer, laid out as
// hcomm.bpf.c declares them (bpf2go generates the structs from the
// object's BTF; layout_test.go checks the array sizes against layout.go).
type (
	SysStat    = hcommSysStat    // sys_stats: per system call number
	SysMinmax  = hcommSysMinmax  // sys_minmax: fastest and slowest call per number
	TaskKey    = hcommTaskKey    // task_sys's key: (task, number)
	TaskStat   = hcommTaskStat   // task_sys's value
	CopyStat   = hcommCopyStat   // copy_stats: per CopyIndex
	UringStat  = hcommUringStat  // uring_stats: per io_uring opcode
	FaultStat  = hcommFaultStat  // fault_stats: user page faults
	EngineStat = hcommEngineStat // engine_stats: the engine's batch hooks
	MiscStat   = hcommMiscStat   // misc_stats: what the programs could not record
	Event      = hcommEvent      // a ring-buffer record (Event* types)
)
