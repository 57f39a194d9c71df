package spec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestCommandMarshalRoundTrip(t *testing.T) {
	c := Command{Opcode: OpWrite, Flags: 0x40, CID: 0xbeef, NSID: 1, CDW2: 2, CDW3: 3, MPTR: 0x1122334455667788,
		PRP1: 0x200004, PRP2: 0x201000, CDW10: 10, CDW11: 11, CDW12: 12, CDW13: 13, CDW14: 14, CDW15: 15}
	b := make([]byte, SQESize)
	c.Marshal(b)
	if got := UnmarshalCommand(b); got != c {
		t.Fatalf("round trip: %+v, want %+v", got, c)
	}
	// The wire layout, field by field (NVMe 1.4 Common Command Format).
	le := binary.LittleEndian
	for _, f := range []struct {
		name string
		off  int
		got  uint64
		want uint64
	}{
		{"CDW0", 0, uint64(le.Uint32(b[0:])), 0xbeef4001},
		{"NSID", 4, uint64(le.Uint32(b[4:])), 1},
		{"MPTR", 16, le.Uint64(b[16:]), 0x1122334455667788},
		{"PRP1", 24, le.Uint64(b[24:]), 0x200004},
		{"PRP2", 32, le.Uint64(b[32:]), 0x201000},
		{"CDW10", 40, uint64(le.Uint32(b[40:])), 10},
		{"CDW15", 60, uint64(le.Uint32(b[60:])), 15},
	} {
		if f.got != f.want {
			t.Errorf("%s at byte %d: %#x, want %#x", f.name, f.off, f.got, f.want)
		}
	}
}

func TestCommandEncoding(t *testing.T) {
	rw := func(op uint8, slba uint64, nlb int, fua bool) Command {
		c, err := ReadWrite(op, 1, slba, nlb, fua)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		name string
		cmd  Command
		want Command
	}{
		{"read 1 block at 0", rw(OpRead, 0, 1, false), Command{Opcode: OpRead, NSID: 1}},
		{"write 8 blocks at 2^33+5, FUA", rw(OpWrite, 1<<33+5, 8, true),
			Command{Opcode: OpWrite, NSID: 1, CDW10: 5, CDW11: 2, CDW12: 7 | 1<<30}},
		{"write zeroes 65536 blocks", rw(OpWriteZeroes, 7, 1<<16, false),
			Command{Opcode: OpWriteZeroes, NSID: 1, CDW10: 7, CDW12: 0xffff}},
		{"create CQ 1, 64 entries, vector 1", CreateCQ(1, 64, 0x5000, true, 1),
			Command{Opcode: AdminCreateCQ, PRP1: 0x5000, CDW10: 1 | 63<<16, CDW11: 1 | 2 | 1<<16}},
		{"create CQ 2, polled", CreateCQ(2, 1024, 0x6000, false, 0),
			Command{Opcode: AdminCreateCQ, PRP1: 0x6000, CDW10: 2 | 1023<<16, CDW11: 1}},
		{"create SQ 3 on CQ 3", CreateSQ(3, 16, 0x7000, 3),
			Command{Opcode: AdminCreateSQ, PRP1: 0x7000, CDW10: 3 | 15<<16, CDW11: 1 | 3<<16}},
		{"abort CID 9 of SQ 1", Abort(1, 9), Command{Opcode: AdminAbort, CDW10: 1 | 9<<16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cmd != tt.want {
				t.Fatalf("%+v, want %+v", tt.cmd, tt.want)
			}
		})
	}
	for _, nlb := range []int{0, -1, 1<<16 + 1} {
		if _, err := ReadWrite(OpRead, 1, 0, nlb, false); !errors.Is(err, ErrBadTransfer) {
			t.Errorf("ReadWrite with %d blocks: %v, want ErrBadTransfer", nlb, err)
		}
	}
}

