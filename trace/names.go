package trace

import (
	"fmt"
	"strconv"

	"github.com/hcomm-go/hcomm/bpf"
)

// SyscallName names a system call number of this architecture (the
// kernel's tables differ: arm64 uses the generic one, without open, stat,
// fork or poll) ("syscall_NNN" when unknown,
// "other" for the overflow slot).
func SyscallName(nr int) string {
	if n, ok := syscallNames[nr]; ok {
		return n
	}
	if nr == bpf.MaxSyscalls-1 {
		return "other"
	}
	return "syscall_" + strconv.Itoa(nr)
}

// ParseSyscalls returns the numbers of the named syscalls; an unknown name
// is an error that says so.
func ParseSyscalls(names []string) ([]int, error) {
	nrs := make([]int, 0, len(names))
	for _, n := range names {
		nr := SyscallNumber(n)
		if nr < 0 || nr >= bpf.MaxSyscalls {
			return nil, fmt.Errorf("trace: unknown syscall %q", n)
		}
		nrs = append(nrs, nr)
	}
	return nrs, nil
}

// SyscallNumber is the inverse of SyscallName (-1 when unknown).
func SyscallNumber(name string) int {
	for nr, n := range syscallNames {
		if n == name {
			return nr
		}
	}
	return -1
}

// uringOps are the io_uring opcode names (enum io_uring_op, include/uapi/linux/io_uring.h).
var uringOps = [...]string{
	"NOP", "READV", "WRITEV", "FSYNC", "READ_FIXED", "WRITE_FIXED", "POLL_ADD", "POLL_REMOVE",
	"SYNC_FILE_RANGE", "SENDMSG", "RECVMSG", "TIMEOUT", "TIMEOUT_REMOVE", "ACCEPT", "ASYNC_CANCEL",
	"LINK_TIMEOUT", "CONNECT", "FALLOCATE", "OPENAT", "CLOSE", "FILES_UPDATE", "STATX", "READ",
	"WRITE", "FADVISE", "MADVISE", "SEND", "RECV", "OPENAT2", "EPOLL_CTL", "SPLICE",
	"PROVIDE_BUFFERS", "REMOVE_BUFFERS", "TEE", "SHUTDOWN", "RENAMEAT", "UNLINKAT", "MKDIRAT",
	"SYMLINKAT", "LINKAT", "MSG_RING", "FSETXATTR", "SETXATTR", "FGETXATTR", "GETXATTR", "SOCKET",
	"URING_CMD", "SEND_ZC", "SENDMSG_ZC", "READ_MULTISHOT", "WAITID", "FUTEX_WAIT", "FUTEX_WAKE",
	"FUTEX_WAITV", "FIXED_FD_INSTALL", "FTRUNCATE", "BIND", "LISTEN", "RECV_ZC", "EPOLL_WAIT",
	"READV_FIXED", "WRITEV_FIXED", "PIPE",
}

// URingOpName names an io_uring opcode; bpf.OpAux is "AUX" (completions
// without a request of their own, zero-copy notifications, opcodes beyond it).
func URingOpName(op int) string {
	if op == bpf.OpAux {
		return "AUX"
	}
	if op >= 0 && op < len(uringOps) {
		return uringOps[op]
	}
	return "OP_" + strconv.Itoa(op)
}
