// Package edu is a driver for QEMU's "edu" educational PCI device (vendor
// 0x1234, device 0x11e8): the real device, with a real DMA engine behind a
// (virtual) IOMMU, that hcomm's VM tests drive through kernel VFIO. It runs
// on any vfio.Device.
//
// The device (QEMU hw/misc/edu.c, docs/specs/edu.rst), BAR0:
//
//	0x00 ID, reads 0x010000ed (major 1, minor 0, 0xed)
//	0x04 liveness: reads back the bitwise inverse of what was written
//	0x24 interrupt status (0x100: DMA done), 0x64 interrupt acknowledge
//	0x80 DMA source, 0x88 DMA destination, 0x90 DMA count (64-bit)
//	0x98 DMA command: bit 0 start (cleared by the device when done),
//	     bit 1 direction (set: device buffer → RAM), bit 2 interrupt when done
//	0x40000 the device's 4 KiB DMA buffer (reachable only by DMA)
//
// Registers below 0x80 take 32-bit accesses only; the DMA registers take 32
// or 64 bits. The device addresses RAM with a 28-bit DMA mask (IOVAs below
// 256 MiB; QEMU silently truncates higher ones), so IOVAs must come from a
// vfio.DMASpace with DMAMask. Each DMA is at most MaxDMA = 4095 bytes and
// must end inside the buffer: QEMU 7.2's range check rejects a transfer that
// ends exactly at 0x41000 with hw_error, which kills the VM. Copy chunks
// longer transfers. Each DMA takes ~100 ms of QEMU's virtual time: edu is for
// correctness, never for timing.
//
// A DMA from or to an IOVA that the IOMMU does not map is stopped by the
// IOMMU (the data never arrives) but edu itself reports nothing, so the
// driver checks every IOVA against the DMA space (Config.Check) first and
// refuses with vfio.ErrNotMapped; StartUnchecked skips that check, for tests
// that prove the IOMMU blocks the access.
//
// Sentinel errors for errors.Is: ErrNotEdu, ErrBadTransfer, ErrBusy,
// ErrTimeout; vfio.ErrNotMapped from the IOVA check.
package edu
