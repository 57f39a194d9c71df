package engine_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
)

func TestMemoryTarget(t *testing.T) {
	e := open(t, engine.Config{Backend: memory.New()})
	src := alloc(t, e, 1<<20)
	dst := alloc(t, e, 1<<20)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i >> 3)
	}
	ts := []engine.Transfer{
		{Src: engine.Host(src), Dst: engine.Host(dst), Len: 1 << 19},
		{Src: engine.HostAt(src, 1<<19), Dst: engine.HostAt(dst, 1<<19), Len: 1 << 19},
	}
	ids := make([]engine.ID, 2)
	n, err := e.SubmitBatch(ts, ids)
	if n != 2 || err != nil {
		t.Fatalf("batch: %d, %v", n, err)
	}
	ctx := ctxT(t, 10*time.Second)
	for _, id := range ids {
		must(t, e.Wait(ctx, id))
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("copy differs")
	}
	if _, err := e.Submit(engine.Transfer{Src: engine.Host(src), Dst: engine.DeviceAt(0), Len: 64}); !errors.Is(err, engine.ErrBadTransfer) {
		t.Errorf("memory target to device: %v", err)
	}
	if st := e.Stats(); st.Paths[engine.PathMemory].Transfers != 2 || st.Paths[engine.PathMemory].Bytes != 1<<20 {
		t.Errorf("stats: %+v", st.Paths)
	}
}

func tempFile(t *testing.T, flags int) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "data"), os.O_RDWR|os.O_CREATE|flags, 0o600)
	if err != nil {
		if flags&unix.O_DIRECT != 0 {
			t.Skipf("this file system refuses O_DIRECT: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestFileTarget writes blocks to a file and reads them back through
// io_uring, buffered and O_DIRECT (where the file system honours it).
func TestFileTarget(t *testing.T) {
	for _, direct := range []bool{false, true} {
		flags := 0
		if direct {
			flags = unix.O_DIRECT
		}
		f := tempFile(t, flags)
		e := open(t, engine.Config{Backend: fileBE(t, f), Alignment: 4096})
		for _, fb := range e.Fallbacks() {
			t.Logf("fallback: %v", fb)
		}
		src := alloc(t, e, 64<<10)
		dst := alloc(t, e, 64<<10)
		for i := range src.Bytes() {
			src.Bytes()[i] = byte(i*13 + 1)
		}
		ctx := ctxT(t, 10*time.Second)
		ts := make([]engine.Transfer, 16)
		for i := range ts {
			ts[i] = engine.Transfer{Src: engine.HostAt(src, i*4096), Dst: engine.FileAt(int64(i) * 4096), Len: 4096}
		}
		n, err := e.SubmitBatch(ts, nil)
		if n != 16 || err != nil {
			t.Fatalf("direct=%v: write batch: %d, %v", direct, n, err)
		}
		must(t, e.Drain(ctx))
		// The file holds what was written, read through another descriptor
		// (buffered: the kernel invalidates cached pages an O_DIRECT write
		// covers), not only what the engine's own read path returns.
		onDisk, err := os.ReadFile(f.Name())
		must(t, err)
		if !bytes.Equal(onDisk, src.Bytes()) {
			t.Fatalf("direct=%v: the file holds %d bytes, not the %d written (first difference at %d)",
				direct, len(onDisk), len(src.Bytes()), firstDiff(onDisk, src.Bytes()))
		}
		for i := range dst.Bytes() {
			dst.Bytes()[i] = 0xa5
		}
		id, err := e.Submit(engine.Transfer{Src: engine.FileAt(0), Dst: engine.Host(dst), Len: 64 << 10})
		must(t, err)
		must(t, e.Wait(ctx, id))
		if !bytes.Equal(src.Bytes(), dst.Bytes()) {
			t.Fatalf("direct=%v: read back differs", direct)
		}
		// Reading past the end is short, and says so.
		id, err = e.Submit(engine.Transfer{Src: engine.FileAt(60 << 10), Dst: engine.Host(dst), Len: 8 << 10})
		must(t, err)
		if err := e.Wait(ctx, id); !errors.Is(err, engine.ErrShortIO) {
			t.Errorf("direct=%v: read past EOF: %v, want ErrShortIO", direct, err)
		}
		st := e.Stats()
		if st.Paths[engine.PathFile].Transfers != 18 || st.Doorbells > 3+2 {
			t.Errorf("direct=%v: stats %+v", direct, st)
		}
		t.Logf("direct=%v: %d transfers, %d submitting enters, %d syscalls in all", direct, st.Transfers, st.Doorbells, st.Syscalls)
		if direct {
			bad := []engine.Transfer{
				{Src: engine.HostAt(src, 512), Dst: engine.FileAt(0), Len: 4096},
				{Src: engine.Host(src), Dst: engine.FileAt(100), Len: 4096},
				{Src: engine.Host(src), Dst: engine.FileAt(0), Len: 1000},
			}
			for _, tr := range bad {
				if _, err := e.Submit(tr); !errors.Is(err, engine.ErrAlignment) {
					t.Errorf("misaligned O_DIRECT %v → %v (%d bytes): %v, want ErrAlignment", tr.Src, tr.Dst, tr.Len, err)
				}
			}
			if _, err := engine.Open(small(t, engine.Config{Backend: fileBE(t, f)})); !errors.Is(err, engine.ErrBadConfig) {
				t.Errorf("O_DIRECT file with 64-byte alignment: %v, want ErrBadConfig", err)
			}
		}
		if _, err := e.Submit(engine.Transfer{Src: engine.Host(src), Dst: engine.DeviceAt(0), Len: 64}); !errors.Is(err, engine.ErrBadTransfer) {
			t.Errorf("file target to device: %v", err)
		}
	}
}

// firstDiff is the first index where a and b differ (the shorter length
// when one is a prefix of the other).
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
