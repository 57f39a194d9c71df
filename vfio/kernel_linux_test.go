package vfio_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/internal/vfiotest"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/edu"
)

// These tests need kernel VFIO and QEMU's edu device: on the host they skip
// ("no VFIO in this kernel"), make test-vm runs them in the guest.

// msiWindows reads the group's reserved regions of type msi from sysfs
// (/sys/kernel/iommu_groups/N/reserved_regions: "start end type" lines, in
// hex): where the platform's MSI doorbell sits, which no DMA mapping may
// cover. At least one is required.
func msiWindows(t *testing.T, group int) []vfio.IOVARange {
	t.Helper()
	p := fmt.Sprintf("/sys/kernel/iommu_groups/%d/reserved_regions", group)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reserved regions: %v", err)
	}
	var ws []vfio.IOVARange
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var lo, hi uint64
		var typ string
		if n, _ := fmt.Sscanf(line, "0x%x 0x%x %s", &lo, &hi, &typ); n == 3 && typ == "msi" {
			ws = append(ws, vfio.IOVARange{Start: lo, End: hi})
		}
	}
	if len(ws) == 0 {
		t.Fatalf("%s: no msi region in %q", p, b)
	}
	return ws
}

func TestKernelOpenAndInfo(t *testing.T) {
	before := testutil.SnapshotFDs(t)
	addr := vfiotest.FindDevice(t, edu.VendorID, edu.DeviceID)
	d, err := vfio.OpenPCI(addr)
	if err != nil {
		t.Fatalf("OpenPCI(%s): %v", addr, err)
	}
	info := d.Info()
	t.Logf("device %+v, group %d, IOMMU page sizes %#x, IOVA ranges %#x", info, d.Group().Number(), d.IOMMUPageSizes(), d.IOVARanges())
	if info.VendorID != edu.VendorID || info.DeviceID != edu.DeviceID {
		t.Errorf("IDs %04x:%04x, want %04x:%04x", info.VendorID, info.DeviceID, edu.VendorID, edu.DeviceID)
	}
	if info.NumRegions < 9 || info.NumIRQs < 3 {
		t.Errorf("NumRegions %d NumIRQs %d, want vfio-pci's >= 9 and >= 3", info.NumRegions, info.NumIRQs)
	}
	viable, set, err := d.Group().Status()
	if err != nil || !viable || !set {
		t.Errorf("group status viable=%v containerSet=%v err=%v, want viable and in a container", viable, set, err)
	}
	ok, err := d.Container().CheckExtension(vfio.Type1v2IOMMU)
	if err != nil || !ok {
		t.Errorf("CheckExtension(type1v2) = %v, %v", ok, err)
	}
	if d.IOMMUPageSizes()&4096 == 0 || d.IOMMUPageSize() != 4096 {
		t.Errorf("IOMMU page sizes %#x: want 4 KiB pages", d.IOMMUPageSizes())
	}
	// The vIOMMU reports valid ranges; the group's MSI window (x86's
	// 0xfee00000-0xfeefffff, the GICv3 ITS doorbell's 0x8000000-0x80fffff
	// the SMMUv3 reserves on arm64) is never one.
	msi := msiWindows(t, d.Group().Number())
	for _, w := range msi {
		for _, r := range d.IOVARanges() {
			if r.Start <= w.End && w.Start <= r.End {
				t.Errorf("IOVA range %#x-%#x includes the MSI window %#x-%#x", r.Start, r.End, w.Start, w.End)
			}
		}
	}
	if len(d.IOVARanges()) < 2 {
		t.Errorf("IOVA ranges %#x: want the space split around the MSI window", d.IOVARanges())
	}
	// edu: MSI (1 vector) and INTx, no MSI-X.
	if n := d.IRQCount(vfio.IRQMSI); n != 1 {
		t.Errorf("MSI vectors %d, want 1", n)
	}
	if n := d.IRQCount(vfio.IRQINTx); n != 1 {
		t.Errorf("INTx vectors %d, want 1", n)
	}
	if n := d.IRQCount(vfio.IRQMSIX); n != 0 {
		t.Errorf("MSI-X vectors %d, want 0", n)
	}
	if err := d.SetIRQs(vfio.IRQMSIX, 0, []int{0}); !errors.Is(err, vfio.ErrNoIRQ) {
		t.Errorf("SetIRQs(MSI-X) = %v, want ErrNoIRQ", err)
	}
	if _, err := d.Region(vfio.RegionBAR5); !errors.Is(err, vfio.ErrNoRegion) {
		t.Errorf("Region(BAR5) = %v, want ErrNoRegion (edu has only BAR0)", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := d.Region(vfio.RegionBAR0); !errors.Is(err, vfio.ErrClosed) {
		t.Errorf("Region after Close = %v, want ErrClosed", err)
	}
	if leaked := before.Leaked(testutil.SnapshotFDs(t)); len(leaked) > 0 {
		t.Errorf("file descriptors leaked by open+close: %v", leaked)
	}
	// Released for real: the group can be opened again at once.
	d2, err := vfio.OpenPCI(addr)
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestKernelBAR0(t *testing.T) {
	d := vfiotest.OpenDevice(t, edu.VendorID, edu.DeviceID)
	bar, err := d.Region(vfio.RegionBAR0)
	if err != nil {
		t.Fatal(err)
	}
	if bar.Size() != 1<<20 {
		t.Errorf("BAR0 size %#x, want 1 MiB", bar.Size())
	}
	if bar.Mapped() != nil {
		t.Errorf("BAR0 (non-prefetchable registers) offered as plain memory")
	}
	// vfio-pci lets the whole BAR be mmap'd: accesses are MMIO, no syscall.
	areas := bar.(interface{ MmapAreas() []vfio.IOVARange }).MmapAreas()
	if len(areas) != 1 || areas[0] != (vfio.IOVARange{Start: 0, End: 1<<20 - 1}) {
		t.Errorf("BAR0 mmap'd parts %#x, want the whole 1 MiB", areas)
	}
	cfgAreas := mustRegion(t, d, vfio.RegionConfig).(interface{ MmapAreas() []vfio.IOVARange }).MmapAreas()
	if len(cfgAreas) != 0 {
		t.Errorf("config space mmap'd (%#x): it must go through pread/pwrite", cfgAreas)
	}
	id, err := bar.Read32(edu.RegID)
	if err != nil || id != edu.IDValue {
		t.Fatalf("ID register = %#x, %v; want %#x", id, err, edu.IDValue)
	}
	for _, v := range []uint32{0, 1, 0xdeadbeef, 0xffffffff} {
		if err := bar.Write32(edu.RegLiveness, v); err != nil {
			t.Fatal(err)
		}
		if got, err := bar.Read32(edu.RegLiveness); err != nil || got != ^v {
			t.Errorf("liveness(%#x) = %#x, %v; want %#x", v, got, err, ^v)
		}
	}
	// 64-bit DMA registers read back what was written.
	if err := bar.Write64(edu.RegDMASrc, 0x0123456789abcdef&edu.DMAMask); err != nil {
		t.Fatal(err)
	}
	if got, err := bar.Read64(edu.RegDMASrc); err != nil || got != 0x0123456789abcdef&edu.DMAMask {
		t.Errorf("DMA source = %#x, %v", got, err)
	}
	if _, err := bar.Read32(2); !errors.Is(err, vfio.ErrMisaligned) {
		t.Errorf("misaligned read: %v, want ErrMisaligned", err)
	}
	if _, err := bar.Read32(bar.Size()); !errors.Is(err, vfio.ErrOutOfRange) {
		t.Errorf("read past the end: %v, want ErrOutOfRange", err)
	}
	// Config space through pread/pwrite: IDs and the bus-master bit.
	cfg, err := d.Region(vfio.RegionConfig)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := cfg.Read32(0); err != nil || v != uint32(edu.DeviceID)<<16|edu.VendorID {
		t.Errorf("config dword 0 = %#x, %v", v, err)
	}
	if err := vfio.EnableBusMaster(d); err != nil {
		t.Fatal(err)
	}
	cmd, err := cfg.Read16(vfio.PCICommand)
	if err != nil || cmd&vfio.PCICommandBusMaster == 0 {
		t.Errorf("command register %#x, %v: bus master not set", cmd, err)
	}
	if err := vfio.DisableBusMaster(d); err != nil {
		t.Fatal(err)
	}
	if cmd, _ := cfg.Read16(vfio.PCICommand); cmd&vfio.PCICommandBusMaster != 0 {
		t.Errorf("bus master still set after DisableBusMaster: %#x", cmd)
	}
}

func TestKernelDMAMapErrors(t *testing.T) {
	d := vfiotest.OpenDevice(t, edu.VendorID, edu.DeviceID)
	mem, err := unix.Mmap(-1, 0, 4*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	const iova = 0x100000
	if err := d.MapDMA(iova, mem, vfio.DMAReadWrite); err != nil {
		t.Fatalf("MapDMA: %v", err)
	}
	cases := []struct {
		name string
		iova uint64
		mem  []byte
		acc  vfio.Access
		want error
	}{
		{"overlap", iova + 4096, mem[:4096], vfio.DMARead, vfio.ErrIOVAInUse},
		{"misaligned IOVA", 0x200001, mem[:4096], vfio.DMARead, vfio.ErrBadMapping},
		{"partial page", 0x200000, mem[:100], vfio.DMARead, vfio.ErrBadMapping},
		{"no access", 0x200000, mem[:4096], 0, vfio.ErrBadMapping},
		{"MSI window", msiWindows(t, d.Group().Number())[0].Start, mem[:4096], vfio.DMARead, vfio.ErrBadMapping},
	}
	for _, c := range cases {
		if err := d.MapDMA(c.iova, c.mem, c.acc); !errors.Is(err, c.want) {
			t.Errorf("%s: MapDMA = %v, want %v", c.name, err, c.want)
		}
	}
	if err := d.UnmapDMA(iova, 4096); !errors.Is(err, vfio.ErrNotMapped) {
		t.Errorf("UnmapDMA of part of a mapping = %v, want ErrNotMapped", err)
	}
	if err := d.UnmapDMA(0x300000, 4096); !errors.Is(err, vfio.ErrNotMapped) {
		t.Errorf("UnmapDMA of nothing = %v, want ErrNotMapped", err)
	}
	if got := d.DMAMappings(); len(got) != 1 || got[0] != (vfio.IOVARange{Start: iova, End: iova + 4*4096 - 1}) {
		t.Errorf("mappings %#x", got)
	}
	if err := d.UnmapDMA(iova, 4*4096); err != nil {
		t.Fatalf("UnmapDMA: %v", err)
	}
	// A mapping left behind is removed by Close.
	if err := d.MapDMA(iova, mem, vfio.DMARead); err != nil {
		t.Fatal(err)
	}
}

// raiseAndWait makes edu raise an interrupt (its raise register) and waits
// for it on ev.
func raiseAndWait(t *testing.T, bar vfio.Region, ev *vfio.EventFD) {
	t.Helper()
	if err := bar.Write32(edu.RegIRQRaise, 0x1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := ev.Wait(ctx)
	if err != nil || n == 0 {
		t.Fatalf("interrupt: count %d, %v", n, err)
	}
	st, err := bar.Read32(edu.RegIRQStatus)
	if err != nil || st&1 == 0 {
		t.Fatalf("IRQ status %#x, %v", st, err)
	}
	if err := bar.Write32(edu.RegIRQAck, st); err != nil {
		t.Fatal(err)
	}
}

func TestKernelIRQs(t *testing.T) {
	d := vfiotest.OpenDevice(t, edu.VendorID, edu.DeviceID)
	bar, err := d.Region(vfio.RegionBAR0)
	if err != nil {
		t.Fatal(err)
	}
	if err := vfio.EnableBusMaster(d); err != nil { // MSI is a memory write
		t.Fatal(err)
	}
	ev, err := vfio.NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()

	t.Run("MSI", func(t *testing.T) {
		if err := d.SetIRQs(vfio.IRQMSI, 0, []int{ev.Fd()}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			raiseAndWait(t, bar, ev)
		}
		if err := d.SetIRQs(vfio.IRQMSI, 0, nil); err != nil {
			t.Fatal(err)
		}
		// Disabled: a raised interrupt no longer reaches the eventfd.
		if err := bar.Write32(edu.RegIRQRaise, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if n, _ := ev.TryRead(); n != 0 {
			t.Errorf("eventfd fired %d times after the MSI was disabled", n)
		}
		bar.Write32(edu.RegIRQAck, 0xffffffff)
	})
	t.Run("INTx", func(t *testing.T) {
		if err := d.SetIRQs(vfio.IRQINTx, 0, []int{ev.Fd()}); err != nil {
			t.Fatal(err)
		}
		// The kernel masks INTx at each interrupt: the second one arrives
		// only after the unmask.
		raiseAndWait(t, bar, ev)
		if err := d.UnmaskIRQ(vfio.IRQINTx, 0); err != nil {
			t.Fatal(err)
		}
		raiseAndWait(t, bar, ev)
		if err := d.UnmaskIRQ(vfio.IRQINTx, 0); err != nil {
			t.Fatal(err)
		}
		if err := d.UnmaskIRQ(vfio.IRQINTx, 1); !errors.Is(err, vfio.ErrNoIRQ) {
			t.Errorf("unmask INTx 1 = %v, want ErrNoIRQ", err)
		}
		// Left enabled on purpose: Close must disable it.
	})
}

func TestKernelReset(t *testing.T) {
	d := vfiotest.OpenDevice(t, edu.VendorID, edu.DeviceID)
	if !d.Info().CanReset {
		// edu has no FLR or PM reset and shares its bus: vfio-pci offers no
		// reset, and Reset must say so rather than pretend.
		if err := d.Reset(); !errors.Is(err, vfio.ErrNotSupported) {
			t.Fatalf("Reset on a device without reset = %v, want ErrNotSupported", err)
		}
		return
	}
	bar, _ := d.Region(vfio.RegionBAR0)
	if err := bar.Write32(edu.RegLiveness, 7); err != nil {
		t.Fatal(err)
	}
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	if id, err := bar.Read32(edu.RegID); err != nil || id != edu.IDValue {
		t.Fatalf("ID after reset %#x, %v", id, err)
	}
}

func TestKernelRebind(t *testing.T) {
	addr := vfiotest.FindDevice(t, edu.VendorID, edu.DeviceID)
	var sys vfio.Sysfs
	// Back to no driver (edu has no kernel driver), then to vfio-pci again.
	if err := sys.Unbind(addr, ""); err != nil {
		t.Fatalf("Unbind: %v", err)
	}
	if drv, err := sys.Driver(addr); err != nil || drv != "" {
		t.Fatalf("driver after Unbind %q, %v", drv, err)
	}
	if _, err := os.Stat(vfio.GroupPath(mustGroup(t, sys, addr))); err == nil {
		t.Errorf("group node still present with no device bound to vfio-pci")
	}
	prev, err := sys.Bind(addr, "vfio-pci")
	if err != nil || prev != "" {
		t.Fatalf("Bind = %q, %v", prev, err)
	}
	d, err := vfio.OpenPCI(addr)
	if err != nil {
		t.Fatalf("open after rebinding: %v", err)
	}
	d.Close()
}

func mustRegion(t *testing.T, d vfio.Device, i int) vfio.Region {
	t.Helper()
	r, err := d.Region(i)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustGroup(t *testing.T, sys vfio.Sysfs, addr string) int {
	g, err := sys.IOMMUGroup(addr)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
