package engine

import (
	"context"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
)

func TestSmoke(t *testing.T) {
	e, err := Open(Config{PoolSize: 4 << 20, Backings: []hugepage.Backing{hugepage.Backing4K}, CPUThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.Bytes() {
		b.Bytes()[i] = byte(i)
	}
	got := make(chan Result, 1)
	id, err := e.Submit(Transfer{Src: Host(b), Dst: DeviceAt(0), Len: 4096, Callback: func(r Result) { got <- r }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	r := <-got
	t.Logf("result %+v stats %+v", r, e.Stats())
	b2, _ := e.Alloc(4096)
	id, err = e.Submit(Transfer{Src: DeviceAt(0), Dst: Host(b2), Len: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	for i, v := range b2.Bytes() {
		if v != byte(i) {
			t.Fatalf("byte %d = %d", i, v)
		}
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v", e.Stats())
}
