package engine_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// Open an engine on an HDMA device (here vfio-mock's software device; on
// hardware, vfio.OpenPCI), allocate a block, write into it, move it to
// device memory and back, wait, and close.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, err := mock.New(mock.Config{})
	if err != nil {
		log.Fatal(err)
	}
	be, err := hdmadev.New(dev, hdmadev.Config{CloseDevice: true})
	if err != nil {
		log.Fatal(err)
	}
	eng, err := engine.Open(engine.Config{
		Backend:  be,
		PoolSize: 8 << 20, // the default is 256 MiB
		Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Shutdown(ctx)

	out, _ := eng.Alloc(4096)
	in, _ := eng.Alloc(4096)
	copy(out.Bytes(), "hello, device")

	id, err := eng.Submit(engine.Transfer{Src: engine.Host(out), Dst: engine.DeviceAt(0), Len: 4096})
	if err != nil {
		log.Fatal(err)
	}
	if err := eng.Wait(ctx, id); err != nil {
		log.Fatal(err)
	}
	id, _ = eng.Submit(engine.Transfer{
		Src: engine.DeviceAt(0), Dst: engine.Host(in), Len: 4096,
		Callback: func(r engine.Result) { fmt.Printf("callback: %d bytes, err %v\n", r.N, r.Err) },
	})
	if err := eng.Wait(ctx, id); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", in.Bytes()[:13])
	_ = eng.Free(out)
	_ = eng.Free(in)
	// Output:
	// callback: 4096 bytes, err <nil>
	// hello, device
}

// A batch is staged with one reservation and published with one doorbell;
// Drain waits for all of it.
func ExampleEngine_SubmitBatch() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, err := mock.New(mock.Config{})
	if err != nil {
		log.Fatal(err)
	}
	be, err := hdmadev.New(dev, hdmadev.Config{CPUThreshold: -1, CloseDevice: true}) // DMA only
	if err != nil {
		log.Fatal(err)
	}
	eng, err := engine.Open(engine.Config{
		Backend: be, PoolSize: 8 << 20, QueueDepth: 64,
		Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Shutdown(ctx)
	buf, _ := eng.Alloc(64 * 1024)
	batch := make([]engine.Transfer, 64)
	for i := range batch {
		batch[i] = engine.Transfer{Src: engine.HostAt(buf, i*1024), Dst: engine.DeviceAt(uint64(i) * 1024), Len: 1024}
	}
	n, err := eng.SubmitBatchContext(ctx, batch, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := eng.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	st := eng.Stats()
	fmt.Printf("submitted %d, completed %d, doorbells %d\n", n, st.Completed, st.Doorbells)
	// Output:
	// submitted 64, completed 64, doorbells 1
}

// Poll mode: no goroutine; the application reaps completions itself.
func ExampleEngine_Poll() {
	eng, err := engine.Open(engine.Config{
		Backend: memory.New(), PoolSize: 8 << 20, Mode: engine.ModePoll,
		Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	a, _ := eng.Alloc(256)
	b, _ := eng.Alloc(256)
	copy(a.Bytes(), "polled")
	done := false
	_, _ = eng.Submit(engine.Transfer{Src: engine.Host(a), Dst: engine.Host(b), Len: 256,
		Callback: func(engine.Result) { done = true }})
	for !done {
		eng.Poll()
	}
	fmt.Printf("%s\n", b.Bytes()[:6])
	// Output: polled
}
