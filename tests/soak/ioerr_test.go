package soak_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
)

// run runs a command and returns its error with its output.
func run(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.MissingPrivilege(t, tool+" not installed")
		}
	}
}

// smallExt4 mounts a fresh ext4 file system of size bytes (no journal, no
// reserved blocks) on a loop device and returns its mount point.
func smallExt4(t *testing.T, size int64) string {
	t.Helper()
	testutil.RequirePrivileged(t, "mount a loop-device ext4 file system")
	needTools(t, "mkfs.ext4", "mount", "umount")
	tmp := t.TempDir()
	img, dir := filepath.Join(tmp, "fs.img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if err := run("mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", img); err != nil {
		t.Fatal(err)
	}
	if err := run("mount", "-o", "loop", img, dir); err != nil {
		testutil.MissingPrivilege(t, "loop mount: "+err.Error())
	}
	t.Cleanup(func() {
		var err error
		for range 100 { // a closed io_uring lets go of its files asynchronously
			if err = run("umount", dir); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("cleanup: %v", err)
	})
	return dir
}

// ioRound writes n chunks of size bytes from a pool block to the file
// behind be (chunk i at offset i*size), in batches, then reads back every
// chunk into cleared memory. It checks that every callback runs exactly
// once, that each write either succeeded (and reads back the bytes written)
// or failed with one of the errnos in allowed (and then — a write that put
// nothing down — reads back as zeros or fails to read with an allowed
// errno), and returns how many writes failed.
func ioRound(t *testing.T, be backend.Backend, n, size int, allowed ...syscall.Errno) (failed int) {
	t.Helper()
	e, err := engine.Open(engine.Config{Backend: be, PoolSize: int64(2*n*size + 1<<20), Alignment: 4096, QueueDepth: 64,
		Backings: []hugepage.Backing{hugepage.Backing4K}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	src, err := e.Alloc(n * size)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := e.Alloc(n * size)
	if err != nil {
		t.Fatal(err)
	}
	fill(src.Bytes(), 0x5eed)
	clear(dst.Bytes())
	ok := func(err error) bool {
		for _, en := range allowed {
			if errors.Is(err, en) {
				return errors.Is(err, engine.ErrIO)
			}
		}
		return false
	}
	phase := func(write bool) []engine.Result {
		res := make([]engine.Result, n)
		calls := make([]atomic.Int32, n)
		ts := make([]engine.Transfer, n)
		for i := range ts {
			ts[i] = engine.Transfer{Len: size, User: uint64(i), Callback: func(r engine.Result) {
				res[r.User] = r
				calls[r.User].Add(1)
			}}
			if write {
				ts[i].Src, ts[i].Dst = engine.HostAt(src, i*size), engine.FileAt(int64(i*size))
			} else {
				ts[i].Src, ts[i].Dst = engine.FileAt(int64(i*size)), engine.HostAt(dst, i*size)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if k, err := e.SubmitBatchContext(ctx, ts, nil); err != nil {
			t.Fatalf("submitted %d of %d: %v", k, n, err)
		}
		if err := e.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range calls {
			if c := calls[i].Load(); c != 1 {
				t.Errorf("chunk %d (write %v): %d callbacks", i, write, c)
			}
		}
		return res
	}
	wrote := phase(true)
	read := phase(false)
	mem := func(b engine.Block, i int) []byte { return b.Bytes()[i*size:][:size] }
	for i := range n {
		w, r := wrote[i], read[i]
		switch {
		case w.Err == nil && r.Err == nil:
			if crc32.Checksum(mem(dst, i), castagnoli) != crc32.Checksum(mem(src, i), castagnoli) {
				t.Errorf("chunk %d: written, but reads back different bytes", i)
			}
		case w.Err == nil:
			t.Errorf("chunk %d: written, but the read failed: %v", i, r.Err)
		case errors.Is(w.Err, engine.ErrShortIO) && slices.Contains(allowed, syscall.ENOSPC):
			// A write the file system had room for only in part: POSIX
			// lets it return the bytes that fit (the 6.1 kernel does).
			// Those read back; nothing else is claimed.
			if w.N <= 0 || w.N >= size {
				t.Errorf("chunk %d: short write of %d bytes (of %d)", i, w.N, size)
			} else if !bytes.Equal(mem(dst, i)[:w.N], mem(src, i)[:w.N]) {
				t.Errorf("chunk %d: the %d bytes a short write reported written read back different", i, w.N)
			}
		case !ok(w.Err):
			t.Errorf("chunk %d: write failed with %v, want ErrIO wrapping one of %v", i, w.Err, allowed)
		default:
			failed++
			// Past the end of the file a read is short (the
			// cleared memory stays zero).
			if r.Err != nil && !ok(r.Err) && !errors.Is(r.Err, engine.ErrShortIO) {
				t.Errorf("chunk %d: read after the failed write: %v", i, r.Err)
			}
			if (r.Err == nil || errors.Is(r.Err, engine.ErrShortIO)) && crc32.Checksum(mem(dst, i), castagnoli) != crc32.Checksum(make([]byte, size), castagnoli) {
				t.Errorf("chunk %d: the write failed, yet the file holds data there", i)
			}
		}
	}
	return failed
}

// TestFileFullFS: the file backend under real I/O errors on the host, an
// ext4 file system that runs out of space (buffered and O_DIRECT): each
// write that does not fit fails once with ENOSPC, every other one lands and
// reads back intact, nothing is lost or duplicated.
func TestFileFullFS(t *testing.T) {
	dir := smallExt4(t, 8<<20)
	for _, direct := range []bool{false, true} {
		name := map[bool]string{false: "buffered", true: "O_DIRECT"}[direct]
		t.Run(name, func(t *testing.T) {
			flags := os.O_RDWR | os.O_CREATE | os.O_TRUNC
			if direct {
				flags |= syscall.O_DIRECT
			}
			f, err := os.OpenFile(filepath.Join(dir, "data"), flags, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			be, err := uringfile.New(f, uringfile.Config{})
			if err != nil {
				t.Fatal(err)
			}
			// 16 MiB into an 8 MiB file system.
			failed := ioRound(t, be, 256, 64<<10, syscall.ENOSPC)
			if failed == 0 {
				t.Errorf("16 MiB fit into an 8 MiB file system: no write failed")
			}
			t.Logf("%s: %d of 256 writes failed with ENOSPC, the rest read back intact", name, failed)
		})
	}
}

// TestFileDMError: the file backend over a block device with a bad region
// — a device-mapper `error` target between two linear ones over a loop
// device, opened O_DIRECT: writes and reads that touch the bad region fail
// once with EIO, everything else lands intact. Needs device-mapper (dm-mod,
// /dev/mapper/control, dmsetup) and loop devices: the host kernel here has
// no device-mapper, so this runs in the VM (tests/vm) only.
func TestFileDMError(t *testing.T) {
	testutil.RequirePrivileged(t, "create loop and device-mapper devices")
	if ctl, err := os.OpenFile("/dev/mapper/control", os.O_RDWR, 0); err != nil {
		testutil.SkipAllowed(t, "no device-mapper in this kernel (/dev/mapper/control: "+err.Error()+"); the VM tests (tests/vm) run this with dm-mod")
	} else {
		ctl.Close()
	}
	needTools(t, "dmsetup", "losetup")
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	const size = 16 << 20
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = run("losetup", "-d", loop) })
	name := fmt.Sprintf("hcomm-soak-%d", os.Getpid())
	// Sectors of 512 bytes: [0, 8 MiB) linear, [8, 9 MiB) error, [9, 16 MiB) linear.
	table := fmt.Sprintf("0 16384 linear %s 0\n16384 2048 error\n18432 14336 linear %s 18432\n", loop, loop)
	cmd := exec.Command("dmsetup", "create", name)
	cmd.Stdin = strings.NewReader(table)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dmsetup create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = run("dmsetup", "remove", "--retry", name) })
	dev, err := os.OpenFile("/dev/mapper/"+name, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	be, err := uringfile.New(dev, uringfile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	failed := ioRound(t, be, 256, 64<<10, syscall.EIO)
	// 1 MiB of 16 is bad: the 16 chunks of 64 KiB inside it.
	if failed != 16 {
		t.Errorf("%d writes failed, want the 16 that touch the error target", failed)
	}
}
