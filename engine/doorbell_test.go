package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// TestCallbackSubmissionsShareDoorbell: the transfers a batch of callbacks
// submits (a pipeline's next steps) reach the device with one doorbell
// after the callbacks, not one each. An inline device completes a batch
// inside its doorbell, so one Poll reaps all of it and runs every callback
// in one cycle; each callback submits one follow-up transfer, and the SQ
// doorbells the device counted for them are the test's measure. Bytes are
// checked at the end: deferred is not lost.
func TestCallbackSubmissionsShareDoorbell(t *testing.T) {
	for _, n := range []int{1, 2, 16} {
		t.Run(fmt.Sprintf("callbacks=%d", n), func(t *testing.T) {
			m, err := mock.New(mock.Config{Inline: true, Logger: quiet()})
			must(t, err)
			t.Cleanup(func() { m.Close() })
			e := open(t, engine.Config{Mode: engine.ModePoll, Backend: hdmaBE(t, m, hdmadev.Config{CPUThreshold: -1})})
			src := alloc(t, e, n*4096)
			back := alloc(t, e, n*4096)
			for i := range src.Bytes() {
				src.Bytes()[i] = byte(i*7 + i>>12)
			}
			followed := 0
			var followErr error
			ts := make([]engine.Transfer, n)
			for i := range ts {
				ts[i] = engine.Transfer{Src: engine.HostAt(src, i*4096), Dst: engine.DeviceAt(uint64(i) * 4096), Len: 4096,
					Callback: func(r engine.Result) {
						if r.Err != nil {
							followErr = r.Err
							return
						}
						_, err := e.Submit(engine.Transfer{Src: engine.DeviceAt(uint64(i) * 4096), Dst: engine.HostAt(back, i*4096), Len: 4096,
							Callback: func(r engine.Result) {
								if r.Err != nil {
									followErr = r.Err
								}
								followed++
							}})
						if err != nil {
							followErr = err
						}
					}}
			}
			if _, err := e.SubmitBatch(ts, nil); err != nil {
				t.Fatal(err)
			}
			before := m.Counters().SQDoorbells
			if got := e.Poll(); got != n {
				t.Fatalf("Poll completed %d, want the whole batch of %d", got, n)
			}
			if bells := m.Counters().SQDoorbells - before; bells != 1 {
				t.Errorf("%d callbacks that submit rang %d SQ doorbells, want 1", n, bells)
			}
			deadline := time.Now().Add(10 * time.Second)
			for followed < n && time.Now().Before(deadline) {
				e.Poll()
			}
			if followErr != nil || followed != n {
				t.Fatalf("follow-ups: %d of %d done, error %v", followed, n, followErr)
			}
			for i := range src.Bytes() {
				if back.Bytes()[i] != src.Bytes()[i] {
					t.Fatalf("byte %d came back %#x, want %#x", i, back.Bytes()[i], src.Bytes()[i])
				}
			}
		})
	}
}
