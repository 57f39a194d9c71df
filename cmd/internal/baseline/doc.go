// Package baseline is the traditional path that hcomm's benchmarks and demo
// compare the engine against: what moving data costs through a plain
// kernel-driver interface, written as well as a careful Go programmer would
// write it without hcomm. No artificial sleeps, no handicaps.
//
// Device (host↔device over the same HDMA device model the engine drives):
// per transfer the data sits in a Go heap buffer; one pwrite(2) copies it
// into a kernel-side staging buffer — a memfd whose pages are DMA-mapped
// into the device, the bounce buffer of a character-device driver, so the
// kernel really copies and eBPF sees the copy; the device is told with one
// descriptor and one doorbell store (what the driver's write handler does
// inside the same call); the caller blocks in read(2) on the device's
// completion eventfd (its MSI) until the device has moved the bytes. The
// way back is the mirror image: descriptor and doorbell, blocking read of
// the eventfd, one pread(2) from the staging buffer into the heap buffer.
//
// Files: WriteAt/ReadAt of one block per call on an *os.File from heap
// memory, buffered (page cache) or O_DIRECT (with a heap buffer aligned by
// over-allocation, as Go O_DIRECT code does), from one goroutine (queue
// depth 1) or from several goroutines at once (the way Go code gets a queue
// depth out of a synchronous API).
//
// Sentinel errors for errors.Is (errors.go): ErrBadConfig, ErrBadTransfer, ErrClosed;
// device completion errors wrap the vfio/hdma sentinels.
package baseline
