package hdmadev_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// TestCloseAfterDeviceReset: the device resets itself (an injected reset)
// and the host, not having reaped that yet, rings the doorbell for another
// transfer the device never sees (its queues are disabled). Close must still
// give every transfer its callback once and take nothing to the grave: the
// reset device does no more DMA, so what it never completed is failed by
// the driver.
func TestCloseAfterDeviceReset(t *testing.T) {
	for _, mode := range []engine.Mode{engine.ModePoll, engine.ModeReaper} {
		t.Run(mode.String(), func(t *testing.T) {
			m, err := mock.New(mock.Config{DevMemSize: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			be, err := hdmadev.New(m, hdmadev.Config{CloseDevice: true, CPUThreshold: -1})
			if err != nil {
				t.Fatal(err)
			}
			e, err := engine.Open(engine.Config{Backend: be, Mode: mode, PoolSize: 4 << 20, Backings: []hugepage.Backing{hugepage.Backing4K}})
			if err != nil {
				t.Fatal(err)
			}
			// The reset fires on the first descriptor; the second is
			// submitted as soon as it has (in ModeReaper the reaper may
			// see the reset first: then the second is never forwarded).
			if err := m.InjectFault(mock.Fault{Kind: mock.FaultReset, Nth: 1}); err != nil {
				t.Fatal(err)
			}
			src, _ := e.Alloc(4096)
			var calls [2]atomic.Int32
			var errs [2]atomic.Value
			submit := func(i int) {
				_, err := e.Submit(engine.Transfer{Src: engine.Host(src), Dst: engine.DeviceAt(uint64(i) * 4096), Len: 4096,
					User: uint64(i), Callback: func(r engine.Result) {
						calls[r.User].Add(1)
						if r.Err != nil {
							errs[r.User].Store(r.Err)
						}
					}})
				if err != nil {
					t.Fatalf("submit %d: %v", i, err)
				}
			}
			submit(0)
			for deadline := time.Now().Add(5 * time.Second); m.Counters().InjectedResets == 0; {
				if time.Now().After(deadline) {
					t.Fatal("the injected reset did not fire")
				}
				time.Sleep(100 * time.Microsecond)
			}
			submit(1)
			done := make(chan error, 1)
			go func() { done <- e.Close() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Close: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return in 10 s")
			}
			for i := range calls {
				if n := calls[i].Load(); n != 1 {
					t.Errorf("transfer %d: %d callbacks, want 1", i, n)
				}
			}
			if err, _ := errs[0].Load().(error); !errors.Is(err, engine.ErrDevice) {
				t.Errorf("transfer 0 (the one the device reset on): %v, want ErrDevice", err)
			}
		})
	}
}
