package model

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestDescriptorLayout(t *testing.T) {
	d := Descriptor{Opcode: OpD2H, Flags: FlagInterrupt, Rsvd: 0x0102, Len: 0x03040506,
		Tag: 0x1112131415161718, Src: 0x2122232425262728, Dst: 0x3132333435363738}
	b := bytes.Repeat([]byte{0xff}, DescSize)
	d.Encode(b)
	want := []byte{
		2, 1, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03,
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
		0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,
		0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,
	}
	if !bytes.Equal(b[:32], want) || !bytes.Equal(b[32:], make([]byte, 32)) {
		t.Fatalf("encoded % x", b)
	}
	var got Descriptor
	if !got.Decode(b) || got != d {
		t.Fatalf("decoded %+v", got)
	}
	for i := DescReserved; i < DescSize; i++ {
		b[i] = 1
		if got.Decode(b) {
			t.Errorf("reserved byte %d set, Decode says zero", i)
		}
		b[i] = 0
	}
}

func TestRegisterMap(t *testing.T) {
	if q, l := Caps(MakeCaps(60, 16)); q != 60 || l != 16 {
		t.Errorf("CAPS round trip %d %d", q, l)
	}
	if QueueReg(0, QSQTail) != 0x10C || QueueReg(2, QCQHead) != 0x100+0x80+0x1C {
		t.Errorf("queue register offsets")
	}
	if QueueReg(MaxQueues-1, QIRQ)+4 > Bar0Size {
		t.Errorf("last queue's registers leave BAR0")
	}
	// The phase bit shares the aligned 32-bit word at CplStatus with the
	// status: one atomic store publishes both.
	if CplStatus%4 != 0 || CplPhase != CplStatus+2 {
		t.Errorf("status/phase word layout")
	}
	var e [CplSize]byte
	binary.LittleEndian.PutUint32(e[CplStatus:], 3|1<<16)
	if binary.LittleEndian.Uint16(e[CplStatus:]) != 3 || binary.LittleEndian.Uint16(e[CplPhase:]) != 1 {
		t.Errorf("status/phase word does not split as the model says")
	}
}
