package hdma_test

import (
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/internal/uring"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// TestInterruptThroughUring: the engine's way to sleep on a device — an
// io_uring READ of the queue's MSI eventfd — completes when a descriptor
// with Interrupt set completes, not before.
func TestInterruptThroughUring(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 1, 64)
	q := r.qs[0]
	u, err := uring.New(uring.Config{Entries: 8})
	testutil.RequireFeature(t, "io_uring", err)
	defer func() {
		if err := u.Close(); err != nil {
			t.Errorf("uring close: %v", err)
		}
	}()
	counter := new(uint64)
	e, err := u.NextSQE()
	must(t, err)
	e.PrepReadEventfd(q.EventFD(), counter)
	e.SetUserData(42)
	if _, err := u.Submit(); err != nil {
		t.Fatal(err)
	}
	// Work without the interrupt flag does not wake the waiter.
	r.submit(q, hdma.Desc{Op: hdma.OpFence, User: 1})
	r.reap(q, 1)
	time.Sleep(20 * time.Millisecond)
	cqes := make([]uring.CQE, 1)
	if n, _ := u.PeekCQEs(cqes); n != 0 {
		t.Fatalf("eventfd READ completed with no interrupt: res %d", cqes[0].Res())
	}
	r.submit(q, hdma.Desc{Op: hdma.OpH2D, Len: 4096, Src: iova(dataOff), Dst: 0, User: 2},
		hdma.Desc{Op: hdma.OpFence, User: 3, Interrupt: true})
	if _, err := u.SubmitAndWaitTimeout(1, 20*time.Second); err != nil {
		t.Fatalf("wait for the MSI through io_uring: %v", err)
	}
	n, err := u.PeekCQEs(cqes)
	if err != nil || n != 1 {
		t.Fatalf("PeekCQEs: %d, %v", n, err)
	}
	if c := cqes[0]; c.UserData() != 42 || c.Res() != 8 || *counter == 0 {
		t.Fatalf("eventfd READ: user data %d res %d (%v) count %d", c.UserData(), c.Res(), c.Err(), *counter)
	}
	// The interrupt came after the completions were written: both are
	// there to reap, without waiting.
	var out [4]hdma.Completion
	if k := q.Reap(out[:]); k != 2 || out[0].User != 2 || out[1].User != 3 || out[0].Err != nil {
		t.Fatalf("after the interrupt: %d completions %+v", k, out[:k])
	}
	if st := u.Stats(); st.WaitEnters == 0 {
		t.Errorf("no waiting io_uring_enter counted: %+v", st)
	}
}
