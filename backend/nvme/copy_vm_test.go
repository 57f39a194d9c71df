package nvme_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/nvme"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/internal/vfiotest"
	"github.com/hcomm-go/hcomm/vfio"
)

// TestVMCopyFileToNamespace: one engine over two backends — the NVMe
// namespace (this package, through VFIO) and a file in the guest
// (backend/uringfile) — and one Engine.Copy that streams the file into
// the namespace through pool blocks. Then the controller goes to the
// guest kernel's nvme driver, which reads the namespace from its block
// device (O_DIRECT): the bytes are the file's.
//
// The file is opened with O_DIRECT when its file system honours it (the
// guest's /tmp is ext4 on a virtio-blk disk), buffered on tmpfs
// (HCOMM_VM_SCRATCH=0), whose O_DIRECT would copy anyway; the test logs
// which.
func TestVMCopyFileToNamespace(t *testing.T) {
	addr := vfiotest.FindDevice(t, 0x1b36, 0x0010)
	const (
		size = 64 << 20
		at   = 512 << 20 // where in the namespace: away from the other tests' bytes
	)
	want := make([]byte, size)
	stamped(want, 4242)
	path := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		t.Fatal(err)
	}
	flags, how := unix.O_DIRECT, "O_DIRECT"
	if fs.Type == unix.TMPFS_MAGIC {
		flags, how = 0, "buffered (tmpfs)"
	}
	f, err := os.OpenFile(path, os.O_RDONLY|flags, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	dev, err := vfio.OpenPCI(addr)
	if err != nil {
		t.Fatalf("open %s: %v", addr, err)
	}
	nb, err := nvme.New(dev, nvme.Config{CloseDevice: true})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	fb, err := uringfile.New(f, uringfile.Config{})
	if err != nil {
		nb.Close()
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Config{Backend: nb, Backends: []backend.Backend{fb}, PoolSize: 16 << 20, QueueDepth: 64, Alignment: 4096})
	if err != nil {
		nb.Close()
		fb.Close()
		t.Fatalf("engine.Open over the NVMe and file backends: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			eng.Close()
		}
	}()
	ts := eng.Targets()
	ns := ts[0].Describe()
	if ns.DeviceMemory < at+size {
		t.Fatalf("namespace of %d MiB: too small for %d MiB at %d MiB", ns.DeviceMemory>>20, size>>20, at>>20)
	}
	chunk := min(512<<10, int(ns.MaxTransfer))
	const depth = 8
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := eng.Copy(ctx, engine.CopySpec{Src: ts[1].FileAt(0), Dst: ts[0].DeviceAt(at), Len: size, Chunk: chunk, Depth: depth})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("copy file → namespace: %v", err)
	}
	el := time.Since(start)
	if r := c.Result(); r.Bytes != size {
		t.Fatalf("copy: %d bytes done, want %d", r.Bytes, size)
	}
	st := eng.Stats()
	if pool := st.Pool.InUse; pool != 0 {
		t.Errorf("after the copy the pool holds %d bytes in use, want 0", pool)
	}
	t.Logf("one engine over %s (%s, namespace %d MiB, max transfer %d) and %s (%s file): %d MiB file → namespace at %d MiB in %v (%.1f MiB/s under TCG), chunks of %d KiB, %d in flight; per backend %+v",
		ns.Name, ns.Device, ns.DeviceMemory>>20, ns.MaxTransfer, ts[1].Describe().Name, how, size>>20, at>>20, el.Round(time.Millisecond),
		float64(size)/(1<<20)/el.Seconds(), chunk>>10, depth, st.Backends)
	closed = true
	if err := eng.Close(); err != nil {
		t.Fatalf("engine close: %v", err)
	}

	// The kernel's view of the namespace.
	var sys vfio.Sysfs
	if _, err := sys.Bind(addr, "nvme"); err != nil {
		t.Fatalf("hand %s to the kernel's nvme driver: %v", addr, err)
	}
	defer func() {
		if _, err := sys.Bind(addr, "vfio-pci"); err != nil {
			t.Errorf("give %s back to vfio-pci: %v", addr, err)
		}
	}()
	blk := openKernelBlock(t, addr)
	defer blk.Close()
	const piece = 1 << 20
	buf, err := unix.Mmap(-1, 0, piece, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	for off := 0; off < size; off += piece {
		if k, err := blk.ReadAt(buf, int64(at+off)); err != nil || k != piece {
			t.Fatalf("kernel read of %s at %d: %d, %v", blk.Name(), at+off, k, err)
		}
		if !bytes.Equal(buf, want[off:off+piece]) {
			t.Fatalf("the kernel reads other bytes at namespace offset %d than the file holds at %d", at+off, off)
		}
	}
	t.Logf("the kernel's nvme driver reads the %d MiB back from %s (O_DIRECT): equal to the file", size>>20, blk.Name())
}

// stamped fills b with one random MiB over and over, every 4 KiB of it
// beginning with its offset in b: a block in the wrong place shows, and
// under TCG it costs a fraction of a random byte stream.
func stamped(b []byte, seed uint64) {
	const mib = 1 << 20
	fill(b[:min(mib, len(b))], seed)
	for off := mib; off < len(b); off += mib {
		copy(b[off:], b[:mib])
	}
	for off := 0; off+8 <= len(b); off += 4096 {
		binary.LittleEndian.PutUint64(b[off:], uint64(off))
	}
}
