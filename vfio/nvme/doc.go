// Package nvme is a user-space NVMe driver over a vfio.Device (kernel VFIO,
// container/group, type1v2 IOMMU): no cgo, no kernel block layer. It is the
// first device hcomm drives that somebody else specified and implemented.
// The specification itself (registers, entry layouts, identify data, PRP
// lists, the status field) is package vfio/nvme/spec; this package is the
// driver.
//
// # What it does
//
// Open resets and enables the controller (CC.EN 1→0→1, each step bounded by
// CAP.TO), sets up the admin queue pair, reads Identify Controller and
// Identify Namespace (LBA size, capacity, MDTS, ONCS), asks for the number
// of I/O queues (Set Features) and creates the I/O completion/submission
// queue pairs. Everything the controller reads or writes — queues, PRP
// lists, identify data — lives in one hugepage arena the driver maps into
// the caller's vfio.DMASpace, at IOVAs the IOMMU translates; data buffers
// are the caller's, mapped in the same DMA space.
//
// Queue is one submission/completion pair with a fixed number of command
// slots (Depth-1, so the submission ring never overflows). Submit and
// SubmitTransfer write entries; Ring writes the tail doorbell once for a
// batch; Reap collects completions by phase tag and writes the head
// doorbell once. With Config.Interrupts each queue has its own MSI-X
// vector routed to an eventfd (Queue.EventFD, Queue.Wait); otherwise the
// queues are polled.
//
// SubmitTransfer validates before it builds a command: offset and length
// are whole logical blocks inside the namespace, the length is within MDTS,
// the buffer is dword aligned and inside a DMA mapping with the right
// access (or inside the CMB). It then builds PRP1/PRP2 and, for a transfer
// over more than two pages, a PRP list in the command slot's own list area
// (BuildPRP; chained list pages for transfers over 2 MiB). Flush, Write
// Zeroes and Dataset Management (deallocate) are offered when the controller
// has them (ONCS).
//
// # Errors and recovery
//
// A completion's 15-bit status field is a Status (spec.Status); StatusErr turns an error
// status into a *StatusError that errors.Is matches against ErrStatus, the
// sentinel of its code (ErrInvalidOpcode, ErrInvalidField, ErrDataTransfer,
// ErrAborted, ErrInternal, ErrInvalidNamespace, ErrCommandSequence,
// ErrInvalidPRPOffset, ErrLBAOutOfRange, ErrCapacityExceeded,
// ErrNamespaceNotReady, ErrInvalidQueue, ErrInvalidInterruptVec,
// ErrAbortLimitExceeded, ErrConflictingAttributes, ErrWriteToReadOnlyRange,
// ErrWriteFault, ErrUnrecoveredRead, ErrProtection, ErrCompareFailure,
// ErrAccessDenied, ErrPath) and its class (ErrCommandSpecific, ErrMedia).
// The driver's own errors: ErrNotNVMe, ErrNotReady, ErrFatal,
// ErrBadTransfer, ErrQueueFull, ErrTimeout, ErrReset, ErrClosed, ErrNoCMB,
// ErrNotSupported (ErrClosed and ErrNotSupported are hcomm's shared
// sentinels, the same values as vfio's and engine's); vfio.ErrNotMapped
// (wrapped) for a buffer outside the DMA mappings.
//
// Abort sends the admin Abort command (the controller may decline; the
// command still completes once). Reset is the recovery: it disables the
// controller, collects the completions already posted, completes every
// command still outstanding with ErrReset (each exactly once, through
// Reap) and enables the controller again with the same queues. Queue.Expired
// tells a caller when a command has been outstanding too long.
//
// # Controller Memory Buffer
//
// EnableCMB follows NVMe 1.4: CMBLOC and CMBSZ read zero until CMBMSC.CRE is
// set; the driver then maps the CMB's BAR (CMB.Bytes, for the CPU) and sets
// CMBMSC.CMSE with the BAR's bus address as the controller base address, so
// that a PRP inside [CMB.Addr(0), +Size) names the CMB: a Read or Write
// then moves data between the namespace and the controller's own memory.
//
// The VM tests (vm_test.go, make test-vm) run all of this on QEMU's NVMe
// controller behind the vIOMMU and cross-check the data with the kernel's
// nvme driver; see docs/nvme.md.
package nvme
