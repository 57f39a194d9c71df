package nvme

import (
	"fmt"

	"github.com/hcomm-go/hcomm/vfio/nvme/spec"

	"github.com/hcomm-go/hcomm/vfio"
)

// CMB is the controller's Controller Memory Buffer: device memory in one of
// its BARs that the host reads and writes with the CPU (Bytes) and that
// commands may name as their data buffer (Addr), so the data moves between
// the namespace and the controller's own memory without crossing to host
// RAM.
type CMB struct {
	c      *Controller
	region vfio.Region
	mem    []byte
	bir    int
	off    uint64 // offset of the CMB in its BAR
	size   uint64
	sz     uint32 // CMBSZ
	loc    uint32 // CMBLOC
	// cba is the controller memory space base: the bus address of the
	// CMB, which PRPs use to name it.
	cba uint64
}

// EnableCMB makes the Controller Memory Buffer usable (NVMe 1.4): it sets
// CMBMSC.CRE so that CMBLOC and CMBSZ describe it, maps its BAR, and sets
// CMBMSC.CMSE with the BAR's bus address as the controller base address,
// so that PRP entries inside [Addr, Addr+Size) name the CMB. ErrNoCMB when
// CAP.CMBS is clear or the CMB cannot be mapped; the returned CMB stays
// valid until Close (and across Reset, which programs it again).
//
// The bus address range must not collide with IOVAs of host memory mapped
// for the device (the controller would take those for its own memory):
// EnableCMB refuses when it does.
func (c *Controller) EnableCMB() (*CMB, error) {
	if c.cmb != nil {
		return c.cmb, nil
	}
	if !c.cap.CMBS() {
		return nil, fmt.Errorf("%w: CAP.CMBS is clear", ErrNoCMB)
	}
	m := &CMB{c: c}
	if err := c.bar.Write64(spec.RegCMBMSC, spec.CMBMSCCRE); err != nil {
		return nil, fmt.Errorf("nvme: CMBMSC.CRE: %w", err)
	}
	loc, err := c.bar.Read32(spec.RegCMBLOC)
	if err != nil {
		return nil, fmt.Errorf("nvme: read CMBLOC: %w", err)
	}
	sz, err := c.bar.Read32(spec.RegCMBSZ)
	if err != nil {
		return nil, fmt.Errorf("nvme: read CMBSZ: %w", err)
	}
	m.loc, m.sz = loc, sz
	unit := uint64(4096) << (4 * (sz >> 8 & 0xf))
	m.size = uint64(sz>>12) * unit
	m.bir = int(loc & 7)
	m.off = uint64(loc>>12) * unit
	if m.size == 0 {
		return nil, fmt.Errorf("%w: CMBSZ %#x after CMBMSC.CRE", ErrNoCMB, sz)
	}
	if m.region, err = c.dev.Region(m.bir); err != nil {
		return nil, fmt.Errorf("%w: BAR%d: %w", ErrNoCMB, m.bir, err)
	}
	mem := m.region.Mapped()
	if uint64(len(mem)) < m.off+m.size {
		return nil, fmt.Errorf("%w: BAR%d maps %d bytes, the CMB needs %d at offset %d", ErrNoCMB, m.bir, len(mem), m.size, m.off)
	}
	m.mem = mem[m.off : m.off+m.size : m.off+m.size]
	bar, err := barAddress(c.dev, m.bir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCMB, err)
	}
	m.cba = bar + m.off
	if m.cba&0xfff != 0 {
		return nil, fmt.Errorf("%w: CMB bus address %#x not 4 KiB aligned", ErrNoCMB, m.cba)
	}
	if err := c.dma.Check(m.cba, 1, 0); err == nil {
		return nil, fmt.Errorf("%w: CMB bus address %#x overlaps a DMA mapping", ErrNoCMB, m.cba)
	}
	if err := m.program(); err != nil {
		return nil, err
	}
	c.cmb = m
	return m, nil
}

// program writes CMBMSC: CRE, CMSE and the base address.
func (m *CMB) program() error {
	if err := m.c.bar.Write64(spec.RegCMBMSC, m.cba|spec.CMBMSCCMSE|spec.CMBMSCCRE); err != nil {
		return fmt.Errorf("nvme: CMBMSC: %w", err)
	}
	st, err := m.c.bar.Read32(spec.RegCMBSTS)
	if err != nil {
		return fmt.Errorf("nvme: read CMBSTS: %w", err)
	}
	if st&1 != 0 {
		return fmt.Errorf("%w: controller base address %#x invalid (CMBSTS.CBAI)", ErrNoCMB, m.cba)
	}
	return nil
}

func (m *CMB) disable() error {
	return m.c.bar.Write64(spec.RegCMBMSC, 0)
}

// barAddress reads the bus address of BAR bir from the configuration space
// (64-bit BARs span two registers).
func barAddress(dev vfio.Device, bir int) (uint64, error) {
	cfg, err := dev.Region(vfio.RegionConfig)
	if err != nil {
		return 0, fmt.Errorf("configuration space: %w", err)
	}
	reg := uint64(0x10 + 4*bir)
	lo, err := cfg.Read32(reg)
	if err != nil {
		return 0, fmt.Errorf("read BAR%d: %w", bir, err)
	}
	if lo&1 != 0 {
		return 0, fmt.Errorf("BAR%d is an I/O BAR", bir)
	}
	addr := uint64(lo &^ 0xf)
	if lo>>1&3 == 2 {
		hi, err := cfg.Read32(reg + 4)
		if err != nil {
			return 0, fmt.Errorf("read BAR%d high: %w", bir, err)
		}
		addr |= uint64(hi) << 32
	}
	return addr, nil
}

// Bytes is the CMB as CPU-accessible memory.
func (m *CMB) Bytes() []byte { return m.mem }

// Size is the CMB's size in bytes.
func (m *CMB) Size() uint64 { return m.size }

// Addr is the address commands use for byte off of the CMB.
func (m *CMB) Addr(off uint64) uint64 { return m.cba + off }

// BAR is the index of the BAR that holds the CMB.
func (m *CMB) BAR() int { return m.bir }

// Supports reports CMBSZ's flags: submission queues, completion queues,
// PRP lists, read data, write data.
func (m *CMB) Supports() (sq, cq, lists, readData, writeData bool) {
	return m.sz&spec.CMBSZSQS != 0, m.sz&spec.CMBSZCQS != 0, m.sz&spec.CMBSZLISTS != 0, m.sz&spec.CMBSZRDS != 0, m.sz&spec.CMBSZWDS != 0
}

func (m *CMB) contains(addr uint64, n int) bool {
	return addr >= m.cba && uint64(n) <= m.size && addr-m.cba <= m.size-uint64(n)
}

// dataOK: a Read puts data into the CMB (RDS), a Write takes it from there
// (WDS).
func (m *CMB) dataOK(op uint8) bool {
	if op == spec.OpRead {
		return m.sz&spec.CMBSZRDS != 0
	}
	return m.sz&spec.CMBSZWDS != 0
}
