package main

import (
	"testing"
	"time"
)

// TestBatchAllOrNothing: hcomm_submit_batch promises that when any
// transfer is invalid none is submitted. A transfer longer than the
// device moves in one descriptor (the mock's MAX_LEN, 16 MiB) is invalid
// even though both its ranges lie in live allocations: the batch must be
// refused whole, before the valid transfer ahead of it reaches the engine.
func TestBatchAllOrNothing(t *testing.T) {
	c := newCalls()
	const big = 16<<20 + 4096
	s := openT(t, config{PoolSize: 64 << 20, DevMemSize: 64 << 20}, c.invoke)
	src, code := s.allocHost(big)
	if code != codeOK {
		t.Fatalf("allocHost: %d", code)
	}
	dev, code := s.allocDev(big)
	if code != codeOK {
		t.Fatalf("allocDev: %d", code)
	}
	ts := []cTransfer{
		{Src: src, Dst: dev, Size: 64, Callback: 1, UserData: 1},
		{Src: src, Dst: dev, Size: big, Callback: 1, UserData: 2},
	}
	code = s.submitBatch(ts)
	if code == codeOK {
		t.Fatalf("batch with a %d-byte transfer accepted", big)
	}
	if ts[0].ID != 0 {
		t.Errorf("batch refused with %d, but its first transfer was submitted (id %#x)", code, ts[0].ID)
	}
	// Single submit: refused the same way.
	if _, code2 := s.submit(src, dev, big, 0, 0); code2 != code {
		t.Errorf("single submit of %d bytes: %d, batch: %d", big, code2, code)
	}
	time.Sleep(50 * time.Millisecond)
	if n := c.n.Load(); n != 0 {
		t.Errorf("%d callbacks ran for a batch that was refused", n)
	}
}
