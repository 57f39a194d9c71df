// Package hdmadev is the engine backend for an HDMA device (docs/hdma.md):
// the HDMA driver (vfio/hdma) over any vfio.Device — the kernel's VFIO, or
// vfio/mock's software device for tests, demos and benchmarks.
//
//	dev, _ := mock.New(mock.Config{})                 // or vfio.OpenPCI(...)
//	be, _ := hdmadev.New(dev, hdmadev.Config{CloseDevice: true})
//	eng, _ := engine.Open(engine.Config{Backend: be})
//
// The backend maps each pool arena into the device's IOMMU once
// (vfio.DMASpace), keeps its queue's rings in a small DMA-mapped arena of
// its own, writes one 64-byte descriptor per transfer and rings one doorbell
// (an SQ_TAIL store) per batch. Transfers host→device of at most the CPU
// threshold are copied by the submitting goroutine straight into device
// memory (BAR2, the CPU path, as GDRCopy does for GPU memory); the
// threshold is measured at Attach unless Config.CPUThreshold sets it. Device
// resets and stalls are recovered (hdma.Driver.Recover) and every transfer
// they catch fails once.
//
// Completion errors wrap backend.ErrDevice and the driver's cause
// (hdma.ErrIOMMUFault, hdma.ErrDevMemBounds, hdma.ErrBadDescriptor,
// hdma.ErrDeviceReset, hdma.ErrDeviceError), backend.ErrTimeout and
// hdma.ErrTimeout for a stalled device, or backend.ErrCanceled and
// hdma.ErrDeviceReset for transfers canceled by Close.
package hdmadev
