package uringfile_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

func tempFile(t *testing.T, flags int) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "data"), os.O_RDWR|os.O_CREATE|flags, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestRefusedFiles: files whose I/O could block for ever or land in the
// wrong place are refused at New, with ErrBadConfig naming the cause.
func TestRefusedFiles(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	appendF := tempFile(t, os.O_APPEND)
	devNull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	for _, c := range []struct {
		name string
		f    *os.File
		want string
	}{
		{"nil", nil, "nil"},
		{"pipe", r, "not a regular file"},
		{"O_APPEND", appendF, "O_APPEND"},
		{"character device", devNull, "not a regular file"},
		{"directory", dir, "not a regular file"},
	} {
		if _, err := uringfile.New(c.f, uringfile.Config{}); !errors.Is(err, engine.ErrBadConfig) || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: %v, want ErrBadConfig naming %q", c.name, err, c.want)
		}
	}
}

// TestGrowthRegistersArenas: the pool grows by arenas, each registered as
// its own fixed buffer, and transfers from every arena land in the file.
func TestGrowthRegistersArenas(t *testing.T) {
	f := tempFile(t, 0)
	be, err := uringfile.New(f, uringfile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Config{Backend: be, PoolSize: 1 << 20, PoolMax: 4 << 20, Alignment: 4096,
		Backings: []hugepage.Backing{hugepage.Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var blocks []engine.Block
	for i := range 3 {
		b, err := e.Alloc(1 << 20)
		if err != nil {
			t.Fatalf("alloc %d: %v", i, err)
		}
		for j := range b.Bytes() {
			b.Bytes()[j] = byte(i + 1)
		}
		blocks = append(blocks, b)
	}
	if st := e.Stats().Pool; st.Arenas < 3 {
		t.Fatalf("%d arenas after 3 MiB from a 1 MiB pool", st.Arenas)
	}
	for _, fb := range be.Describe().Fallbacks {
		if bytes.Contains([]byte(fb.Error()), []byte("not registered")) {
			t.Errorf("an arena the pool grew by is not a fixed buffer: %v", fb)
		}
		t.Logf("fallback: %v", fb)
	}
	if !slices.Contains(be.Describe().Features, "fixed-buffers") {
		t.Errorf("features %v: the first arena is not a fixed buffer", be.Describe().Features)
	}
	ctx := t.Context()
	for i, b := range blocks {
		id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(int64(i) << 20), Len: b.Len()})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(ctx, id); err != nil {
			t.Fatalf("write from arena of block %d: %v", i, err)
		}
	}
	got := make([]byte, 3<<20)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got[i<<20] != byte(i+1) || got[(i+1)<<20-1] != byte(i+1) {
			t.Fatalf("block %d did not land at its offset", i)
		}
	}
}
