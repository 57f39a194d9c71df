package vfio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ParsePCIAddress checks and canonicalises a PCI address in sysfs form,
// "DDDD:BB:DD.F" (domain, bus, device, function, hexadecimal); the domain
// may be omitted ("00:03.0" means "0000:00:03.0").
func ParsePCIAddress(s string) (string, error) {
	orig := s
	if strings.Count(s, ":") == 1 {
		s = "0000:" + s
	}
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("vfio: %w %q: %s", ErrBadAddress, orig, why)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return bad("want DDDD:BB:DD.F")
	}
	devfn := strings.Split(parts[2], ".")
	if len(devfn) != 2 {
		return bad("want DD.F after the bus")
	}
	fields := []struct {
		s    string
		max  uint64
		name string
		w    int
	}{
		{parts[0], 0xffff, "domain", 4},
		{parts[1], 0xff, "bus", 2},
		{devfn[0], 0x1f, "device", 2},
		{devfn[1], 0x7, "function", 1},
	}
	var v [4]uint64
	for i, f := range fields {
		if f.s == "" || len(f.s) > f.w {
			return bad(f.name + " has the wrong length")
		}
		n, err := strconv.ParseUint(f.s, 16, 32)
		if err != nil || n > f.max {
			return bad(f.name + " out of range")
		}
		v[i] = n
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), nil
}

// Sysfs reads and changes PCI device state under a sysfs root. The zero
// value uses /sys; tests point Root at a fixture tree.
type Sysfs struct {
	Root string
}

func (s Sysfs) root() string {
	if s.Root == "" {
		return "/sys"
	}
	return s.Root
}

func (s Sysfs) devDir(addr string) string {
	return filepath.Join(s.root(), "bus", "pci", "devices", addr)
}

// IOMMUGroup returns the IOMMU group number of the device at addr, read
// from its iommu_group link (…/kernel/iommu_groups/N); /dev/vfio/N is the
// group's VFIO node once the device is bound to vfio-pci.
func (s Sysfs) IOMMUGroup(addr string) (int, error) {
	a, err := ParsePCIAddress(addr)
	if err != nil {
		return 0, err
	}
	link, err := os.Readlink(filepath.Join(s.devDir(a), "iommu_group"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(s.devDir(a)); serr != nil {
			return 0, fmt.Errorf("vfio: IOMMU group of %s: no such PCI device: %w", a, serr)
		}
		return 0, fmt.Errorf("vfio: IOMMU group of %s: %w", a, ErrNoIOMMUGroup)
	}
	if err != nil {
		return 0, fmt.Errorf("vfio: IOMMU group of %s: %w", a, err)
	}
	g, err := parseGroupLink(link)
	if err != nil {
		return 0, fmt.Errorf("vfio: IOMMU group of %s: %w", a, err)
	}
	return g, nil
}

// parseGroupLink takes the target of an iommu_group link and returns the
// group number (its last element).
func parseGroupLink(link string) (int, error) {
	base := filepath.Base(link)
	if filepath.Base(filepath.Dir(link)) != "iommu_groups" {
		return 0, fmt.Errorf("iommu_group link %q does not point into iommu_groups", link)
	}
	n, err := strconv.Atoi(base)
	if err != nil || n < 0 || strconv.Itoa(n) != base {
		return 0, fmt.Errorf("iommu_group link %q: group %q is not a number", link, base)
	}
	return n, nil
}

// IDs returns the vendor and device ID of the device at addr.
func (s Sysfs) IDs(addr string) (vendor, device uint16, err error) {
	a, err := ParsePCIAddress(addr)
	if err != nil {
		return 0, 0, err
	}
	if vendor, err = s.readHex16(a, "vendor"); err != nil {
		return 0, 0, err
	}
	if device, err = s.readHex16(a, "device"); err != nil {
		return 0, 0, err
	}
	return vendor, device, nil
}

func (s Sysfs) readHex16(addr, name string) (uint16, error) {
	b, err := os.ReadFile(filepath.Join(s.devDir(addr), name))
	if err != nil {
		return 0, fmt.Errorf("vfio: read %s of %s: %w", name, addr, err)
	}
	v, err := parseHex16(string(b))
	if err != nil {
		return 0, fmt.Errorf("vfio: read %s of %s: %w", name, addr, err)
	}
	return v, nil
}

// parseHex16 parses a sysfs ID file: "0x1234\n".
func parseHex16(s string) (uint16, error) {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "0x") || len(t) < 3 || len(t) > 6 {
		return 0, fmt.Errorf("malformed ID %q, want 0xNNNN", s)
	}
	v, err := strconv.ParseUint(t[2:], 16, 16)
	if err != nil {
		return 0, fmt.Errorf("malformed ID %q: %w", s, err)
	}
	return uint16(v), nil
}

