package vfio

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEventFD(t *testing.T) {
	e, err := NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if n, err := e.TryRead(); n != 0 || err != nil {
		t.Fatalf("TryRead on an idle eventfd = %d, %v", n, err)
	}
	signal := func(v uint64) {
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], v)
		if _, err := unix.Write(e.Fd(), b[:]); err != nil {
			t.Fatal(err)
		}
	}
	signal(2)
	signal(3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := e.Wait(ctx); n != 5 || err != nil {
		t.Fatalf("Wait = %d, %v; want the summed count 5", n, err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		signal(1)
	}()
	if n, err := e.Wait(ctx); n != 1 || err != nil {
		t.Fatalf("Wait for a later signal = %d, %v", n, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel2()
	if _, err := e.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait without a signal = %v, want DeadlineExceeded", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
