package vfio

import "fmt"

// PCI configuration space: the command register and its bits (PCI Local
// Bus Specification 3.0, 6.2.2).
const (
	PCICommand            = 0x04
	PCICommandMemory      = 1 << 1 // respond to memory-space accesses (BARs)
	PCICommandBusMaster   = 1 << 2 // may issue DMA
	PCICommandINTxDisable = 1 << 10
)

// EnableBusMaster sets the memory-space and bus-master bits of the device's
// command register through its configuration region. Without bus mastering
// a device cannot DMA (reset leaves it off, and vfio-pci does not set it).
func EnableBusMaster(dev Device) error {
	return updateCommand(dev, PCICommandMemory|PCICommandBusMaster, 0)
}

// DisableBusMaster clears the bus-master bit: the device can no longer DMA.
func DisableBusMaster(dev Device) error {
	return updateCommand(dev, 0, PCICommandBusMaster)
}

func updateCommand(dev Device, set, clear uint16) error {
	cfg, err := dev.Region(RegionConfig)
	if err != nil {
		return fmt.Errorf("vfio: PCI command register: %w", inner(err))
	}
	cmd, err := cfg.Read16(PCICommand)
	if err != nil {
		return fmt.Errorf("vfio: read PCI command register: %w", inner(err))
	}
	want := cmd&^clear | set
	if want == cmd {
		return nil
	}
	if err := cfg.Write16(PCICommand, want); err != nil {
		return fmt.Errorf("vfio: write PCI command register %#04x: %w", want, inner(err))
	}
	got, err := cfg.Read16(PCICommand)
	if err != nil {
		return fmt.Errorf("vfio: read back PCI command register: %w", inner(err))
	}
	if got&(set|clear) != set {
		return fmt.Errorf("vfio: PCI command register is %#04x after writing %#04x: the device refused: %w", got, want, ErrNotSupported)
	}
	return nil
}
