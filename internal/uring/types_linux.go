//go:build ignore

// Input to internal/cmd/godefs (`go tool cgo -godefs`, see gen.go): the
// io_uring structs and constants of linux/io_uring.h, turned into the pure-Go
// zuring_linux_$GOARCH.go (one per architecture), the way golang.org/x/sys/unix generates its types.
// Nothing here is compiled into the package; regenerate with `make generate`
// (needs gcc and the kernel headers, Debian's linux-libc-dev). Constants newer
// than the headers the generator reads (Debian bookworm's are 6.1) live, with
// the kernel release that added each, in newconst_linux.go.

package uring

/*
#include <linux/io_uring.h>
#include <linux/time_types.h>
*/
import "C"

type sqe C.struct_io_uring_sqe
type cqe C.struct_io_uring_cqe
type uringParams C.struct_io_uring_params
type sqringOffsets C.struct_io_sqring_offsets
type cqringOffsets C.struct_io_cqring_offsets
type probeHeader C.struct_io_uring_probe
type probeOp C.struct_io_uring_probe_op
type rsrcUpdate C.struct_io_uring_rsrc_update
type rsrcRegister C.struct_io_uring_rsrc_register
type rsrcUpdate2 C.struct_io_uring_rsrc_update2
type kernelTimespec C.struct___kernel_timespec
type geteventsArg C.struct_io_uring_getevents_arg

const (
	sizeofSQE         = C.sizeof_struct_io_uring_sqe
	sizeofCQE         = C.sizeof_struct_io_uring_cqe
	sizeofProbeHeader = C.sizeof_struct_io_uring_probe
	sizeofProbeOp     = C.sizeof_struct_io_uring_probe_op
)

// Opcodes.
const (
	opNop            = C.IORING_OP_NOP
	opReadv          = C.IORING_OP_READV
	opWritev         = C.IORING_OP_WRITEV
	opFsync          = C.IORING_OP_FSYNC
	opReadFixed      = C.IORING_OP_READ_FIXED
	opWriteFixed     = C.IORING_OP_WRITE_FIXED
	opPollAdd        = C.IORING_OP_POLL_ADD
	opPollRemove     = C.IORING_OP_POLL_REMOVE
	opSyncFileRange  = C.IORING_OP_SYNC_FILE_RANGE
	opSendmsg        = C.IORING_OP_SENDMSG
	opRecvmsg        = C.IORING_OP_RECVMSG
	opTimeout        = C.IORING_OP_TIMEOUT
	opTimeoutRemove  = C.IORING_OP_TIMEOUT_REMOVE
	opAccept         = C.IORING_OP_ACCEPT
	opAsyncCancel    = C.IORING_OP_ASYNC_CANCEL
	opLinkTimeout    = C.IORING_OP_LINK_TIMEOUT
	opConnect        = C.IORING_OP_CONNECT
	opFallocate      = C.IORING_OP_FALLOCATE
	opOpenat         = C.IORING_OP_OPENAT
	opClose          = C.IORING_OP_CLOSE
	opFilesUpdate    = C.IORING_OP_FILES_UPDATE
	opStatx          = C.IORING_OP_STATX
	opRead           = C.IORING_OP_READ
	opWrite          = C.IORING_OP_WRITE
	opFadvise        = C.IORING_OP_FADVISE
	opMadvise        = C.IORING_OP_MADVISE
	opSend           = C.IORING_OP_SEND
	opRecv           = C.IORING_OP_RECV
	opOpenat2        = C.IORING_OP_OPENAT2
	opEpollCtl       = C.IORING_OP_EPOLL_CTL
	opSplice         = C.IORING_OP_SPLICE
	opProvideBuffers = C.IORING_OP_PROVIDE_BUFFERS
	opRemoveBuffers  = C.IORING_OP_REMOVE_BUFFERS
	opTee            = C.IORING_OP_TEE
	opShutdown       = C.IORING_OP_SHUTDOWN
	opRenameat       = C.IORING_OP_RENAMEAT
	opUnlinkat       = C.IORING_OP_UNLINKAT
	opMkdirat        = C.IORING_OP_MKDIRAT
	opSymlinkat      = C.IORING_OP_SYMLINKAT
	opLinkat         = C.IORING_OP_LINKAT
	opMsgRing        = C.IORING_OP_MSG_RING
	opFsetxattr      = C.IORING_OP_FSETXATTR
	opSetxattr       = C.IORING_OP_SETXATTR
	opFgetxattr      = C.IORING_OP_FGETXATTR
	opGetxattr       = C.IORING_OP_GETXATTR
	opSocket         = C.IORING_OP_SOCKET
	opUringCmd       = C.IORING_OP_URING_CMD
	opSendZC         = C.IORING_OP_SEND_ZC
	opSendmsgZC      = C.IORING_OP_SENDMSG_ZC
	opLast           = C.IORING_OP_LAST
)

// io_uring_setup flags.
const (
	setupIOPoll       = C.IORING_SETUP_IOPOLL
	setupSQPoll       = C.IORING_SETUP_SQPOLL
	setupSQAff        = C.IORING_SETUP_SQ_AFF
	setupCQSize       = C.IORING_SETUP_CQSIZE
	setupClamp        = C.IORING_SETUP_CLAMP
	setupAttachWQ     = C.IORING_SETUP_ATTACH_WQ
	setupRDisabled    = C.IORING_SETUP_R_DISABLED
	setupSubmitAll    = C.IORING_SETUP_SUBMIT_ALL
	setupCoopTaskrun  = C.IORING_SETUP_COOP_TASKRUN
	setupTaskrunFlag  = C.IORING_SETUP_TASKRUN_FLAG
	setupSQE128       = C.IORING_SETUP_SQE128
	setupCQE32        = C.IORING_SETUP_CQE32
	setupSingleIssuer = C.IORING_SETUP_SINGLE_ISSUER
	setupDeferTaskrun = C.IORING_SETUP_DEFER_TASKRUN
)

