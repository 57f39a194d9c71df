package mock_test

import (
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// TestErrorPrefix: every error the mock returns starts with "mock: " once.
func TestErrorPrefix(t *testing.T) {
	d := newDevice(t, mock.Config{})
	closed, err := mock.New(mock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	bar0, err := d.Region(vfio.RegionBAR0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  func() error
	}{
		{"New", func() error { _, err := mock.New(mock.Config{Queues: -1}); return err }},
		{"Region", func() error { _, err := d.Region(9); return err }},
		{"Region closed", func() error { _, err := closed.Region(vfio.RegionBAR0); return err }},
		{"MapDMA", func() error { return d.MapDMA(3, make([]byte, 8), vfio.DMARead) }},
		{"UnmapDMA", func() error { return d.UnmapDMA(0x1000, 0x1000) }},
		{"SetIRQs", func() error { return d.SetIRQs(vfio.IRQINTx, 0, []int{0}) }},
		{"InjectFault", func() error { return d.InjectFault(mock.Fault{}) }},
		{"Write8", func() error { return bar0.Write8(0, 1) }},
		{"Read32 misaligned", func() error { _, err := bar0.Read32(1); return err }},
	}
	for _, tc := range tests {
		err := tc.err()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "mock: ") || strings.Count(msg, "mock:") != 1 {
			t.Errorf("%s: %q does not start with one \"mock: \"", tc.name, msg)
		}
	}
}
