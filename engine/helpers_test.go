package engine_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// quiet is a logger for tests that provoke resets on purpose.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// small is a test configuration: a small 4 KiB-page pool (fast to map and
// unmap), quiet logs, and an HDMA backend on a fresh vfio-mock device
// unless cfg names a backend.
func small(t testing.TB, cfg engine.Config) engine.Config {
	if cfg.Backend == nil {
		cfg.Backend = hdmaBE(t, nil, hdmadev.Config{})
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 4 << 20
	}
	if cfg.Backings == nil {
		cfg.Backings = []hugepage.Backing{hugepage.Backing4K}
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	return cfg
}

func newMock(t testing.TB, cfg mock.Config) *mock.Device {
	t.Helper()
	cfg.Logger = quiet()
	d, err := mock.New(cfg)
	if err != nil {
		t.Fatalf("mock: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func open(t testing.TB, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.Open(small(t, cfg))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func alloc(t testing.TB, e *engine.Engine, n int) engine.Block {
	t.Helper()
	b, err := e.Alloc(n)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n, err)
	}
	return b
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hdmaBE is an HDMA backend over dev, or over a fresh vfio-mock device
// (closed with the backend) when dev is nil.
func hdmaBE(t testing.TB, dev vfio.Device, cfg hdmadev.Config) *hdmadev.Backend {
	t.Helper()
	if dev == nil {
		m, err := mock.New(mock.Config{Logger: quiet()})
		if err != nil {
			t.Fatalf("mock: %v", err)
		}
		dev, cfg.CloseDevice = m, true
	}
	be, err := hdmadev.New(dev, cfg)
	if err != nil {
		t.Fatalf("hdmadev.New: %v", err)
	}
	return be
}

// fileBE is a file backend over f.
func fileBE(t testing.TB, f *os.File) backend.Backend {
	t.Helper()
	be, err := uringfile.New(f, uringfile.Config{})
	if err != nil {
		t.Fatalf("uringfile.New: %v", err)
	}
	return be
}