// Find lists the addresses of all PCI devices with the given vendor and
// device ID, sorted.
func (s Sysfs) Find(vendor, device uint16) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.root(), "bus", "pci", "devices"))
	if err != nil {
		return nil, fmt.Errorf("vfio: list PCI devices: %w", err)
	}
	var out []string
	for _, e := range ents {
		a, err := ParsePCIAddress(e.Name())
		if err != nil || a != e.Name() {
			continue
		}
		v, d, err := s.IDs(a)
		if err != nil {
			continue
		}
		if v == vendor && d == device {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Driver returns the name of the driver bound to the device at addr, or ""
// when none is.
func (s Sysfs) Driver(addr string) (string, error) {
	a, err := ParsePCIAddress(addr)
	if err != nil {
		return "", err
	}
	link, err := os.Readlink(filepath.Join(s.devDir(a), "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("vfio: driver of %s: %w", a, err)
	}
	return filepath.Base(link), nil
}

// Bind binds the device at addr to driver (e.g. "vfio-pci") through
// driver_override: it unbinds the current driver, sets the override and
// asks the kernel to probe. It returns the driver that was bound before
// ("" for none), for Unbind to restore. Needs root.
func (s Sysfs) Bind(addr, driver string) (previous string, err error) {
	a, err := ParsePCIAddress(addr)
	if err != nil {
		return "", err
	}
	if driver == "" || strings.ContainsAny(driver, "/\n") {
		return "", fmt.Errorf("vfio: bind %s: bad driver name %q", a, driver)
	}
	prev, err := s.Driver(a)
	if err != nil {
		return "", err
	}
	if prev == driver {
		return prev, nil
	}
	if prev != "" {
		if err := s.write(filepath.Join(s.devDir(a), "driver", "unbind"), a); err != nil {
			return "", fmt.Errorf("vfio: bind %s to %s: unbind from %s: %w", a, driver, prev, err)
		}
	}
	if err := s.write(filepath.Join(s.devDir(a), "driver_override"), driver); err != nil {
		return prev, fmt.Errorf("vfio: bind %s to %s: driver_override: %w", a, driver, err)
	}
	if err := s.write(filepath.Join(s.root(), "bus", "pci", "drivers_probe"), a); err != nil {
		return prev, fmt.Errorf("vfio: bind %s to %s: drivers_probe: %w", a, driver, err)
	}
	got, err := s.Driver(a)
	if err != nil {
		return prev, err
	}
	if got != driver {
		return prev, fmt.Errorf("vfio: bind %s to %s: device is bound to %q after probing (is the %s module loaded?)", a, driver, got, driver)
	}
	return prev, nil
}

// Unbind undoes Bind: it unbinds the device's current driver, clears
// driver_override and, when previous is not empty, probes again so that the
// previous driver (the kernel's match for the device) takes it back.
func (s Sysfs) Unbind(addr, previous string) error {
	a, err := ParsePCIAddress(addr)
	if err != nil {
		return err
	}
	cur, err := s.Driver(a)
	if err != nil {
		return err
	}
	if cur != "" {
		if err := s.write(filepath.Join(s.devDir(a), "driver", "unbind"), a); err != nil {
			return fmt.Errorf("vfio: unbind %s from %s: %w", a, cur, err)
		}
	}
	// An empty line clears the override.
	if err := s.write(filepath.Join(s.devDir(a), "driver_override"), "\n"); err != nil {
		return fmt.Errorf("vfio: unbind %s: clear driver_override: %w", a, err)
	}
	if previous == "" {
		return nil
	}
	if err := s.write(filepath.Join(s.root(), "bus", "pci", "drivers_probe"), a); err != nil {
		return fmt.Errorf("vfio: rebind %s to %s: %w", a, previous, err)
	}
	if got, err := s.Driver(a); err != nil || got != previous {
		return fmt.Errorf("vfio: rebind %s: bound to %q, want %q (err %v)", a, got, previous, err)
	}
	return nil
}

func (s Sysfs) write(path, v string) error {
	// O_TRUNC as a shell redirection does: sysfs ignores it, fixtures need it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(v)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}
