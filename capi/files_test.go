package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"github.com/hcomm-go/hcomm/hugepage"
)

// TestOpenFile: a read handle over an existing file reads any aligned
// range of it into another handle's pool block (registered with it),
// byte for byte, with O_DIRECT where the file system has it; writes and
// the wrong files are refused with their codes.
func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	want := make([]byte, 3*fileAlign+100) // the last granule partial
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	path := filepath.Join(dir, "shard")
	if err := os.WriteFile(path, want, 0o444); err != nil {
		t.Fatal(err)
	}
	pool := openT(t, config{Target: targetMemory, PoolSize: 1 << 20, Align: fileAlign}, newCalls().invoke)
	dst, code := pool.allocHost(4 * fileAlign)
	if code != codeOK {
		t.Fatalf("allocHost: %d", code)
	}
	blk, _, _ := pool.host.find(dst, 4*fileAlign)
	mem := blk.Bytes()
	for _, direct := range []bool{false, true} {
		flags := uint32(0)
		if direct {
			flags = fileDirect
		}
		f, size, granted, code := openFile(path, flags, 16, newCalls().invoke)
		if code != codeOK {
			t.Fatalf("openFile(direct=%v): %d", direct, code)
		}
		if size != uint64(len(want)) {
			t.Errorf("size %d, want %d", size, len(want))
		}
		if direct && granted != fileDirect && directWorks(t, dir) {
			t.Errorf("granted %#x on a file system that has O_DIRECT", granted)
		}
		if !direct && granted != 0 {
			t.Errorf("granted %#x without asking", granted)
		}
		// Its own pool is in 4 KiB pages (a 64 KiB pool must not take a
		// 2 MiB hugetlb page per open file).
		if b := f.eng.Backing(); b != hugepage.Backing4K {
			t.Errorf("direct=%v: the read handle's pool is %v, want %v", direct, b, hugepage.Backing4K)
		}
		if c := f.registerHost(unsafe.Pointer(&mem[0]), 4*fileAlign); c != codeOK {
			t.Fatalf("registerHost: %d", c)
		}
		clear(mem)
		// Granules 1 and 2 of the file into the block's start.
		id, c := f.submit(devAddrBase+fileAlign, dst, 2*fileAlign, 0, 0)
		if c != codeOK || f.wait(id, 5000) != codeOK {
			t.Fatalf("read: submit %d", c)
		}
		if !bytes.Equal(mem[:2*fileAlign], want[fileAlign:3*fileAlign]) {
			t.Errorf("direct=%v: the bytes read differ from the file's", direct)
		}
		if _, c := f.submit(devAddrBase+4*fileAlign, dst, fileAlign, 0, 0); c != codeEFAULT {
			t.Errorf("read beyond the file space: %d, want EFAULT", c)
		}
		id, c = f.submit(dst, devAddrBase, fileAlign, 0, 0)
		if c == codeOK {
			c = f.wait(id, 5000)
		}
		if c != codeEIO {
			t.Errorf("write to a read handle: %d, want EIO", c)
		}
		if c := finalize(f.handle, 5000); c != codeOK {
			t.Errorf("finalize: %d", c)
		}
	}
	for _, tc := range []struct {
		name, path string
		flags      uint32
		want       int32
	}{
		{"missing", filepath.Join(dir, "nope"), 0, codeENODEV},
		{"directory", dir, fileDirect, codeEINVAL},
		{"empty path", "", 0, codeEINVAL},
		{"flags", path, 2, codeEINVAL},
	} {
		if _, _, _, c := openFile(tc.path, tc.flags, 0, newCalls().invoke); c != tc.want {
			t.Errorf("%s: code %d, want %d", tc.name, c, tc.want)
		}
	}
}

// directWorks reports whether dir's file system takes O_DIRECT.
func directWorks(t *testing.T, dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "probe"), os.O_RDWR|os.O_CREATE|syscall.O_DIRECT, 0o600)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}
