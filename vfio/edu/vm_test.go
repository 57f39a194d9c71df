package edu_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/internal/uring"
	"github.com/hcomm-go/hcomm/internal/vfiotest"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/edu"
)

// These tests drive the real edu device through kernel VFIO and the vIOMMU:
// they run in the VM guest (make test-vm) and skip on the host ("no VFIO in
// this kernel").

// uringWaiter waits for the device interrupt by reading its eventfd through
// hcomm's io_uring layer: one READ of the eventfd linked to a timeout.
type uringWaiter struct {
	u       *uring.Ring
	efd     int
	counter uint64
	cqes    [2]uring.CQE
	// interrupts counts the eventfd reads that completed with a count.
	interrupts int
}

func newUringWaiter(t *testing.T, efd int) *uringWaiter {
	t.Helper()
	// Unbound: the subtests that wait run on other goroutines (threads)
	// than the one that creates the ring.
	u, err := uring.New(uring.Config{Entries: 8, Unbound: true})
	if err != nil {
		t.Fatalf("io_uring: %v", err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("close io_uring: %v", err)
		}
	})
	return &uringWaiter{u: u, efd: efd}
}

func (w *uringWaiter) Wait(ctx context.Context) error {
	d := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = max(time.Until(dl), time.Millisecond)
	}
	rd := w.u.GetSQE()
	if rd == nil {
		return errors.New("io_uring submission queue full")
	}
	w.counter = 0
	rd.PrepReadEventfd(w.efd, &w.counter)
	rd.SetUserData(1)
	rd.SetFlags(uring.SQEIOLink)
	lt := w.u.GetSQE()
	if lt == nil {
		return errors.New("io_uring submission queue full")
	}
	if err := w.u.PrepLinkTimeout(lt, d, 0); err != nil {
		return err
	}
	lt.SetUserData(2)
	// Both entries complete: the read (with the count, or cancelled by
	// the timeout) and the timeout (cancelled by the read, or fired).
	got := 0
	var readErr error
	readDone := false
	for got < 2 {
		n, err := w.u.WaitCQEs(w.cqes[:], 1)
		if err != nil {
			return fmt.Errorf("io_uring wait: %w", err)
		}
		for _, c := range w.cqes[:n] {
			if c.UserData() == 1 {
				readDone = true
				if c.Res() != 8 {
					readErr = fmt.Errorf("eventfd read through io_uring: res %d (%v)", c.Res(), c.Err())
				}
			}
		}
		got += n
	}
	if !readDone {
		return errors.New("io_uring: no completion for the eventfd read")
	}
	if readErr != nil {
		return readErr
	}
	if w.counter == 0 {
		return errors.New("eventfd read returned a zero count")
	}
	w.interrupts++
	return nil
}

// env is one opened edu with a 2 MiB hugetlb arena mapped for DMA.
type env struct {
	dev    *vfio.KernelDevice
	arena  *hugepage.Arena
	space  *vfio.DMASpace
	iova   uint64
	ev     *vfio.EventFD
	waiter *uringWaiter
	drv    *edu.Driver
}

// reserve adds n 2 MiB hugetlb pages to the pool for the test and gives
// them back at cleanup (the guest starts with none, like a fresh host).
func reserve(t *testing.T, n int) {
	t.Helper()
	r, err := hugepage.Reserve(2<<20, n)
	if err != nil {
		t.Fatalf("reserve %d hugepages of 2 MiB: %v", n, err)
	}
	t.Cleanup(func() {
		if err := r.Release(); err != nil {
			t.Errorf("release hugepages: %v", err)
		}
	})
}

func setup(t *testing.T, kind vfio.IRQKind) *env {
	t.Helper()
	e := &env{dev: vfiotest.OpenDevice(t, edu.VendorID, edu.DeviceID)}
	reserve(t, 2) // this arena, and the second one of TestVMUnmappedIOVA
	a, err := hugepage.NewArena(hugepage.ArenaConfig{
		Size: 2 << 20, Backings: []hugepage.Backing{hugepage.BackingHugetlb2M}, Populate: true,
	})
	if err != nil {
		t.Fatalf("2 MiB hugetlb arena (the guest's /init reserves hugepages): %v", err)
	}
	e.arena = a
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("close arena: %v", err)
		}
	})
	if e.space, err = vfio.NewDMASpace(e.dev, vfio.DMAConfig{Mask: edu.DMAMask}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.space.Close() })
	if e.iova, err = e.space.MapArena(a, vfio.DMAReadWrite); err != nil {
		t.Fatalf("map arena: %v", err)
	}
	if e.iova > edu.DMAMask || e.iova%(2<<20) != 0 {
		t.Fatalf("arena IOVA %#x: want 2 MiB aligned, below the 28-bit mask", e.iova)
	}
	if e.ev, err = vfio.NewEventFD(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ev.Close() })
	if err := e.dev.SetIRQs(kind, 0, []int{e.ev.Fd()}); err != nil {
		t.Fatalf("route %v to the eventfd: %v", kind, err)
	}
	t.Cleanup(func() { e.dev.SetIRQs(kind, 0, nil) })
	e.waiter = newUringWaiter(t, e.ev.Fd())
	if e.drv, err = edu.New(e.dev, edu.Config{Check: e.space, Wait: e.waiter, IRQ: kind}); err != nil {
		t.Fatal(err)
	}
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestVMIdentify(t *testing.T) {
	e := setup(t, vfio.IRQMSI)
	id, err := e.drv.ID()
	if err != nil || id != edu.IDValue {
		t.Fatalf("ID %#x, %v; want %#x", id, err, edu.IDValue)
	}
	if v, err := e.drv.Liveness(0x12345678); err != nil || v != ^uint32(0x12345678) {
		t.Fatalf("liveness %#x, %v", v, err)
	}
	t.Logf("BAR0 ID register %#08x, liveness inverts", id)
}

