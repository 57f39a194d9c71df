package engine_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

var fuzzOnce struct {
	sync.Once
	dev *mock.Device
	e   *engine.Engine
	b   [2]engine.Block
	err error
}

// FuzzSubmit throws arbitrary transfers (kinds, offsets, lengths, freed and
// foreign blocks) at a device engine: Submit either refuses with one of the
// typed errors or the transfer completes, and the device never sees a
// descriptor its IOMMU or bounds checks would refuse.
func FuzzSubmit(f *testing.F) {
	f.Add(uint8(0), uint8(1), int64(0), int64(0), 64)
	f.Add(uint8(1), uint8(0), int64(4000), int64(1<<20), 4096)
	f.Add(uint8(1), uint8(1), int64(-1), int64(5), 0)
	f.Add(uint8(0), uint8(0), int64(1<<40), int64(-8), 1<<30)
	f.Add(uint8(2), uint8(3), int64(64), int64(64), 128)
	f.Fuzz(func(t *testing.T, sk, dk uint8, so, do int64, n int) {
		fuzzOnce.Do(func() {
			fuzzOnce.dev, fuzzOnce.err = mock.New(mock.Config{DevMemSize: 1 << 20, MaxTransfer: 256 << 10, Logger: quiet()})
			if fuzzOnce.err != nil {
				return
			}
			fuzzOnce.e, fuzzOnce.err = engine.Open(small(t, engine.Config{Backend: hdmaBE(t, fuzzOnce.dev, hdmadev.Config{CPUThreshold: 256})}))
			if fuzzOnce.err != nil {
				return
			}
			fuzzOnce.b[0], fuzzOnce.err = fuzzOnce.e.Alloc(8192)
			if fuzzOnce.err != nil {
				return
			}
			fuzzOnce.b[1], fuzzOnce.err = fuzzOnce.e.Alloc(4096)
			if fuzzOnce.err == nil {
				fuzzOnce.err = fuzzOnce.e.Free(fuzzOnce.b[1]) // a freed block
			}
		})
		must(t, fuzzOnce.err)
		e := fuzzOnce.e
		loc := func(k uint8, off int64) engine.Loc {
			switch k % 4 {
			case 0:
				return engine.HostAt(fuzzOnce.b[off&1], int(off>>1))
			case 1:
				return engine.DeviceAt(uint64(off))
			case 2:
				return engine.FileAt(off)
			}
			return engine.Loc{}
		}
		tr := engine.Transfer{Src: loc(sk, so), Dst: loc(dk, do), Len: n}
		id, err := e.Submit(tr)
		if err != nil {
			for _, want := range []error{engine.ErrBadTransfer, engine.ErrForeignBlock, engine.ErrFreedBlock, engine.ErrOutOfBounds, engine.ErrQueueFull} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("Submit(%v → %v, %d): untyped error %v", tr.Src, tr.Dst, n, err)
		}
		if err := e.Wait(ctxT(t, 10*time.Second), id); err != nil {
			t.Fatalf("valid transfer %v → %v (%d bytes) failed: %v", tr.Src, tr.Dst, n, err)
		}
		if c := fuzzOnce.dev.Counters(); c.IOMMUFaults+c.DevMemFaults+c.BadDescriptors != 0 {
			t.Fatalf("the device refused a descriptor the engine let through: %+v", c)
		}
	})
}
