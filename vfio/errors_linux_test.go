package vfio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorPrefix: every error this package returns starts with "vfio: "
// once, however deep its cause: an error of one vfio function inside
// another's (OpenPCIWith over Sysfs, DMASpace over its allocator) keeps a
// single prefix.
func TestErrorPrefix(t *testing.T) {
	root := t.TempDir()
	sys := Sysfs{Root: root}
	// A device directory with a malformed vendor ID and no IOMMU group.
	dev := filepath.Join(root, "bus", "pci", "devices", "0000:00:02.0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "vendor"), []byte("0x12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	alloc, err := NewIOVAAllocator([]IOVARange{{0, 1<<32 - 1}}, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(IOVARange{0, 1<<32 - 1})
	space, err := NewDMASpace(rec, DMAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	closed, err := NewDMASpace(newRecorder(IOVARange{0, 1<<32 - 1}), DMAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	a := newArena(t, 4096)
	tests := []struct {
		name string
		err  func() error
	}{
		{"ParsePCIAddress", func() error { _, err := ParsePCIAddress("zz"); return err }},
		{"NewIOVAAllocator", func() error { _, err := NewIOVAAllocator(nil, 0, 3); return err }},
		{"Alloc", func() error { _, err := alloc.Alloc(0, 4096); return err }},
		{"Release", func() error { return alloc.Release(0x5000) }},
		{"IOMMUGroup no device", func() error { _, err := sys.IOMMUGroup("0000:00:01.0"); return err }},
		{"IOMMUGroup no group", func() error { _, err := sys.IOMMUGroup("0000:00:02.0"); return err }},
		{"IDs", func() error { _, _, err := sys.IDs("0000:00:02.0"); return err }},
		{"OpenPCIWith", func() error { _, err := OpenPCIWith(sys, "0000:00:02.0"); return err }},
		{"NewDMASpace", func() error { _, err := NewDMASpace(newRecorder(), DMAConfig{}); return err }},
		{"MapArena closed", func() error { _, err := closed.MapArena(a, DMARead); return err }},
		{"UnmapArena", func() error { return space.UnmapArena(a) }},
		{"IOVA", func() error { _, err := space.IOVA(a, 0, 64); return err }},
		{"Check", func() error { return space.Check(0x1000, 64, DMARead) }},
		{"EnableBusMaster", func() error { return EnableBusMaster(rec) }},
	}
	for _, tc := range tests {
		err := tc.err()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "vfio: ") || strings.Count(msg, "vfio:") != 1 {
			t.Errorf("%s: %q does not start with one \"vfio: \"", tc.name, msg)
		}
	}
}