func TestCQEParse(t *testing.T) {
	tests := []struct {
		name string
		raw  [4]uint32
		want CQE
	}{
		{"success, phase 1", [4]uint32{7, 0, 5 | 1<<16, 3 | 1<<16}, CQE{Result: 7, SQHead: 5, SQID: 1, CID: 3, Phase: true}},
		{"LBA out of range, DNR, phase 0", [4]uint32{0, 0, 0, 0xffff | uint32(0x4080)<<17},
			CQE{CID: 0xffff, Status: 0x4080}},
		{"data transfer error", [4]uint32{0, 0, 2, 1 | 1<<16 | 0x04<<17}, CQE{SQHead: 2, CID: 1, Phase: true, Status: 0x04}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, CQESize)
			for i, w := range tt.raw {
				binary.LittleEndian.PutUint32(b[4*i:], w)
			}
			got := ParseCQE(b)
			if got != tt.want {
				t.Fatalf("%+v, want %+v", got, tt.want)
			}
			b2 := make([]byte, CQESize)
			got.Marshal(b2)
			if !bytes.Equal(b, b2) {
				t.Fatalf("marshal: % x, want % x", b2, b)
			}
		})
	}
}

func TestIdentifyParse(t *testing.T) {
	b := make([]byte, 4096)
	le := binary.LittleEndian
	le.PutUint16(b[0:], 0x1b36)
	copy(b[4:24], "hcomm0              ")
	copy(b[24:64], "QEMU NVMe Ctrl                          ")
	copy(b[64:72], "7.2.22  ")
	b[77] = 7
	le.PutUint32(b[80:], 0x10400)
	b[512], b[513] = 0x66, 0x44
	le.PutUint32(b[516:], 256)
	le.PutUint16(b[520:], ONCSDSM|ONCSWriteZeroes)
	ic, err := ParseIdentifyController(b)
	if err != nil {
		t.Fatal(err)
	}
	want := IdentifyController{VendorID: 0x1b36, Serial: "hcomm0", Model: "QEMU NVMe Ctrl", Firmware: "7.2.22",
		MDTS: 7, Version: 0x10400, SQES: 0x66, CQES: 0x44, NN: 256, ONCS: ONCSDSM | ONCSWriteZeroes}
	if ic != want {
		t.Fatalf("%+v\nwant %+v", ic, want)
	}
	if s := ic.Version.String(); s != "1.4.0" {
		t.Errorf("version %q", s)
	}

	ns := make([]byte, 4096)
	le.PutUint64(ns[0:], 1<<21)
	le.PutUint64(ns[8:], 1<<21)
	ns[25] = 1 // two formats
	ns[26] = 1 // format 1 in use
	le.PutUint32(ns[128:], 9<<16)
	le.PutUint32(ns[132:], 12<<16|8)
	n, err := ParseIdentifyNamespace(1, ns)
	if err != nil {
		t.Fatal(err)
	}
	if n.LBASize != 4096 || n.MetaSize != 8 || n.Blocks != 1<<21 || n.Bytes() != 8<<30 || n.Format != 1 {
		t.Fatalf("%+v", n)
	}
	ns[26] = 5 // beyond NLBAF
	if _, err := ParseIdentifyNamespace(1, ns); !errors.Is(err, ErrNotNVMe) {
		t.Fatalf("format beyond NLBAF: %v", err)
	}
	clear(ns[:8])
	ns[26] = 0
	if _, err := ParseIdentifyNamespace(1, ns); !errors.Is(err, ErrNotNVMe) {
		t.Fatalf("inactive namespace: %v", err)
	}
	if _, err := ParseIdentifyController(b[:100]); err == nil {
		t.Fatal("short identify data accepted")
	}
}

func TestCap(t *testing.T) {
	// The CAP QEMU 7.2's controller reports (docs/nvme.md).
	c := Cap(0x24018200f0107ff)
	if c.MQES() != 2048 || !c.CQR() || c.TimeoutUnits() != 15 || c.DSTRD() != 0 || !c.NVMCommandSet() ||
		c.MPSMin() != 4096 || c.MPSMax() != 4096<<4 || !c.CMBS() {
		t.Fatalf("MQES %d CQR %v TO %d DSTRD %d NVM %v MPS %d..%d CMBS %v", c.MQES(), c.CQR(), c.TimeoutUnits(),
			c.DSTRD(), c.NVMCommandSet(), c.MPSMin(), c.MPSMax(), c.CMBS())
	}
}
