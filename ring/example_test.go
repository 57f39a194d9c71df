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
// ones and writes its head to the device's doorbell.
func ExampleCompletionRing() {
	mem := make([]byte, 4*16) // HDMA: 16-byte completions, phase at offset 10
	cq, _ := ring.NewCompletionRing(mem, 16, 10)
	dev, _ := ring.NewCompletionWriter(mem, 16, 10)

	entry := make([]byte, 16)
	for tag := uint64(1); tag <= 2; tag++ {
		binary.LittleEndian.PutUint64(entry, tag)
		_ = dev.Write(entry)
	}
	b := cq.Peek(4)
	for i := 0; i < b.Len(); i++ {
		fmt.Println("tag", binary.LittleEndian.Uint64(b.Entry(i)))
	}
	_ = cq.Release(b.Len())
	_ = dev.SetHead(cq.Head()) // the CQ_HEAD doorbell
	fmt.Println("head", cq.Head(), "free", dev.Free())
	// Output:
	// tag 1
	// tag 2
	// head 2 free 3
}
