// Package nvme is the engine backend over the user-space NVMe driver
// (vfio/nvme): the engine moves data between its host blocks and an NVMe
// namespace, whose bytes are device locations (engine.DeviceAt(off), off a
// byte offset on the namespace, LBA-aligned).
//
//	dev, _ := vfio.OpenPCI("0000:00:03.0") // an NVMe controller bound to vfio-pci
//	b, _ := nvme.New(dev, nvme.Config{CloseDevice: true})
//	eng, _ := engine.Open(engine.Config{Backend: b})
//	eng.Submit(engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(0), Len: blk.Len()})
//
// One I/O queue pair serves the engine: Forward writes one submission entry
// (PRP list in the command slot's own page when the transfer spans more
// than two pages), Flush rings the tail doorbell once per batch, Reap takes
// completions by phase tag and rings the head doorbell once. While
// Config.DeferDoorbell commands or more are at the controller, Flush leaves
// the tail doorbell to the next Reap, which rings once for every command
// forwarded since (a transfer submitted per call then costs no MMIO store
// of its own). The readiness
// fd is the queue's MSI-X eventfd (Config.Polled: none, the engine polls).
// Every pool arena is DMA-mapped into the controller's IOMMU domain once
// (MapArena), so a transfer maps nothing.
//
// Prepare checks what the controller would refuse: host↔namespace only,
// lengths and namespace offsets in whole logical blocks (Description.Align
// is the LBA size), within MDTS (Description.MaxTransfer) and the namespace
// (Description.DeviceMemory). A command outstanding longer than
// Config.Timeout makes Check reset the controller: every transfer in flight
// completes exactly once — those the controller finished before the reset
// as they finished, the rest with backend.ErrTimeout; Cancel (Close) resets
// it too and reports what did not finish as canceled (backend.ErrCanceled).
//
// Errors: error completions come back as engine errors wrapping
// backend.ErrDevice and the driver's *nvme.StatusError (errors.Is with
// vfio/nvme's sentinels, e.g. nvme.ErrLBAOutOfRange), preformatted at
// Attach so that Err allocates nothing.
package nvme
