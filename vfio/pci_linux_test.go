package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// newFixture builds a sysfs tree in a temporary directory: four PCI
// devices (edu bound to vfio-pci in group 1, a virtio device without IOMMU
// group, an unbound edu in group 3, a device with a malformed vendor file
// and a bad group link) and a stray entry. It is built here rather than
// kept in testdata because PCI addresses contain ':', which Go module zips
// refuse in file names.
func newFixture(t *testing.T) Sysfs {
	t.Helper()
	root := t.TempDir()
	devs := "bus/pci/devices/"
	files := map[string]string{
		devs + "0000:00:01.0/vendor":          "0x1234\n",
		devs + "0000:00:01.0/device":          "0x11e8\n",
		devs + "0000:00:01.0/driver_override": "vfio-pci\n",
		devs + "0000:00:02.0/vendor":          "0x1af4\n",
		devs + "0000:00:02.0/device":          "0x1000\n",
		devs + "0000:00:02.0/driver_override": "(null)\n",
		devs + "0000:00:03.0/vendor":          "0x1234\n",
		devs + "0000:00:03.0/device":          "0x11e8\n",
		devs + "0000:00:03.0/driver_override": "(null)\n",
		devs + "0000:00:04.0/vendor":          "zzz\n",
		devs + "0000:00:04.0/device":          "0x11e8\n",
		devs + "garbage/.keep":                "",
		"bus/pci/drivers_probe":               "",
		"bus/pci/drivers/vfio-pci/unbind":     "",
		"bus/pci/drivers/virtio-pci/unbind":   "",
		"kernel/iommu_groups/1/.keep":         "",
		"kernel/iommu_groups/3/.keep":         "",
	}
	links := map[string]string{
		devs + "0000:00:01.0/iommu_group": "../../../../kernel/iommu_groups/1",
		devs + "0000:00:01.0/driver":      "../../../../bus/pci/drivers/vfio-pci",
		devs + "0000:00:02.0/driver":      "../../../../bus/pci/drivers/virtio-pci",
		devs + "0000:00:03.0/iommu_group": "../../../../kernel/iommu_groups/3",
		devs + "0000:00:04.0/iommu_group": "../../../../kernel/not_groups/x",
	}
	for p, c := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	return Sysfs{Root: root}
}

func TestParsePCIAddress(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"0000:00:03.0", "0000:00:03.0", true},
		{"00:03.0", "0000:00:03.0", true},
		{"0001:3A:1f.7", "0001:3a:1f.7", true},
		{"ffff:ff:1f.7", "ffff:ff:1f.7", true},
		{"0000:00:20.0", "", false}, // device > 0x1f
		{"0000:00:03.8", "", false}, // function > 7
		{"0000:100:03.0", "", false},
		{"00000:00:03.0", "", false},
		{"0000:00:03", "", false},
		{"0000:00:03.0.1", "", false},
		{"0000:00:0g.0", "", false},
		{"0000::03.0", "", false},
		{"", "", false},
		{"../../etc", "", false},
		{"0000:00:+3.0", "", false},
	}
	for _, tc := range tests {
		got, err := ParsePCIAddress(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParsePCIAddress(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadAddress) {
			t.Errorf("ParsePCIAddress(%q): %v does not wrap ErrBadAddress", tc.in, err)
		}
	}
}

