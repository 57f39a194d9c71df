package spec

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// IdentifyController is what the driver reads from the Identify Controller
// data structure (CNS 01h, 4096 bytes).
type IdentifyController struct {
	VendorID uint16
	Serial   string
	Model    string
	Firmware string
	// MDTS is the maximum data transfer size as the raw exponent (in units
	// of CAP.MPSMIN; 0: no limit).
	MDTS    uint8
	CNTLID  uint16
	Version Version // VER (0 before NVMe 1.2)
	// SQES and CQES: required (3:0) and maximum (7:4) entry sizes, log2.
	SQES, CQES uint8
	MaxCmd     uint16
	// NN is the number of namespaces.
	NN uint32
	// ONCS: optional NVM commands (bit 0 Compare, 2 DSM, 3 Write Zeroes...).
	ONCS uint16
	// VWC: bit 0 set when a volatile write cache is present.
	VWC uint8
	// SGLS: SGL support (0: PRPs only).
	SGLS uint32
}

// ONCS bits.
const (
	ONCSCompare     = 1 << 0
	ONCSDSM         = 1 << 2
	ONCSWriteZeroes = 1 << 3
)

// ParseIdentifyController decodes the Identify Controller data structure.
func ParseIdentifyController(b []byte) (IdentifyController, error) {
	if len(b) < 4096 {
		return IdentifyController{}, fmt.Errorf("nvme: identify controller: %d bytes, want 4096", len(b))
	}
	le := binary.LittleEndian
	return IdentifyController{
		VendorID: le.Uint16(b[0:]),
		Serial:   ascii(b[4:24]),
		Model:    ascii(b[24:64]),
		Firmware: ascii(b[64:72]),
		MDTS:     b[77],
		CNTLID:   le.Uint16(b[78:]),
		Version:  Version(le.Uint32(b[80:])),
		SQES:     b[512],
		CQES:     b[513],
		MaxCmd:   le.Uint16(b[514:]),
		NN:       le.Uint32(b[516:]),
		ONCS:     le.Uint16(b[520:]),
		VWC:      b[525],
		SGLS:     le.Uint32(b[536:]),
	}, nil
}

func ascii(b []byte) string { return strings.TrimRight(string(b), " \x00") }

// Namespace is what the driver reads from the Identify Namespace data
// structure (CNS 00h) for the active LBA format.
type Namespace struct {
	ID uint32
	// Blocks is NSZE, the namespace size in logical blocks; Capacity is
	// NCAP.
	Blocks, Capacity uint64
	// LBASize is the logical block size in bytes (2^LBADS) of the format
	// FLBAS selects; MetaSize its metadata bytes per block.
	LBASize  int
	MetaSize int
	// Format is the LBA format index in use.
	Format int
}

// Bytes is the namespace size in bytes.
func (n Namespace) Bytes() uint64 { return n.Blocks * uint64(n.LBASize) }

// ParseIdentifyNamespace decodes the Identify Namespace data structure.
func ParseIdentifyNamespace(id uint32, b []byte) (Namespace, error) {
	if len(b) < 4096 {
		return Namespace{}, fmt.Errorf("nvme: identify namespace: %d bytes, want 4096", len(b))
	}
	le := binary.LittleEndian
	ns := Namespace{ID: id, Blocks: le.Uint64(b[0:]), Capacity: le.Uint64(b[8:])}
	nlbaf := int(b[25]) + 1
	ns.Format = int(b[26] & 0xf)
	if nlbaf > 16 {
		nlbaf = 16
	}
	if ns.Format >= nlbaf {
		return ns, fmt.Errorf("%w: namespace %d uses LBA format %d of %d", ErrNotNVMe, id, ns.Format, nlbaf)
	}
	f := le.Uint32(b[128+4*ns.Format:])
	ns.MetaSize = int(f & 0xffff)
	lbads := int(f >> 16 & 0xff)
	if ns.Blocks == 0 {
		return ns, fmt.Errorf("%w: namespace %d is inactive (size 0)", ErrNotNVMe, id)
	}
	if lbads < 9 || lbads > 16 {
		return ns, fmt.Errorf("%w: namespace %d: LBA data size 2^%d", ErrNotNVMe, id, lbads)
	}
	ns.LBASize = 1 << lbads
	return ns, nil
}
