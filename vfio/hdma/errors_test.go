package hdma_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// TestErrorPrefix: every error the driver returns starts with "hdma: "
// once, whether its cause is one of the package's own (prefixed) sentinels,
// another of its errors, or the device's.
func TestErrorPrefix(t *testing.T) {
	r := newRig(t, mock.Config{}, hdma.Config{}, 2, 64)
	closed := newRig(t, mock.Config{}, hdma.Config{}, 1, 64)
	must(t, closed.drv.Close())
	tests := []struct {
		name string
		err  func() error
	}{
		{"Open config", func() error { _, err := hdma.Open(r.dev, hdma.Config{ReadyTimeout: -1}); return err }},
		{"SetupQueue enabled", func() error { _, err := r.drv.SetupQueue(hdma.QueueConfig{Index: 1, Entries: 64}); return err }},
		{"LayoutQueue", func() error { _, err := hdma.LayoutQueue(0, 64, nil, 0, false); return err }},
		{"WaitInterrupt", func() error { _, err := r.qs[1].WaitInterrupt(0); return err }},
		{"Enqueue closed", func() error { return closed.qs[0].Enqueue(hdma.Desc{Op: hdma.OpFence}) }},
		{"Recover closed", func() error { return closed.drv.Recover() }},
		{"Reset closed", func() error { return closed.drv.Reset() }},
	}
	for _, tc := range tests {
		err := tc.err()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "hdma: ") || strings.Count(msg, "hdma:") != 1 {
			t.Errorf("%s: %q does not start with one \"hdma: \"", tc.name, msg)
		}
	}
	// A device error keeps its own package's prefix behind the driver's.
	dev, err := mock.New(mock.Config{})
	must(t, err)
	must(t, dev.Close())
	_, err = hdma.Open(dev, hdma.Config{})
	if !errors.Is(err, vfio.ErrClosed) || !strings.HasPrefix(err.Error(), "hdma: ") || !strings.Contains(err.Error(), "mock: ") {
		t.Errorf("Open on a closed device: %v, want vfio.ErrClosed as hdma: ... mock: ...", err)
	}
}
