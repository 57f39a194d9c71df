// Command seedflow walks through the flow of the C example
// tests/capi/seed_example.c (docs/capi.md), step by step, on the Go engine:
// init with a 256 MiB pool, queue depth 64 and 64-byte alignment; allocate
// host memory; write into it; submit a transfer with a completion callback;
// submit a batch; wait; free; finalize. Each step's comment names the C call
// it stands for. The device is
// vfio-mock (software HDMA) behind the HDMA backend, so it runs anywhere;
// on hardware, vfio.OpenPCI gives the same backend a real device.
//
//	go run ./examples/seedflow
package main

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// 1. hcomm_init(pool 256 MiB, queue depth 64, alignment 64) on a
	// software HDMA device.
	dev, err := mock.New(mock.Config{})
	if err != nil {
		log.Fatalf("init: device: %v", err)
	}
	be, err := hdmadev.New(dev, hdmadev.Config{CloseDevice: true})
	if err != nil {
		log.Fatalf("init: backend: %v", err)
	}
	eng, err := engine.Open(engine.Config{Backend: be, PoolSize: 256 << 20, QueueDepth: 64, Alignment: 64})
	if err != nil {
		log.Fatalf("init: %v", err)
	}
	cfg, desc := eng.Config(), eng.Backend()
	fmt.Printf("1. init: pool %d MiB (%v), depth %d, alignment %d, backend %s on %s, CPU-path threshold %d bytes\n",
		cfg.PoolSize>>20, eng.Backing(), cfg.QueueDepth, cfg.Alignment, desc.Name, desc.Device, desc.CPUThreshold)

	// 2. hcomm_alloc: host memory from the pool, already DMA-mapped.
	buf, err := eng.Alloc(1 << 20)
	if err != nil {
		log.Fatalf("alloc: %v", err)
	}
	fmt.Printf("2. alloc: %d bytes at %#x (device address %#x)\n", buf.Len(), buf.Addr(), buf.IOVA())

	// 3. Write into host memory directly: the only CPU copy.
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(i)
	}
	fmt.Println("3. wrote the payload into host memory")

	// 4. hcomm_submit with a completion callback.
	var done atomic.Int32
	id, err := eng.Submit(engine.Transfer{
		Src: engine.Host(buf), Dst: engine.DeviceAt(0), Len: 64 << 10,
		Callback: func(r engine.Result) {
			done.Add(1)
			fmt.Printf("   callback: transfer %#x moved %d bytes, err=%v\n", uint64(r.ID), r.N, r.Err)
		},
	})
	if err != nil {
		log.Fatalf("submit: %v", err)
	}
	fmt.Printf("4. submitted transfer %#x\n", uint64(id))

	// 5. A batch: 16 transfers, one doorbell.
	batch := make([]engine.Transfer, 16)
	for i := range batch {
		batch[i] = engine.Transfer{
			Src: engine.HostAt(buf, i*(64<<10)), Dst: engine.DeviceAt(uint64(i) * (64 << 10)), Len: 64 << 10,
			Callback: func(engine.Result) { done.Add(1) },
		}
	}
	ids := make([]engine.ID, len(batch))
	n, err := eng.SubmitBatchContext(ctx, batch, ids)
	if err != nil {
		log.Fatalf("submit batch: %d of %d: %v", n, len(batch), err)
	}
	fmt.Printf("5. submitted a batch of %d\n", n)

	// 6. hcomm_wait: one transfer, then all of them.
	if err := eng.Wait(ctx, id); err != nil {
		log.Fatalf("wait: %v", err)
	}
	if err := eng.Drain(ctx); err != nil {
		log.Fatalf("drain: %v", err)
	}
	st := eng.Stats()
	fmt.Printf("6. waited: %d callbacks; %d transfers, %d bytes, %d doorbells, %d errors\n",
		done.Load(), st.Transfers, st.Bytes, st.Doorbells, st.Errors())

	// 7. hcomm_free.
	if err := eng.Free(buf); err != nil {
		log.Fatalf("free: %v", err)
	}
	fmt.Println("7. freed the buffer")

	// 8. hcomm_finalize.
	if err := eng.Shutdown(ctx); err != nil {
		log.Fatalf("finalize: %v", err)
	}
	fmt.Println("8. finalized")
}