// TestVMDMARoundTrip moves bytes RAM → device → RAM, from and into the
// hugetlb arena, for several sizes up to 4095, and compares them.
func TestVMDMARoundTrip(t *testing.T) {
	for _, kind := range []vfio.IRQKind{vfio.IRQMSI, vfio.IRQINTx} {
		t.Run(kind.String(), func(t *testing.T) {
			e := setup(t, kind)
			mem := e.arena.Bytes()
			ctx := ctxT(t)
			rng := rand.New(rand.NewPCG(1, uint64(kind)))
			cases := []struct{ n, devOff, srcOff, dstOff int }{
				{1, 0, 0, 1 << 20},
				{7, 3, 5, 1<<20 + 9},
				{64, 0, 4096, 1<<20 + 4096},
				{1000, 100, 12345, 1<<20 + 777},
				{2048, 2047, 65536, 1<<20 + 65536},
				{4095, 0, 2<<20 - 4095, 1<<20 + 123},
			}
			if kind == vfio.IRQINTx {
				cases = cases[3:4] // one is enough for the INTx path (each DMA takes ~0.1 s)
			}
			for _, c := range cases {
				src := mem[c.srcOff : c.srcOff+c.n]
				for i := range src {
					src[i] = byte(rng.Uint32())
				}
				dst := mem[c.dstOff-1 : c.dstOff+c.n+1] // with a guard byte each side
				for i := range dst {
					dst[i] = 0xa5
				}
				before := e.waiter.interrupts
				if err := e.drv.Do(ctx, edu.Transfer{Dir: edu.ToDevice, IOVA: e.iova + uint64(c.srcOff), Offset: c.devOff, Len: c.n}); err != nil {
					t.Fatalf("%d bytes RAM→device: %v", c.n, err)
				}
				if err := e.drv.Do(ctx, edu.Transfer{Dir: edu.FromDevice, IOVA: e.iova + uint64(c.dstOff), Offset: c.devOff, Len: c.n}); err != nil {
					t.Fatalf("%d bytes device→RAM: %v", c.n, err)
				}
				if !bytes.Equal(dst[1:c.n+1], src) {
					t.Fatalf("%d bytes: data differs after RAM→device→RAM (first bytes %x, want %x)", c.n, head(dst[1:]), head(src))
				}
				if dst[0] != 0xa5 || dst[c.n+1] != 0xa5 {
					t.Fatalf("%d bytes: DMA wrote outside its range (guards %#x %#x)", c.n, dst[0], dst[c.n+1])
				}
				if got := e.waiter.interrupts - before; got != 2 {
					t.Fatalf("%d bytes: %d completion interrupts read through io_uring, want 2", c.n, got)
				}
				t.Logf("%v: %4d bytes RAM(IOVA %#x)→device(+%d)→RAM(IOVA %#x): equal, 2 interrupts via io_uring",
					kind, c.n, e.iova+uint64(c.srcOff), c.devOff, e.iova+uint64(c.dstOff))
			}
		})
	}
}

// TestVMCopyChunked copies more than one DMA can carry: Copy must chunk at
// 4095 bytes.
func TestVMCopyChunked(t *testing.T) {
	e := setup(t, vfio.IRQMSI)
	mem := e.arena.Bytes()
	const n = 10000
	src, dst := mem[8192:8192+n], mem[1<<20:1<<20+n]
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	clear(dst)
	before := e.waiter.interrupts
	if err := e.drv.Copy(ctxT(t), e.iova+1<<20, e.iova+8192, n); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src) {
		t.Fatalf("chunked copy differs")
	}
	if got := e.waiter.interrupts - before; got != 6 {
		t.Fatalf("%d DMAs, want 6 (3 chunks of <= 4095 bytes, 2 DMAs each)", got)
	}
}

