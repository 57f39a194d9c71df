// Package hdma is the driver for the HDMA device model (docs/hdma.md,
// package vfio/hdma/model) over any vfio.Device: the kernel VFIO device or
// vfio-mock. It cannot tell them apart.
//
// Life cycle:
//
//	drv, _ := hdma.Open(dev, hdma.Config{})      // identify (ID, VERSION, CAPS), reset
//	q, _ := drv.SetupQueue(hdma.QueueConfig{...}) // rings in caller memory, already DMA-mapped
//	_ = drv.Enable()                              // route MSIs, CONTROL.enable, wait for ready
//	q.Enqueue(desc) ... q.Submit()                // descriptors, then one SQ_TAIL doorbell
//	n := q.Reap(completions)                      // batch reaping, one CQ_HEAD write per batch
//	q.CheckTimeout() / drv.Recover()              // stalls and resets
//
// The rings live in memory the caller provides together with their IOVAs
// (the engine carves them from a hugepage arena it mapped into the IOMMU
// once); the driver never maps memory itself.
//
// Hot path: Enqueue writes one 64-byte descriptor into the submission ring;
// Submit publishes everything enqueued since the last Submit with one 32-bit
// SQ_TAIL store; Reap takes the ready completions (phase bit, through
// ring.CompletionRing) and maps each tag back to the caller's cookie;
// consumed entries return to the device with one CQ_HEAD store per quarter
// ring. None of them allocates or takes a lock; a Queue belongs to one
// goroutine at a time.
//
// Completions carry the caller's User cookie, the device status and bytes
// moved, and Err: nil, or one of the completion errors below. Every
// descriptor completes exactly once: by the device, or — after a reset or a
// timeout — by Recover, which fails what the device did not complete
// (ErrDeviceReset, or ErrTimeout for the descriptor that stalled) and hands
// those completions out through the next Reap calls.
//
// Interrupts: a queue configured with Interrupts gets an eventfd routed to
// its MSI vector; descriptors with Desc.Interrupt set raise it when they
// complete (errors always do), while the queue's IRQ register is on
// (SetInterrupts turns it off while the host polls). Wait with
// WaitInterrupt, or hand EventFD to an io_uring READ.
//
// Sentinel errors for errors.Is (errors.go): ErrNotHDMA, ErrVersion,
// ErrBadConfig, ErrNotReady, ErrFatal, ErrEnabled, ErrClosed (hcomm's
// shared one, the same value as vfio.ErrClosed), ErrQueueFull,
// ErrRecoveryNeeded; completion errors ErrIOMMUFault, ErrDevMemBounds,
// ErrBadDescriptor, ErrDeviceReset, ErrDeviceError, ErrUnknownStatus,
// ErrTimeout. Device errors (vfio's) are wrapped, not replaced.
package hdma