// Features word bits.
const (
	featSingleMmap     = C.IORING_FEAT_SINGLE_MMAP
	featNodrop         = C.IORING_FEAT_NODROP
	featSubmitStable   = C.IORING_FEAT_SUBMIT_STABLE
	featRWCurPos       = C.IORING_FEAT_RW_CUR_POS
	featCurPersonality = C.IORING_FEAT_CUR_PERSONALITY
	featFastPoll       = C.IORING_FEAT_FAST_POLL
	featPoll32Bits     = C.IORING_FEAT_POLL_32BITS
	featSQPollNonfixed = C.IORING_FEAT_SQPOLL_NONFIXED
	featExtArg         = C.IORING_FEAT_EXT_ARG
	featNativeWorkers  = C.IORING_FEAT_NATIVE_WORKERS
	featRsrcTags       = C.IORING_FEAT_RSRC_TAGS
	featCQESkip        = C.IORING_FEAT_CQE_SKIP
	featLinkedFile     = C.IORING_FEAT_LINKED_FILE
)

// SQE flags, enter flags, ring flags, mmap offsets.
const (
	sqeFixedFile      = C.IOSQE_FIXED_FILE
	sqeIODrain        = C.IOSQE_IO_DRAIN
	sqeIOLink         = C.IOSQE_IO_LINK
	sqeIOHardlink     = C.IOSQE_IO_HARDLINK
	sqeAsync          = C.IOSQE_ASYNC
	sqeBufferSelect   = C.IOSQE_BUFFER_SELECT
	sqeCQESkipSuccess = C.IOSQE_CQE_SKIP_SUCCESS

	enterGetevents      = C.IORING_ENTER_GETEVENTS
	enterSQWakeup       = C.IORING_ENTER_SQ_WAKEUP
	enterSQWait         = C.IORING_ENTER_SQ_WAIT
	enterExtArg         = C.IORING_ENTER_EXT_ARG
	enterRegisteredRing = C.IORING_ENTER_REGISTERED_RING

	sqNeedWakeup = C.IORING_SQ_NEED_WAKEUP
	sqCQOverflow = C.IORING_SQ_CQ_OVERFLOW
	sqTaskrun    = C.IORING_SQ_TASKRUN

	offSQRing = C.IORING_OFF_SQ_RING
	offCQRing = C.IORING_OFF_CQ_RING
	offSQEs   = C.IORING_OFF_SQES
)

// Per-opcode flags.
const (
	fsyncDatasync       = C.IORING_FSYNC_DATASYNC
	timeoutAbs          = C.IORING_TIMEOUT_ABS
	timeoutBoottime     = C.IORING_TIMEOUT_BOOTTIME
	timeoutRealtime     = C.IORING_TIMEOUT_REALTIME
	timeoutEtimeSuccess = C.IORING_TIMEOUT_ETIME_SUCCESS
	recvsendPollFirst   = C.IORING_RECVSEND_POLL_FIRST
	recvsendFixedBuf    = C.IORING_RECVSEND_FIXED_BUF
	sendZCReportUsage   = C.IORING_SEND_ZC_REPORT_USAGE
	notifUsageZCCopied  = C.IORING_NOTIF_USAGE_ZC_COPIED
	cqeFBuffer          = C.IORING_CQE_F_BUFFER
	cqeFMore            = C.IORING_CQE_F_MORE
	cqeFSockNonempty    = C.IORING_CQE_F_SOCK_NONEMPTY
	cqeFNotif           = C.IORING_CQE_F_NOTIF
	opSupported         = C.IO_URING_OP_SUPPORTED
)

// io_uring_register opcodes.
const (
	registerBuffers   = C.IORING_REGISTER_BUFFERS
	unregisterBuffers = C.IORING_UNREGISTER_BUFFERS
	registerFiles     = C.IORING_REGISTER_FILES
	unregisterFiles   = C.IORING_UNREGISTER_FILES
	registerEventfd   = C.IORING_REGISTER_EVENTFD
	unregisterEventfd = C.IORING_UNREGISTER_EVENTFD
	registerProbe     = C.IORING_REGISTER_PROBE
	registerRingFds   = C.IORING_REGISTER_RING_FDS
	unregisterRingFds = C.IORING_UNREGISTER_RING_FDS

	registerBuffers2      = C.IORING_REGISTER_BUFFERS2
	registerBuffersUpdate = C.IORING_REGISTER_BUFFERS_UPDATE
	registerFiles2        = C.IORING_REGISTER_FILES2
	registerFilesUpdate2  = C.IORING_REGISTER_FILES_UPDATE2
	rsrcRegisterSparse    = C.IORING_RSRC_REGISTER_SPARSE
)

// ASYNC_CANCEL flags.
const (
	asyncCancelAll = C.IORING_ASYNC_CANCEL_ALL
	asyncCancelFd  = C.IORING_ASYNC_CANCEL_FD
	asyncCancelAny = C.IORING_ASYNC_CANCEL_ANY
)
