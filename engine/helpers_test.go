package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// quiet is a logger for tests that provoke resets on purpose.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// small is a test configuration: a small 4 KiB-page pool (fast to map and
// unmap), quiet logs.
func small(cfg Config) Config {
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

func open(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := Open(small(cfg))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func alloc(t testing.TB, e *Engine, n int) Block {
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