// TestVMUnmappedIOVA proves that a DMA from an IOVA that is no longer
// mapped does not deliver the data: the driver refuses it
// (vfio.ErrNotMapped), and when forced past that check the vIOMMU blocks
// the device's read (the kernel logs the IOMMU's fault: a VT-d DMAR record
// on x86, an SMMUv3 translation-fault event on arm64).
func TestVMUnmappedIOVA(t *testing.T) {
	e := setup(t, vfio.IRQMSI)
	ctx := ctxT(t)
	mem := e.arena.Bytes()
	const n = 256
	// 1. Known contents in the device buffer: zeros, by a good DMA.
	clear(mem[:n])
	if err := e.drv.Do(ctx, edu.Transfer{Dir: edu.ToDevice, IOVA: e.iova, Len: n}); err != nil {
		t.Fatal(err)
	}
	// 2. A second arena holding a pattern, mapped, then unmapped: its
	// IOVA is now stale.
	b, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 2 << 20, Backings: []hugepage.Backing{hugepage.BackingHugetlb2M}, Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range b.Bytes()[:n] {
		b.Bytes()[i] = 0x5a
	}
	stale, err := e.space.MapArena(b, vfio.DMARead)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.space.UnmapArena(b); err != nil {
		t.Fatal(err)
	}
	// 3. The driver reports the stale IOVA as an error and does not start.
	err = e.drv.Start(edu.Transfer{Dir: edu.ToDevice, IOVA: stale, Len: n})
	if !errors.Is(err, vfio.ErrNotMapped) {
		t.Fatalf("DMA from unmapped IOVA %#x: %v, want vfio.ErrNotMapped", stale, err)
	}
	t.Logf("driver refused the DMA from unmapped IOVA %#x: %v", stale, err)
	// 4. Forced past the check, the device issues the read and the
	// vIOMMU blocks it: the device buffer does not receive the pattern.
	faults := vfiotest.OpenFaultLog(t)
	if err := e.drv.StartUnchecked(edu.Transfer{Dir: edu.ToDevice, IOVA: stale, Len: n}); err != nil {
		t.Fatal(err)
	}
	if err := e.drv.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	out := mem[4096 : 4096+n]
	for i := range out {
		out[i] = 0xee
	}
	if err := e.drv.Do(ctx, edu.Transfer{Dir: edu.FromDevice, IOVA: e.iova + 4096, Len: n}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte{0x5a, 0x5a, 0x5a, 0x5a}) {
		t.Fatalf("the pattern behind the unmapped IOVA reached the device: %x", head(out))
	}
	if bytes.Equal(out, bytes.Repeat([]byte{0xee}, n)) {
		t.Fatalf("device→RAM DMA after the blocked one did not run")
	}
	t.Logf("device buffer after the blocked DMA: %x… (not the 5a pattern)", head(out))
	if line, err := faults.Find(ctx, e.dev.Info().Name, stale); err == nil {
		t.Logf("kernel: %s", line)
	} else {
		t.Errorf("the vIOMMU's fault for the blocked read: %v", err)
	}
}

// TestVMTeardown checks that closing leaves nothing behind: no DMA mapping,
// no fd, and the device can be opened again.
func TestVMTeardown(t *testing.T) {
	before := testutil.SnapshotFDs(t)
	addr := vfiotest.FindDevice(t, edu.VendorID, edu.DeviceID)
	reserve(t, 1)
	d, err := vfio.OpenPCI(addr)
	if err != nil {
		t.Fatal(err)
	}
	a, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 2 << 20, Backings: []hugepage.Backing{hugepage.BackingHugetlb2M}})
	if err != nil {
		t.Fatal(err)
	}
	space, err := vfio.NewDMASpace(d, vfio.DMAConfig{Mask: edu.DMAMask})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := space.MapArena(a, vfio.DMAReadWrite); err != nil {
		t.Fatal(err)
	}
	ev, err := vfio.NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetIRQs(vfio.IRQMSI, 0, []int{ev.Fd()}); err != nil {
		t.Fatal(err)
	}
	drv, err := edu.New(d, edu.Config{Check: space})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Do(ctxT(t), edu.Transfer{Dir: edu.ToDevice, IOVA: mustIOVA(t, space, a), Len: 100}); err != nil {
		t.Fatal(err)
	}
	if err := space.Close(); err != nil {
		t.Fatalf("unmap: %v", err)
	}
	if m := d.DMAMappings(); len(m) != 0 {
		t.Fatalf("mappings left after DMASpace.Close: %#x", m)
	}
	// Whole again: what a fresh allocator over the IOMMU's ranges gives
	// (one range below the 28-bit mask on x86, whose MSI window is at
	// 0xfee00000; two on arm64, around the SMMUv3's MSI window at
	// 0x8000000).
	fresh, err := vfio.NewIOVAAllocator(d.IOVARanges(), edu.DMAMask, space.Allocator().PageSize())
	if err != nil {
		t.Fatal(err)
	}
	if free, want := space.Allocator().FreeRanges(), fresh.FreeRanges(); !slices.Equal(free, want) {
		t.Errorf("IOVA space not whole again: free %#x, want %#x", free, want)
	}
	if err := d.Close(); err != nil { // disables the MSI
		t.Fatalf("close: %v", err)
	}
	if err := ev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if leaked := before.Leaked(testutil.SnapshotFDs(t)); len(leaked) > 0 {
		t.Fatalf("leaked fds: %v", leaked)
	}
	d2, err := vfio.OpenPCI(addr)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	d2.Close()
}

func mustIOVA(t *testing.T, s *vfio.DMASpace, a *hugepage.Arena) uint64 {
	v, err := s.IOVA(a, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }
