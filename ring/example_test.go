package ring_test

import (
	"encoding/binary"
	"fmt"

	"github.com/hcomm-go/hcomm/ring"
)

// Producers reserve a batch, fill it and publish it with one commit; the
// consumer peeks a batch and releases it with one store.
func ExampleMPSC() {
	r, err := ring.NewMPSC(make([]byte, 8*64), 64) // 8 descriptors of 64 bytes
	if err != nil {
		panic(err)
	}
	b, err := r.Reserve(3)
	if err != nil {
		panic(err)
	}
	for i := 0; i < b.Len(); i++ {
		binary.LittleEndian.PutUint64(b.Entry(i), uint64(100+i))
	}
	if err := r.Commit(b); err != nil {
		panic(err)
	}
	got := r.Peek(8)
	for i := 0; i < got.Len(); i++ {
		fmt.Println(binary.LittleEndian.Uint64(got.Entry(i)))
	}
	if err := r.Release(got.Len()); err != nil {
		panic(err)
	}
	// Output:
	// 100
	// 101
	// 102
}

// A device writes completions with a phase bit; the driver takes the ready
// ones and writes its head to the device's doorbell. Here the test plays the
// device: HDMA completions are 16 bytes, the tag first, the phase in bit 0
// of the uint16 at offset 10 (1 on the device's first pass over the ring).
func ExampleCompletionRing() {
	mem := make([]byte, 4*16)
	cq, _ := ring.NewCompletionRing(mem, 16, 10)

	for slot, tag := range []uint64{1, 2} {
		e := mem[slot*16 : (slot+1)*16]
		binary.LittleEndian.PutUint64(e, tag)
		binary.LittleEndian.PutUint16(e[10:], 1) // the phase, written last
	}
	b := cq.Peek(4)
	for i := 0; i < b.Len(); i++ {
		fmt.Println("tag", binary.LittleEndian.Uint64(b.Entry(i)))
	}
	_ = cq.Release(b.Len())
	fmt.Println("head", cq.Head()) // the value for the CQ_HEAD doorbell
	// Output:
	// tag 1
	// tag 2
	// head 2
}
