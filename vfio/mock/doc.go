// Package mock is vfio-mock: a software HDMA device (the model in
// docs/hdma.md and package vfio/hdma/model) behind the vfio.Device
// interface, so the HDMA driver and the engine run in every test, on every
// machine, unable to tell it from hardware.
//
// What it emulates:
//
//   - BAR0 registers (ID, VERSION, CAPS, DEVMEM_SIZE, STATUS, CONTROL,
//     FAULT_ADDR, MAX_LEN, and per queue SQ/CQ base and size, the SQ_TAIL and
//     CQ_HEAD doorbells and IRQ). A doorbell write takes effect when
//     Write32 returns: the register is stored and the device worker woken.
//   - Submission and completion rings in host memory, addressed by IOVA,
//     processed in order per queue; NVMe-style phase-bit completions; a full
//     completion ring stalls its queue, never drops an entry.
//   - BAR2 device memory (Region(vfio.RegionBAR2).Mapped()).
//   - MSI: one vector per queue, signalled through the eventfds given to
//     SetIRQs with an 8-byte counter increment, as the kernel does. The mock
//     holds a duplicate of each routed eventfd, as the kernel holds a
//     reference, and refuses what is not an eventfd (EINVAL) or closed (EBADF).
//   - An emulated IOMMU: MapDMA builds a translation table, and every device
//     access — descriptor fetch, completion write, data read and write — goes
//     through it with the mapping's permission (DMARead/DMAWrite). A
//     descriptor whose data would touch anything else completes with status
//     1 (IOMMU fault) and FAULT_ADDR holds the first refused address; a ring
//     access that faults halts the device (STATUS.fatal). The whole range is
//     checked before a byte moves, so not one byte outside the map is read
//     or written.
//   - Validation: bad descriptors (unknown opcode or flags, nonzero reserved
//     fields, zero or over-MAX_LEN length, an address range that wraps)
//     complete with status 3; device-memory ranges out of bounds with 2.
//   - Fault injection (InjectFault): per queue and opcode, on the Nth
//     descriptor or at a rate — error completions, added latency, stalls,
//     device reset mid-stream (status 4 for everything in flight).
//   - Counters of everything it did (Counters, QueueCounters) and a log of
//     the faults that fired (Injections).
//
// Data moves with Go's copy (memmove) at memory speed; there is no
// artificial delay unless a latency fault asks for one.
//
// Threading: one worker goroutine per device does all device-side work. The
// doorbell path is lock-free; the worker spins on a doorbell counter for
// Config.Spin after running out of work, then sleeps on a channel until the
// next doorbell (or a latency deadline). See Device. With Config.Inline
// there is no worker: the device works inside the doorbell write, on the
// caller's goroutine.
//
// The mock assumes a little-endian host, as the model is little-endian and
// its registers and completion words are accessed as native words.
//
// Sentinel errors for errors.Is: ErrBadConfig, ErrBadFault, and the vfio
// package's (ErrNoRegion, ErrOutOfRange, ErrMisaligned, ErrIOVAInUse,
// ErrNotMapped, ErrBadMapping, ErrNoIRQ, ErrClosed, ErrNotSupported).
package mock
