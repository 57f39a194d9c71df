package bpf

// Layout constants shared with hcomm.bpf.c (keep in sync; layout_test.go
// checks the ones that show up in generated types).
const (
	// MaxSyscalls is the size of the per-syscall array; syscall numbers at
	// or above it are counted at MaxSyscalls-1.
	MaxSyscalls = 512
	// HistSlots is the number of log2 histogram buckets: slot 0 counts the
	// value 0, slot i (i >= 1) counts values in [2^(i-1), 2^i); the last
	// slot also takes everything larger.
	HistSlots = 40
	// MaxOps is the size of the io_uring per-opcode array.
	MaxOps = 64
	// OpAux is the io_uring slot for completions that have no request of
	// their own (auxiliary CQEs, zero-copy notifications) and for opcodes
	// at or above it.
	OpAux = 63
	// MaxPaths is the number of engine paths counted separately.
	MaxPaths = 8
)

// Filter modes (the filter_mode variable).
const (
	FilterCgroup = 1 // tasks in the cgroup v2 subtree stored at cgroup_map[0]
	FilterTGID   = 2 // the thread group target_tgid
)

// copy_stats indices: CopyIndex(src, dir, class).
const (
	SrcSyscall = 0
	SrcURing   = 1

	DirUserToKernel   = 0
	DirKernelToUser   = 1
	DirKernelToKernel = 2 // no user buffer: copy_file_range, sendfile, splice

	ClassCopy     = 0 // a CPU copied the bytes
	ClassDirect   = 1 // O_DIRECT on a regular file or block device: DMA
	ClassZeroCopy = 2 // MSG_ZEROCOPY, SEND_ZC, RECV_ZC

	CopySlots = 18
)

// CopyIndex is the copy_stats key of (source, direction, class).
func CopyIndex(src, dir, class int) uint32 { return uint32((src*3+dir)*3 + class) }

// Syscall filter bits (the sys_filter variable).
const (
	SysFilterNames  = 1 // only the numbers set in syscall_set
	SysFilterFailed = 2 // only calls that failed
	SysFilterErrno  = 4 // only calls that failed with filter_errno
)

// Per-task breakdown (the by_task variable).
const (
	ByProcess = 1
	ByThread  = 2
)

// Ring buffer event types (HcommEvent.Type).
const (
	EventEngineSubmit = 1
	EventEngineReap   = 2
	EventExec         = 3
)