func TestSysfsFixture(t *testing.T) {
	fixture := newFixture(t)
	g, err := fixture.IOMMUGroup("00:01.0")
	if err != nil || g != 1 {
		t.Errorf("IOMMUGroup(01.0) = %d, %v; want 1", g, err)
	}
	if _, err := fixture.IOMMUGroup("0000:00:02.0"); !errors.Is(err, ErrNoIOMMUGroup) {
		t.Errorf("IOMMUGroup(02.0) = %v, want ErrNoIOMMUGroup", err)
	}
	if _, err := fixture.IOMMUGroup("0000:00:09.0"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("IOMMUGroup(absent) = %v, want ErrNotExist", err)
	}
	if _, err := fixture.IOMMUGroup("0000:00:04.0"); err == nil || !strings.Contains(err.Error(), "iommu_groups") {
		t.Errorf("IOMMUGroup(bad link) = %v", err)
	}
	v, d, err := fixture.IDs("0000:00:02.0")
	if err != nil || v != 0x1af4 || d != 0x1000 {
		t.Errorf("IDs(02.0) = %04x:%04x, %v", v, d, err)
	}
	if _, _, err := fixture.IDs("0000:00:04.0"); err == nil {
		t.Errorf("IDs with a malformed vendor file: no error")
	}
	found, err := fixture.Find(0x1234, 0x11e8)
	if err != nil || len(found) != 2 || found[0] != "0000:00:01.0" || found[1] != "0000:00:03.0" {
		t.Errorf("Find(edu) = %v, %v", found, err)
	}
	for addr, want := range map[string]string{"0000:00:01.0": "vfio-pci", "0000:00:02.0": "virtio-pci", "0000:00:03.0": ""} {
		if got, err := fixture.Driver(addr); err != nil || got != want {
			t.Errorf("Driver(%s) = %q, %v; want %q", addr, got, err, want)
		}
	}
	if _, err := (Sysfs{Root: t.TempDir()}).Find(1, 2); err == nil {
		t.Errorf("Find without a PCI bus: no error")
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSysfsBindWrites checks what Bind and Unbind write where. A fixture
// has no kernel behind it, so the probe "fails" (the driver link does not
// change) and Bind must say so; the real bind is tested in the VM.
func TestSysfsBindWrites(t *testing.T) {
	s := newFixture(t)
	root := s.Root
	dev := filepath.Join(root, "bus/pci/devices/0000:00:02.0")
	prev, err := s.Bind("0000:00:02.0", "vfio-pci")
	if err == nil || !strings.Contains(err.Error(), `bound to "virtio-pci" after probing`) {
		t.Fatalf("Bind on a fixture: %v", err)
	}
	if prev != "virtio-pci" {
		t.Errorf("previous driver %q", prev)
	}
	if got := readFile(t, filepath.Join(root, "bus/pci/drivers/virtio-pci/unbind")); got != "0000:00:02.0" {
		t.Errorf("unbind got %q", got)
	}
	if got := readFile(t, filepath.Join(dev, "driver_override")); got != "vfio-pci" {
		t.Errorf("driver_override got %q", got)
	}
	if got := readFile(t, filepath.Join(root, "bus/pci/drivers_probe")); got != "0000:00:02.0" {
		t.Errorf("drivers_probe got %q", got)
	}
	// Already bound: nothing to do.
	if prev, err := s.Bind("0000:00:01.0", "vfio-pci"); err != nil || prev != "vfio-pci" {
		t.Errorf("Bind of a bound device = %q, %v", prev, err)
	}
	if _, err := s.Bind("0000:00:03.0", "../x"); err == nil {
		t.Errorf("Bind accepted a driver name with a slash")
	}
	// Unbind of a device without driver clears the override only.
	if err := s.Unbind("0000:00:03.0", ""); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "bus/pci/devices/0000:00:03.0/driver_override")); got != "\n" {
		t.Errorf("driver_override after Unbind %q, want an empty line", got)
	}
}

func TestParseHelpers(t *testing.T) {
	for in, want := range map[string]int{"../../../../kernel/iommu_groups/7": 7, "/sys/kernel/iommu_groups/12": 12} {
		if got, err := parseGroupLink(in); err != nil || got != want {
			t.Errorf("parseGroupLink(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"../iommu_groups/x", "../groups/1", "../iommu_groups/-1", "../iommu_groups/01", "iommu_groups"} {
		if _, err := parseGroupLink(in); err == nil {
			t.Errorf("parseGroupLink(%q): no error", in)
		}
	}
	for in, want := range map[string]uint16{"0x1234\n": 0x1234, "0x0\n": 0, "0xffff": 0xffff} {
		if got, err := parseHex16(in); err != nil || got != want {
			t.Errorf("parseHex16(%q) = %#x, %v", in, got, err)
		}
	}
	for _, in := range []string{"1234", "0x", "0x10000", "0xzz", ""} {
		if _, err := parseHex16(in); err == nil {
			t.Errorf("parseHex16(%q): no error", in)
		}
	}
}

// FuzzParsePCIAddress: a canonical answer parses to itself; nothing panics.
func FuzzParsePCIAddress(f *testing.F) {
	for _, s := range []string{"0000:00:03.0", "00:03.0", "ffff:ff:1f.7", "0000:00:20.0", "::.", "0:0:0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParsePCIAddress(s)
		if err != nil {
			return
		}
		again, err := ParsePCIAddress(got)
		if err != nil || again != got || len(got) != 12 {
			t.Fatalf("%q → %q → %q, %v", s, got, again, err)
		}
	})
}

// FuzzParseSysfs: the sysfs value parsers never panic and agree with their
// own output.
func FuzzParseSysfs(f *testing.F) {
	f.Add("0x1234\n", "../../../kernel/iommu_groups/3")
	f.Add("0x", "iommu_groups/")
	f.Fuzz(func(t *testing.T, id, link string) {
		if v, err := parseHex16(id); err == nil {
			if v2, err := parseHex16(fmt.Sprintf("0x%04x", v)); err != nil || v2 != v {
				t.Fatalf("%q → %#x, re-parse %#x %v", id, v, v2, err)
			}
		}
		if g, err := parseGroupLink(link); err == nil && g < 0 {
			t.Fatalf("%q → negative group %d", link, g)
		}
	})
}
