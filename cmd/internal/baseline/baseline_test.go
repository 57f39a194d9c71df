package baseline

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hcomm-go/hcomm/vfio/hdma"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func TestDeviceRoundTrip(t *testing.T) {
	for _, inline := range []bool{false, true} {
		m, err := mock.New(mock.Config{Inline: inline})
		if err != nil {
			t.Fatal(err)
		}
		d, err := OpenDevice(DeviceConfig{Device: m, Staging: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 64, 4096, 5000, 64 << 10} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*31 + n)
			}
			if err := d.Write(src, 4096); err != nil {
				t.Fatalf("inline=%v write %d: %v", inline, n, err)
			}
			if got := d.DeviceMemory()[4096 : 4096+n]; !bytes.Equal(got, src) {
				t.Fatalf("inline=%v write %d: device memory differs", inline, n)
			}
			back := make([]byte, n)
			if err := d.Read(back, 4096); err != nil {
				t.Fatalf("inline=%v read %d: %v", inline, n, err)
			}
			if !bytes.Equal(back, src) {
				t.Fatalf("inline=%v read %d: data differs", inline, n)
			}
		}
		if c := m.Counters(); c.Descriptors != 10 {
			t.Errorf("inline=%v: device ran %d descriptors, want 10 (one per transfer)", inline, c.Descriptors)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if m.Mappings() != 0 {
			t.Errorf("staging memfd still DMA-mapped after Close")
		}
		if err := d.Write([]byte{1}, 0); !errors.Is(err, ErrClosed) {
			t.Errorf("write after close: %v, want ErrClosed", err)
		}
		_ = m.Close()
	}
}

func TestDeviceBadInput(t *testing.T) {
	if _, err := OpenDevice(DeviceConfig{}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("no device: %v, want ErrBadConfig", err)
	}
	m, err := mock.New(mock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	d, err := OpenDevice(DeviceConfig{Device: m, Staging: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	size := uint64(len(d.DeviceMemory()))
	cases := []struct {
		name string
		n    int
		off  uint64
	}{
		{"empty", 0, 0},
		{"beyond staging", 8193, 0},
		{"beyond device memory", 4096, size - 100},
		{"offset wraps", 16, ^uint64(0) - 4},
	}
	for _, c := range cases {
		if err := d.Write(make([]byte, c.n), c.off); !errors.Is(err, ErrBadTransfer) {
			t.Errorf("%s: write: %v, want ErrBadTransfer", c.name, err)
		}
		if err := d.Read(make([]byte, c.n), c.off); !errors.Is(err, ErrBadTransfer) {
			t.Errorf("%s: read: %v, want ErrBadTransfer", c.name, err)
		}
	}
	if _, err := OpenDevice(DeviceConfig{Staging: -1}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("negative staging: %v, want ErrBadConfig", err)
	}
}

func TestAlignedBuffer(t *testing.T) {
	for _, a := range []int{8, 512, 4096, 1 << 20} {
		b, err := AlignedBuffer(100, a)
		if err != nil || len(b) != 100 || cap(b) != 100 {
			t.Fatalf("align %d: len %d cap %d err %v", a, len(b), cap(b), err)
		}
		if addr := uintptr(unsafePointer(b)); addr%uintptr(a) != 0 {
			t.Errorf("align %d: address %#x", a, addr)
		}
	}
	for _, bad := range [][2]int{{0, 8}, {10, 0}, {10, 3}} {
		if _, err := AlignedBuffer(bad[0], bad[1]); !errors.Is(err, ErrBadConfig) {
			t.Errorf("AlignedBuffer(%d, %d): %v, want ErrBadConfig", bad[0], bad[1], err)
		}
	}
}

func TestFileWriteRead(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "blocks"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, workers := range []int{1, 4} {
		fp, err := NewFile(f, FileConfig{Block: 4096, Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		offs := []int64{0, 8192, 4096, 40960, 12288}
		if err := fp.WriteBlocks(offs); err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		if st.Size() != 40960+4096 {
			t.Errorf("workers %d: file size %d", workers, st.Size())
		}
		want := append([]byte(nil), fp.Buffer(0)...)
		clear(fp.Buffer(0))
		if err := fp.ReadBlocks([]int64{8192}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fp.Buffer(0), want) {
			t.Errorf("workers %d: read back differs", workers)
		}
		if err := fp.ReadBlocks([]int64{1 << 30}); err == nil {
			t.Errorf("workers %d: read past EOF succeeded", workers)
		}
	}
	if _, err := NewFile(f, FileConfig{}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("zero block: %v, want ErrBadConfig", err)
	}
}

// O_DIRECT through the traditional path: the aligned heap buffer is what
// makes WriteAt legal. Skips (with the reason) where the temporary
// directory's file system refuses O_DIRECT, as tmpfs may.
func TestFileDirect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "direct")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_DIRECT, 0o644)
	if err != nil {
		t.Skipf("O_DIRECT refused in %s: %v", filepath.Dir(path), err)
	}
	defer f.Close()
	fp, err := NewFile(f, FileConfig{Block: 4096, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := fp.WriteBlocks([]int64{0, 4096, 8192, 12288}); err != nil {
		if errors.Is(err, syscall.EINVAL) {
			t.Skipf("file system refuses O_DIRECT writes: %v", err)
		}
		t.Fatal(err)
	}
	want := append([]byte(nil), fp.Buffer(0)...)
	clear(fp.Buffer(0))
	if err := fp.ReadBlocks([]int64{8192}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fp.Buffer(0), want) {
		t.Error("O_DIRECT read back differs")
	}
}

// TestLayout: the staging buffer starts after the queue's rings.
func TestLayout(t *testing.T) {
	if n := hdma.QueueBytes(ringEntries); n > stagingOff {
		t.Fatalf("rings of %d entries need %d bytes, staging starts at %d", ringEntries, n, stagingOff)
	}
}
