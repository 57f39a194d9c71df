package engine_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
)

// goid is the calling goroutine's ID (from its stack header).
func goid() string {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	return string(s[:bytes.IndexByte(s, ' ')])
}

// TestWaiterReapsOwn: in the default mode a goroutine that Submits and then
// Waits completes its own transfer — the callback runs on it, not on the
// reaper — so a synchronous transfer needs no hand-off between threads. A
// reaper that kept cycling beside the waiter won those completions and the
// waiter then waited for it (2.6 µs instead of 0.25 µs per 4 KiB transfer
// on vfio-mock). Spin is long so that scheduling delays on a loaded
// machine cannot let the reaper's stand-back lapse between transfers.
func TestWaiterReapsOwn(t *testing.T) {
	tests := []struct {
		name string
		cpu  int
	}{
		{"cpu-path", 1 << 16}, // completes at Submit (Inline), delivered by a cycle
		{"dma", -1},           // the device completes it
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := open(t, engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: tt.cpu}), Spin: time.Second})
			b := alloc(t, e, 4096)
			me := goid()
			// Until the reaper has seen the waiter's first cycles (it
			// looks between its own), it may take a few: seen up to the
			// 21st transfer.
			const n, warmUp = 2000, 200
			onWaiter := 0
			ctx := ctxT(t, 30*time.Second)
			for i := range n {
				var ran string
				id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096,
					Callback: func(engine.Result) { ran = goid() }})
				must(t, err)
				must(t, e.Wait(ctx, id))
				if ran == "" {
					t.Fatalf("transfer %d: Wait returned before its callback ran", i)
				}
				if ran == me && i >= warmUp {
					onWaiter++
				}
			}
			if onWaiter != n-warmUp {
				t.Errorf("%d of the %d callbacks after the first %d ran on the waiting goroutine, want all", onWaiter, n-warmUp, warmUp)
			}
		})
	}
}

// TestReaperSleepsBesideWaiter: while a goroutine keeps waiting and
// reaping for itself, the reaper stands aside asleep rather than yielding
// in a loop (a busy thread beside the waiter's, on a 2-CPU machine the
// last CPU); once the waiter is gone, the reaper delivers a callback that
// nobody waits on.
func TestReaperSleepsBesideWaiter(t *testing.T) {
	e := open(t, engine.Config{Backend: hdmaBE(t, nil, hdmadev.Config{CPUThreshold: 1 << 16})})
	b := alloc(t, e, 4096)
	ctx := ctxT(t, 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	aside := false
	for i := 0; !aside; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d synchronous transfers the reaper never stood aside asleep", i)
		}
		id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096})
		must(t, err)
		must(t, e.Wait(ctx, id))
		aside = e.ReaperStandsAside()
	}
	done := make(chan struct{})
	_, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096,
		Callback: func(engine.Result) { close(done) }})
	must(t, err)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the callback of a transfer nobody waits on never ran")
	}
}
