package model

import "encoding/binary"

// Identification values.
const (
	// IDValue is what the ID register reads: "HDMA" as a little-endian word.
	IDValue = 0x48444D41
	// Version is the model version this package describes.
	Version = 1
)

// BAR0 register offsets (device-wide).
const (
	RegID         = 0x000 // 4, RO: IDValue
	RegVersion    = 0x004 // 4, RO: Version
	RegCaps       = 0x008 // 4, RO: bits 0-7 queue count, bits 8-15 log2 max queue entries
	RegDevMemSize = 0x010 // 8, RO: bytes of device memory (BAR2)
	RegStatus     = 0x018 // 4, RO: StatusReady, StatusFatal
	RegControl    = 0x01C // 4, RW: ControlEnable, ControlReset (self-clearing)
	RegFaultAddr  = 0x020 // 8, RO: last faulting IOVA
	RegMaxLen     = 0x028 // 4, RO: largest len one descriptor may carry (refinement, see docs/hdma.md)

	// Bar0Size is the size of the register BAR.
	Bar0Size = 0x1000
)

// Per-queue register block: queue q's registers live at QueueBase + QueueStride*q + offset.
const (
	QueueBase   = 0x100
	QueueStride = 0x40

	QSQBase = 0x00 // 8: IOVA of the submission ring (64-byte aligned)
	QSQSize = 0x08 // 4: entries, power of two
	QSQTail = 0x0C // 4: doorbell, the host writes the new tail
	QCQBase = 0x10 // 8: IOVA of the completion ring (64-byte aligned)
	QCQSize = 0x18 // 4: entries, power of two
	QCQHead = 0x1C // 4: doorbell, the host writes the consumed head
	QIRQ    = 0x20 // 4: bit0 raise MSI vector q on completion

	// MaxQueues is how many queue register blocks fit in BAR0.
	MaxQueues = (Bar0Size - QueueBase) / QueueStride
)

// QueueReg is the BAR0 offset of register reg (QSQBase ...) of queue q.
func QueueReg(q int, reg uint64) uint64 {
	return QueueBase + QueueStride*uint64(q) + reg
}

// STATUS bits.
const (
	StatusReady = 1 << 0 // enabled and processing
	StatusFatal = 1 << 1 // halted on a fatal fault (ring fetch/write fault, bad doorbell, bad queue config); needs reset
)

// CONTROL bits.
const (
	ControlEnable = 1 << 0
	ControlReset  = 1 << 1
)

// IRQ register bits.
const IRQEnable = 1 << 0

// Caps decodes the CAPS register.
func Caps(v uint32) (queues int, log2MaxEntries int) {
	return int(v & 0xff), int(v >> 8 & 0xff)
}

// MakeCaps encodes the CAPS register.
func MakeCaps(queues, log2MaxEntries int) uint32 {
	return uint32(queues&0xff) | uint32(log2MaxEntries&0xff)<<8
}

// Opcodes.
const (
	OpH2D   = 1 // host → device: src IOVA, dst device-memory offset
	OpD2H   = 2 // device → host: src device-memory offset, dst IOVA
	OpD2D   = 3 // device → device: src, dst device-memory offsets
	OpFence = 4 // completes once all earlier descriptors of its queue have; len, src, dst zero
)

// Descriptor flag bits.
const (
	FlagInterrupt = 1 << 0 // raise the queue's MSI when this descriptor completes (if IRQ enabled)
	FlagsKnown    = FlagInterrupt
)

// Completion status codes.
const (
	StatusOK          = 0
	StatusIOMMUFault  = 1
	StatusDevMemBound = 2
	StatusBadDesc     = 3
	StatusReset       = 4
	StatusDeviceError = 5 // refinement: internal device error (what injected errors report by default)
)

// Ring entry sizes and field offsets.
const (
	DescSize = 64

	DescOpcode   = 0  // u8
	DescFlags    = 1  // u8
	DescRsvd     = 2  // u16, zero
	DescLen      = 4  // u32
	DescTag      = 8  // u64
	DescSrc      = 16 // u64
	DescDst      = 24 // u64
	DescReserved = 32 // 32 bytes, zero

	CplSize   = 16
	CplTag    = 0  // u64
	CplStatus = 8  // u16
	CplPhase  = 10 // u16, bit 0 is the phase
	CplLen    = 12 // u32
)

// Descriptor is a decoded submission entry.
type Descriptor struct {
	Opcode uint8
	Flags  uint8
	Rsvd   uint16
	Len    uint32
	Tag    uint64
	Src    uint64
	Dst    uint64
}

// Encode writes d into b[:DescSize], reserved bytes zero. b must hold 64 bytes.
func (d *Descriptor) Encode(b []byte) {
	_ = b[DescSize-1]
	b[DescOpcode] = d.Opcode
	b[DescFlags] = d.Flags
	binary.LittleEndian.PutUint16(b[DescRsvd:], d.Rsvd)
	binary.LittleEndian.PutUint32(b[DescLen:], d.Len)
	binary.LittleEndian.PutUint64(b[DescTag:], d.Tag)
	binary.LittleEndian.PutUint64(b[DescSrc:], d.Src)
	binary.LittleEndian.PutUint64(b[DescDst:], d.Dst)
	clear(b[DescReserved:DescSize])
}

// Decode reads b[:DescSize] into d and reports whether the 32 reserved bytes
// are all zero.
func (d *Descriptor) Decode(b []byte) (reservedZero bool) {
	_ = b[DescSize-1]
	d.Opcode = b[DescOpcode]
	d.Flags = b[DescFlags]
	d.Rsvd = binary.LittleEndian.Uint16(b[DescRsvd:])
	d.Len = binary.LittleEndian.Uint32(b[DescLen:])
	d.Tag = binary.LittleEndian.Uint64(b[DescTag:])
	d.Src = binary.LittleEndian.Uint64(b[DescSrc:])
	d.Dst = binary.LittleEndian.Uint64(b[DescDst:])
	var acc uint64
	for i := DescReserved; i < DescSize; i += 8 {
		acc |= binary.LittleEndian.Uint64(b[i:])
	}
	return acc == 0
}
