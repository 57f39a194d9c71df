package nvme

import (
	"errors"
	"testing"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio"
	drv "github.com/hcomm-go/hcomm/vfio/nvme"
)

func TestNewValidates(t *testing.T) {
	if _, err := New(nil, Config{}); !errors.Is(err, engine.ErrBadConfig) {
		t.Errorf("nil device: %v", err)
	}
}

// TestPrepare checks the validation Prepare does before a command exists,
// on a backend with the limits of QEMU's controller (512-byte LBAs, 1 GiB,
// MDTS 512 KiB).
func TestPrepare(t *testing.T) {
	b := &Backend{lba: 512, nsBytes: 1 << 30, maxXfer: 512 << 10}
	host := func(addr uint64) backend.Endpoint {
		return backend.Endpoint{Kind: engine.LocHost, Addr: addr, Arena: 3}
	}
	dev := func(off uint64) backend.Endpoint { return backend.Endpoint{Kind: engine.LocDevice, Off: off} }
	tests := []struct {
		name     string
		src, dst backend.Endpoint
		n        uint32
		want     error
		code     uint8
	}{
		{"write 4 KiB", host(0x200000), dev(4096), 4096, nil, opWrite},
		{"read 512 KiB at the end", dev(1<<30 - 512<<10), host(0x200000), 512 << 10, nil, opRead},
		{"read 512 B from a dword offset", dev(0), host(0x200004), 512, nil, opRead},
		{"length not whole blocks", host(0x200000), dev(0), 100, engine.ErrAlignment, 0},
		{"offset not whole blocks", host(0x200000), dev(100), 512, engine.ErrAlignment, 0},
		{"over MDTS", host(0x200000), dev(0), 1 << 20, engine.ErrOutOfBounds, 0},
		{"past the namespace", dev(1 << 30), host(0x200000), 512, engine.ErrOutOfBounds, 0},
		{"straddling the end", host(0x200000), dev(1<<30 - 512), 1024, engine.ErrOutOfBounds, 0},
		{"host address not dword aligned", host(0x200002), dev(0), 512, engine.ErrAlignment, 0},
		{"host to host", host(0x200000), host(0x300000), 512, engine.ErrBadTransfer, 0},
		{"device to device", dev(0), dev(4096), 512, engine.ErrBadTransfer, 0},
		{"to a file", host(0x200000), backend.Endpoint{Kind: engine.LocFile}, 512, engine.ErrBadTransfer, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var op backend.Op
			err := b.Prepare(tt.src, tt.dst, tt.n, &op)
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("%v, want %v", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if op.Code != tt.code || op.Path != engine.PathDMA || op.Inline || op.HostArena != 3 {
				t.Fatalf("op %+v", op)
			}
			wantSrc, wantDst := tt.src.Off, tt.dst.Off
			if tt.src.Kind == engine.LocHost {
				wantSrc = tt.src.Addr
			} else {
				wantDst = tt.dst.Addr
			}
			if op.Src != wantSrc || op.Dst != wantDst {
				t.Fatalf("op src %#x dst %#x, want %#x %#x", op.Src, op.Dst, wantSrc, wantDst)
			}
		})
	}
	op := new(backend.Op)
	if allocs := testing.AllocsPerRun(100, func() { _ = b.Prepare(host(0x200000), dev(4096), 4096, op) }); allocs != 0 {
		t.Errorf("Prepare allocates %v times per call", allocs)
	}
}

// TestErrAndCompletion: every NVMe status maps to an engine status whose
// error wraps engine.ErrDevice and the driver's sentinel, without
// allocating; resets become timeouts.
func TestErrAndCompletion(t *testing.T) {
	b := &Backend{lens: make([]uint32, 8)}
	b.desc.Device = "test"
	b.buildErrors()
	b.lens[2] = 4096
	tests := []struct {
		name   string
		c      drv.Completion
		status backend.Status
		n      uint32
		is     []error
	}{
		{"success", drv.Completion{CID: 2}, backend.StatusOK, 4096, nil},
		{"LBA out of range, DNR", drv.Completion{CID: 2, Status: 1<<14 | 0x80}, statusDevice + 0x80, 0, []error{engine.ErrDevice, drv.ErrLBAOutOfRange, drv.ErrStatus}},
		{"unrecovered read", drv.Completion{CID: 2, Status: 2<<8 | 0x81}, statusDevice + 0x281, 0, []error{engine.ErrDevice, drv.ErrUnrecoveredRead, drv.ErrMedia}},
		{"data transfer error", drv.Completion{CID: 2, Status: 0x04}, statusDevice + 0x04, 0, []error{engine.ErrDevice, drv.ErrDataTransfer}},
		{"ended by a reset", drv.Completion{CID: 2, Status: drv.StatusReset}, backend.StatusTimeout, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := b.completion(&tt.c)
			if c.Status != tt.status || c.N != tt.n {
				t.Fatalf("completion %+v, want status %#x n %d", c, uint32(tt.status), tt.n)
			}
			if tt.is == nil {
				return
			}
			err := b.Err(c.Status)
			for _, e := range tt.is {
				if !errors.Is(err, e) {
					t.Errorf("%v: not %v", err, e)
				}
			}
			if allocs := testing.AllocsPerRun(100, func() { _ = b.Err(c.Status) }); allocs != 0 {
				t.Errorf("Err allocates %v times", allocs)
			}
		})
	}
}

// TestDeferRing: Flush leaves the doorbell to the next Reap only while at
// least the threshold of commands are at the controller (one of them
// completing brings that Reap), never with the controller idle, never
// when deferral is off.
func TestDeferRing(t *testing.T) {
	tests := []struct {
		name                    string
		atController, threshold int
		want                    bool
	}{
		{"controller idle", 0, 1, false},
		{"controller idle, default threshold", 0, DefaultDeferDoorbell, false},
		{"below the threshold", DefaultDeferDoorbell - 1, DefaultDeferDoorbell, false},
		{"at the threshold", DefaultDeferDoorbell, DefaultDeferDoorbell, true},
		{"queue full", 32, DefaultDeferDoorbell, true},
		{"one in flight, threshold 1", 1, 1, true},
		{"deferral off", 32, -1, false},
		{"threshold 0 (never after New's default)", 32, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deferRing(tt.atController, tt.threshold); got != tt.want {
				t.Fatalf("deferRing(%d, %d) = %v, want %v", tt.atController, tt.threshold, got, tt.want)
			}
		})
	}
}

// TestNewDeferDefault: a zero DeferDoorbell becomes the default, a
// negative one stays (off).
func TestNewDeferDefault(t *testing.T) {
	for _, tt := range []struct{ in, want int }{{0, DefaultDeferDoorbell}, {-1, -1}, {8, 8}} {
		b, err := New(fakeDevice{}, Config{DeferDoorbell: tt.in})
		if err != nil {
			t.Fatal(err)
		}
		if b.cfg.DeferDoorbell != tt.want {
			t.Errorf("DeferDoorbell %d: %d, want %d", tt.in, b.cfg.DeferDoorbell, tt.want)
		}
	}
}

// fakeDevice is a non-nil vfio.Device for New, which only keeps it.
type fakeDevice struct{ vfio.Device }
