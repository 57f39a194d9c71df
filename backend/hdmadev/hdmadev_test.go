package hdmadev_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func TestConfigErrors(t *testing.T) {
	m, err := mock.New(mock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		cfg   hdmadev.Config
		field string
	}{
		{hdmadev.Config{CPUThreshold: -2}, "CPUThreshold"},
		{hdmadev.Config{CPUThreshold: 1 << 30}, "CPUThreshold"},
		{hdmadev.Config{Timeout: time.Microsecond}, "Timeout"},
		{hdmadev.Config{Queue: -1}, "Queue"},
	} {
		if _, err := hdmadev.New(m, c.cfg); !errors.Is(err, engine.ErrBadConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("New(%+v): %v, want ErrBadConfig naming %s", c.cfg, err, c.field)
		}
	}
	if _, err := hdmadev.New(nil, hdmadev.Config{}); !errors.Is(err, engine.ErrBadConfig) || !strings.Contains(err.Error(), "mock.New") {
		t.Errorf("New(nil): %v, want ErrBadConfig naming mock.New", err)
	}
}

// TestDeviceMemory: AllocDevice hands out the device's memory, bounded by
// what it has; transfers into an allocated range land there; frees are
// checked.
func TestDeviceMemory(t *testing.T) {
	m, err := mock.New(mock.Config{DevMemSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	be, err := hdmadev.New(m, hdmadev.Config{CloseDevice: true, CPUThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Config{Backend: be, PoolSize: 4 << 20, Backings: []hugepage.Backing{hugepage.Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if d := e.Backend(); d.DeviceMemory != 1<<20 || d.Name != "hdma" {
		t.Fatalf("description %+v: want 1 MiB of device memory", d)
	}
	r, err := e.AllocDevice(4000)
	if err != nil || r.Len != 4032 {
		t.Fatalf("AllocDevice(4000): %+v, %v", r, err)
	}
	if !e.DeviceAllocated(r.Off, 4000) || e.DeviceAllocated(r.Off+4000, 64) {
		t.Error("DeviceAllocated disagrees with the allocation")
	}
	if _, err := e.AllocDevice(2 << 20); !errors.Is(err, engine.ErrOutOfBounds) {
		t.Errorf("AllocDevice beyond the device: %v, want ErrOutOfBounds", err)
	}
	src, _ := e.Alloc(4000)
	back, _ := e.Alloc(4000)
	copy(src.Bytes(), bytes.Repeat([]byte("hdma"), 1000))
	ctx := t.Context()
	for _, tr := range []engine.Transfer{
		{Src: engine.Host(src), Dst: engine.DeviceAt(r.Off), Len: 4000},
		{Src: engine.DeviceAt(r.Off), Dst: engine.Host(back), Len: 4000},
	} {
		id, err := e.Submit(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(src.Bytes()[:4000], back.Bytes()[:4000]) {
		t.Fatal("round trip through allocated device memory differs")
	}
	if err := e.FreeDevice(r.Off); err != nil {
		t.Fatal(err)
	}
	if err := e.FreeDevice(r.Off); !errors.Is(err, engine.ErrFreedBlock) {
		t.Errorf("double FreeDevice: %v, want ErrFreedBlock", err)
	}
}
