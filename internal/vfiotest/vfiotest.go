// Package vfiotest holds test helpers for code that needs a real VFIO
// device: they open QEMU's edu device in the VM tests (make test-vm) and
// decide, everywhere else, whether a missing VFIO is a skip or a failure.
//
// The rule: kernel VFIO is the one privileged feature the host of hcomm's
// development machines and CI cannot provide (its kernel has no VFIO and no
// IOMMU), so a test that needs it skips there with "no VFIO in this kernel"
// even under HCOMM_REQUIRE_PRIVILEGED=1 (testutil.SkipAllowed) — because
// make test-vm runs the same test in a QEMU guest that has VFIO, a vIOMMU
// and an edu device. Inside that guest (HCOMM_IN_VM=1, set by the guest's
// /init) a missing VFIO, device or privilege is a failure.
package vfiotest

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/vfio"
)

// InVMEnv is set to 1 by the VM test guest's /init.
const InVMEnv = "HCOMM_IN_VM"

// InVM reports whether the test runs inside the VM test guest.
func InVM() bool { return os.Getenv(InVMEnv) == "1" }

// missing stops the test because the environment lacks VFIO or the device:
// a failure in the guest, an allowed skip elsewhere.
func missing(t testing.TB, what string) {
	t.Helper()
	if InVM() {
		t.Fatalf("%s — but this is the VM test guest (%s=1), which must provide it", what, InVMEnv)
	}
	testutil.SkipAllowed(t, what+": make test-vm runs this test in a QEMU guest with VFIO, a vIOMMU and an edu device")
}

// RequireVFIO stops the test unless the kernel has VFIO and the test runs
// as root.
func RequireVFIO(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(vfio.ContainerPath); err != nil {
		missing(t, "no VFIO in this kernel ("+vfio.ContainerPath+": "+errString(err)+")")
	}
	if os.Geteuid() != 0 {
		if InVM() {
			t.Fatalf("the VM test guest runs tests as root, but euid is %d", os.Geteuid())
		}
		testutil.RequirePrivileged(t, "open VFIO devices")
	}
}

// FindDevice returns the address of the first PCI device with the given IDs,
// bound to vfio-pci (binding it when needed and restoring the previous
// driver at cleanup).
func FindDevice(t testing.TB, vendor, device uint16) string {
	t.Helper()
	RequireVFIO(t)
	var sys vfio.Sysfs
	addrs, err := sys.Find(vendor, device)
	if err != nil {
		t.Fatalf("find PCI %04x:%04x: %v", vendor, device, err)
	}
	if len(addrs) == 0 {
		missing(t, fmt.Sprintf("no PCI device %04x:%04x (QEMU edu) on this machine", vendor, device))
	}
	addr := addrs[0]
	prev, err := sys.Bind(addr, "vfio-pci")
	if err != nil {
		t.Fatalf("bind %s to vfio-pci: %v", addr, err)
	}
	if prev != "vfio-pci" {
		t.Cleanup(func() {
			if err := sys.Unbind(addr, prev); err != nil {
				t.Errorf("restore driver %q of %s: %v", prev, addr, err)
			}
		})
	}
	return addr
}

// OpenDevice opens the first device with the given IDs through VFIO and
// closes it at cleanup (failing the test if Close fails).
func OpenDevice(t testing.TB, vendor, device uint16) *vfio.KernelDevice {
	t.Helper()
	addr := FindDevice(t, vendor, device)
	d, err := vfio.OpenPCI(addr)
	if err != nil {
		if errors.Is(err, vfio.ErrNoVFIO) {
			missing(t, "no VFIO in this kernel: "+err.Error())
		}
		t.Fatalf("open %s: %v", addr, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close %s: %v", addr, err)
		}
	})
	return d
}

func errString(err error) string {
	if errors.Is(err, os.ErrNotExist) {
		return "does not exist"
	}
	return err.Error()
}
