package uring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// mmapAnon maps n bytes of anonymous memory for fixed buffers (never moved,
// unlike a goroutine stack) and unmaps it at cleanup.
func mmapAnon(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", n, err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// runOne submits e's batch and reaps exactly one completion.
func runOne(t *testing.T, u *Ring) CQE {
	t.Helper()
	return reap(t, u, 1)[0]
}

// TestSparseBuffers: a sparse table of 8 slots, slot 3 filled by an update,
// a WRITE_FIXED and a READ_FIXED through it; after clearing slot 3 a
// READ_FIXED naming it fails; a second update fills it again with other
// memory; misuse is refused before the kernel is asked.
func TestSparseBuffers(t *testing.T) {
	u := newTestRing(t, Config{Entries: 8})
	err := u.RegisterBuffersSparse(8)
	testutil.RequireFeature(t, "sparse fixed-buffer table (IORING_REGISTER_BUFFERS2, IORING_RSRC_REGISTER_SPARSE)", err)

	f, err := os.OpenFile(filepath.Join(t.TempDir(), "data"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())

	const n = 4096
	a := mmapAnon(t, n)
	for i := range a {
		a[i] = byte(i*7 + 1)
	}
	if err := u.UpdateBuffers(3, [][]byte{a}); err != nil {
		t.Fatalf("UpdateBuffers(3, a): %v", err)
	}
	e := u.GetSQE()
	e.PrepWriteFixed(fd, a, 0, 3)
	if c := runOne(t, u); c.Res() != n {
		t.Fatalf("WRITE_FIXED from slot 3: res %d (%v), want %d", c.Res(), c.Err(), n)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, a) {
		t.Fatal("file content differs from what WRITE_FIXED wrote from slot 3")
	}

	// A buffer outside slot 3's memory is refused: the slot is a's pages.
	other := mmapAnon(t, n)
	e = u.GetSQE()
	e.PrepReadFixed(fd, other, 0, 3)
	if c := runOne(t, u); !errors.Is(c.Err(), unix.EFAULT) {
		t.Errorf("READ_FIXED into memory outside slot 3: res %d (%v), want EFAULT", c.Res(), c.Err())
	}

	// Clear slot 3: READ_FIXED naming it fails.
	if err := u.UpdateBuffers(3, [][]byte{nil}); err != nil {
		t.Fatalf("UpdateBuffers(3, nil): %v", err)
	}
	e = u.GetSQE()
	e.PrepReadFixed(fd, a, 0, 3)
	if c := runOne(t, u); !errors.Is(c.Err(), unix.EFAULT) && !errors.Is(c.Err(), unix.EINVAL) {
		t.Errorf("READ_FIXED of a cleared slot: res %d (%v), want EFAULT or EINVAL", c.Res(), c.Err())
	}

	// Fill it again with other memory: READ_FIXED reads the file into it.
	if err := u.UpdateBuffers(3, [][]byte{other}); err != nil {
		t.Fatalf("UpdateBuffers(3, other): %v", err)
	}
	e = u.GetSQE()
	e.PrepReadFixed(fd, other, 0, 3)
	if c := runOne(t, u); c.Res() != n || !bytes.Equal(other, a) {
		t.Errorf("READ_FIXED into slot 3 after a second update: res %d (%v), content equal %v", c.Res(), c.Err(), bytes.Equal(other, a))
	}

	for _, tc := range []struct {
		name string
		slot int
		bufs [][]byte
	}{
		{"past the table", 8, [][]byte{a}},
		{"straddling the end", 7, [][]byte{a, other}},
		{"negative slot", -1, [][]byte{a}},
		{"no buffers", 0, nil},
	} {
		if err := u.UpdateBuffers(tc.slot, tc.bufs); !errors.Is(err, unix.EINVAL) {
			t.Errorf("UpdateBuffers %s: %v, want EINVAL", tc.name, err)
		}
	}
	if err := u.RegisterBuffersSparse(4); !errors.Is(err, unix.EBUSY) {
		t.Errorf("a second buffer table: %v, want EBUSY", err)
	}
	if err := u.UnregisterBuffers(); err != nil {
		t.Fatal(err)
	}
	if err := u.UpdateBuffers(0, [][]byte{a}); !errors.Is(err, unix.ENXIO) {
		t.Errorf("UpdateBuffers without a table: %v, want ENXIO", err)
	}
	for _, n := range []int{0, -1, maxRegBuffers + 1} {
		if err := u.RegisterBuffersSparse(n); !errors.Is(err, unix.EINVAL) {
			t.Errorf("RegisterBuffersSparse(%d): %v, want EINVAL", n, err)
		}
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(other)
}

// TestCancel: reads from an empty pipe stay in flight until cancelled, by
// user data (PrepCancel) or all at once (PrepCancelAny); a cancel that
// matches nothing says ENOENT.
func TestCancel(t *testing.T) {
	u := newTestRing(t, Config{Entries: 8})
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	bufs := make([][]byte, 3)
	for i := range bufs {
		bufs[i] = make([]byte, 64) // heap memory, kept referenced below
	}

	read := func(ud uint64, buf []byte) {
		e := u.GetSQE()
		e.PrepRead(p[0], buf, ^uint64(0))
		e.SetUserData(ud)
	}
	read(1, bufs[0])
	if _, err := u.Submit(); err != nil {
		t.Fatal(err)
	}
	if n, _ := u.PeekCQEs(make([]CQE, 1)); n != 0 {
		t.Fatal("a read from an empty pipe completed")
	}
	e := u.GetSQE()
	e.PrepCancel(1, 0)
	e.SetUserData(100)
	got := byUserData(t, reap(t, u, 2))
	if c := got[1]; !errors.Is(c.Err(), unix.ECANCELED) {
		t.Errorf("cancelled read: res %d (%v), want ECANCELED", c.Res(), c.Err())
	}
	if c := got[100]; c.Res() != 0 {
		t.Errorf("ASYNC_CANCEL by user data: res %d (%v), want 0", c.Res(), c.Err())
	}

	e = u.GetSQE()
	e.PrepCancel(1, 0) // nothing in flight carries 1 any more
	e.SetUserData(101)
	if c := runOne(t, u); !errors.Is(c.Err(), unix.ENOENT) {
		t.Errorf("ASYNC_CANCEL of nothing: res %d (%v), want ENOENT", c.Res(), c.Err())
	}

	read(2, bufs[1])
	read(3, bufs[2])
	e = u.GetSQE()
	e.PrepCancelAny()
	e.SetUserData(102)
	got = byUserData(t, reap(t, u, 3))
	if c := got[102]; c.Err() != nil {
		testutil.RequireFeature(t, "IORING_ASYNC_CANCEL_ANY (Linux 5.19)", cancelErr(c))
	}
	for _, ud := range []uint64{2, 3} {
		if c := got[ud]; !errors.Is(c.Err(), unix.ECANCELED) {
			t.Errorf("read %d after CANCEL_ANY: res %d (%v), want ECANCELED", ud, c.Res(), c.Err())
		}
	}
	if c := got[102]; c.Res() != 2 {
		t.Errorf("ASYNC_CANCEL_ANY|ALL: res %d, want 2 cancelled", c.Res())
	}
	runtime.KeepAlive(bufs)
}

// cancelErr reads an ASYNC_CANCEL_ANY failure: EINVAL is a kernel that does
// not know the flag (a missing feature); anything else is a failure.
func cancelErr(c CQE) error {
	if errors.Is(c.Err(), unix.EINVAL) {
		return errors.Join(ErrNotSupported, c.Err())
	}
	return c.Err()
}

// TestSparseFiles: a sparse table of 4 file slots; slot 2 filled with one
// file, a WRITE through it (SQEFixedFile) lands there; the caller's fd
// closed, the registered file still works; slot 2 cleared, a WRITE naming
// it fails with EBADF; filled again with another file, the WRITE lands in
// that one; misuse is refused before the kernel is asked.
func TestSparseFiles(t *testing.T) {
	u := newTestRing(t, Config{Entries: 8})
	err := u.RegisterFilesSparse(4)
	testutil.RequireFeature(t, "sparse fixed-file table (IORING_REGISTER_FILES2, IORING_RSRC_REGISTER_SPARSE)", err)
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	buf := mmapAnon(t, 4096)
	write := func(b byte) int32 {
		t.Helper()
		for i := range buf {
			buf[i] = b
		}
		e := u.GetSQE()
		e.PrepWrite(2, buf, 0)
		e.SetFlags(SQEFixedFile)
		return runOne(t, u).Res()
	}
	a, b := open("a"), open("b")
	defer b.Close()
	if err := u.UpdateFiles(2, []int32{int32(a.Fd())}); err != nil {
		t.Fatalf("UpdateFiles(2, a): %v", err)
	}
	a.Close() // the table holds its own reference
	if res := write('a'); res != 4096 {
		t.Fatalf("WRITE to slot 2 (a, its fd closed): res %d, want 4096", res)
	}
	if err := u.UpdateFiles(2, []int32{-1}); err != nil {
		t.Fatalf("UpdateFiles(2, -1): %v", err)
	}
	if res := write('x'); res != -int32(unix.EBADF) {
		t.Fatalf("WRITE to cleared slot 2: res %d, want -EBADF", res)
	}
	if err := u.UpdateFiles(2, []int32{int32(b.Fd())}); err != nil {
		t.Fatalf("UpdateFiles(2, b): %v", err)
	}
	if res := write('b'); res != 4096 {
		t.Fatalf("WRITE to slot 2 (b): res %d, want 4096", res)
	}
	for name, want := range map[string]byte{"a": 'a', "b": 'b'} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(got) != 4096 || !bytes.Equal(got, bytes.Repeat([]byte{want}, 4096)) {
			t.Errorf("file %s: %d bytes (%v), want 4096 of %q", name, len(got), err, want)
		}
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"slots outside the table", u.UpdateFiles(3, []int32{-1, -1}), unix.EINVAL},
		{"no slots", u.UpdateFiles(0, nil), unix.EINVAL},
		{"table of 0", u.RegisterFilesSparse(0), unix.EINVAL},
		{"second table", u.RegisterFilesSparse(4), unix.EBUSY},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if err := u.UnregisterFiles(); err != nil {
		t.Fatal(err)
	}
	if err := u.UpdateFiles(0, []int32{-1}); !errors.Is(err, unix.ENXIO) {
		t.Errorf("update without a table: %v, want ENXIO", err)
	}
}
