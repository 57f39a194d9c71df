package spec

import (
	"encoding/binary"
	"fmt"
)

// Command is one submission queue entry (64 bytes, NVMe 1.4 "Common Command
// Format"). CID is filled in by the queue on submission.
type Command struct {
	Opcode uint8
	// Flags is CDW0 bits 15:8: FUSE (9:8) and PSDT (15:14, 0 = PRPs).
	Flags      uint8
	CID        uint16
	NSID       uint32
	CDW2, CDW3 uint32
	MPTR       uint64
	PRP1, PRP2 uint64
	CDW10      uint32
	CDW11      uint32
	CDW12      uint32
	CDW13      uint32
	CDW14      uint32
	CDW15      uint32
}

// Marshal writes the entry into b (at least 64 bytes), little-endian.
func (c *Command) Marshal(b []byte) {
	_ = b[SQESize-1]
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(c.Opcode)|uint32(c.Flags)<<8|uint32(c.CID)<<16)
	le.PutUint32(b[4:], c.NSID)
	le.PutUint32(b[8:], c.CDW2)
	le.PutUint32(b[12:], c.CDW3)
	le.PutUint64(b[16:], c.MPTR)
	le.PutUint64(b[24:], c.PRP1)
	le.PutUint64(b[32:], c.PRP2)
	le.PutUint32(b[40:], c.CDW10)
	le.PutUint32(b[44:], c.CDW11)
	le.PutUint32(b[48:], c.CDW12)
	le.PutUint32(b[52:], c.CDW13)
	le.PutUint32(b[56:], c.CDW14)
	le.PutUint32(b[60:], c.CDW15)
}

// UnmarshalCommand decodes a 64-byte submission queue entry.
func UnmarshalCommand(b []byte) Command {
	_ = b[SQESize-1]
	le := binary.LittleEndian
	dw0 := le.Uint32(b[0:])
	return Command{
		Opcode: uint8(dw0), Flags: uint8(dw0 >> 8), CID: uint16(dw0 >> 16),
		NSID: le.Uint32(b[4:]), CDW2: le.Uint32(b[8:]), CDW3: le.Uint32(b[12:]),
		MPTR: le.Uint64(b[16:]), PRP1: le.Uint64(b[24:]), PRP2: le.Uint64(b[32:]),
		CDW10: le.Uint32(b[40:]), CDW11: le.Uint32(b[44:]), CDW12: le.Uint32(b[48:]),
		CDW13: le.Uint32(b[52:]), CDW14: le.Uint32(b[56:]), CDW15: le.Uint32(b[60:]),
	}
}

// ReadWrite builds a Read, Write or Write Zeroes command for nlb logical
// blocks (1..65536) starting at slba; fua sets Force Unit Access.
func ReadWrite(opcode uint8, nsid uint32, slba uint64, nlb int, fua bool) (Command, error) {
	if nlb < 1 || nlb > 1<<16 {
		return Command{}, fmt.Errorf("%w: %d logical blocks in one command (1..65536)", ErrBadTransfer, nlb)
	}
	c := Command{Opcode: opcode, NSID: nsid, CDW10: uint32(slba), CDW11: uint32(slba >> 32), CDW12: uint32(nlb - 1)}
	if fua {
		c.CDW12 |= 1 << 30
	}
	return c, nil
}

// CreateCQ builds Create I/O Completion Queue: physically contiguous (the
// IOVA range is), entries 2..MQES, interrupts on vector iv when ien.
func CreateCQ(qid uint16, entries int, base uint64, ien bool, iv uint16) Command {
	c := Command{Opcode: AdminCreateCQ, PRP1: base, CDW10: uint32(qid) | uint32(entries-1)<<16, CDW11: 1 | uint32(iv)<<16}
	if ien {
		c.CDW11 |= 1 << 1
	}
	return c
}

// CreateSQ builds Create I/O Submission Queue bound to completion queue cqid.
func CreateSQ(qid uint16, entries int, base uint64, cqid uint16) Command {
	return Command{Opcode: AdminCreateSQ, PRP1: base, CDW10: uint32(qid) | uint32(entries-1)<<16, CDW11: 1 | uint32(cqid)<<16}
}

// Abort builds the Abort command for command cid of submission queue sqid.
func Abort(sqid, cid uint16) Command {
	return Command{Opcode: AdminAbort, CDW10: uint32(sqid) | uint32(cid)<<16}
}

// CQE is one completion queue entry (16 bytes).
type CQE struct {
	// Result is DW0 (command specific).
	Result uint32
	DW1    uint32
	// SQHead is the submission queue head pointer as the controller saw it.
	SQHead uint16
	SQID   uint16
	CID    uint16
	// Phase is the phase tag: the entry is new when it differs from what
	// the host last consumed at this slot.
	Phase bool
	// Status is the 15-bit status field.
	Status Status
}

// ParseCQE decodes a 16-byte completion queue entry.
func ParseCQE(b []byte) CQE {
	_ = b[CQESize-1]
	le := binary.LittleEndian
	dw2, dw3 := le.Uint32(b[8:]), le.Uint32(b[12:])
	return CQE{
		Result: le.Uint32(b[0:]), DW1: le.Uint32(b[4:]),
		SQHead: uint16(dw2), SQID: uint16(dw2 >> 16),
		CID: uint16(dw3), Phase: dw3>>16&1 != 0, Status: Status(dw3 >> 17),
	}
}

// Marshal writes the entry in its 16-byte wire form (tests and fuzzing
// round-trip through it).
func (e CQE) Marshal(b []byte) {
	_ = b[CQESize-1]
	le := binary.LittleEndian
	le.PutUint32(b[0:], e.Result)
	le.PutUint32(b[4:], e.DW1)
	le.PutUint32(b[8:], uint32(e.SQHead)|uint32(e.SQID)<<16)
	dw3 := uint32(e.CID) | uint32(e.Status&0x7fff)<<17
	if e.Phase {
		dw3 |= 1 << 16
	}
	le.PutUint32(b[12:], dw3)
}
