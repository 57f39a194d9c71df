package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTargets: one handle, a device (the mock) and two files; a copy file →
// device and device → file through it, bytes verified; the refusals.
func TestTargets(t *testing.T) {
	dir := t.TempDir()
	const n = 4 << 20
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.WriteFile(in, want, 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCalls()
	s := openT(t, config{PoolSize: 16 << 20, Align: 4096, DevMemSize: 8 << 20}, c.invoke)
	kin, code := s.addTarget(targetConfig{Target: targetFile, Path: in, DevMemSize: n})
	kout, code2 := s.addTarget(targetConfig{Target: targetFile, Path: out, DevMemSize: n})
	if code != codeOK || code2 != codeOK || kin != 1 || kout != 2 {
		t.Fatalf("addTarget: %d %d (%d %d)", kin, kout, code, code2)
	}
	dev, code := s.allocDev(n)
	fin, code2 := s.allocTarget(kin, n)
	fout, code3 := s.allocTarget(kout, n)
	if code != codeOK || code2 != codeOK || code3 != codeOK {
		t.Fatalf("alloc: %d %d %d", code, code2, code3)
	}
	if k, off := devTarget(fin); k != kin || off != 0 {
		t.Fatalf("file space of target %d at %#x: target %d offset %d", kin, fin, k, off)
	}
	for _, step := range []struct{ dst, src uintptr }{{dev, fin}, {fout, dev}} {
		id, code := s.copy(step.dst, step.src, n, 1<<20, 4, 0, 0)
		if code != codeOK {
			t.Fatalf("copy %#x → %#x: %d", step.src, step.dst, code)
		}
		if code := s.wait(id, 30000); code != codeOK {
			t.Fatalf("wait for copy %d: %d", id, code)
		}
		if code := s.wait(id, 0); code != codeENOENT {
			t.Fatalf("a second wait for copy %d: %d, want ENOENT", id, code)
		}
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:n], want) {
		t.Fatal("out differs from in")
	}
	// A host block reaches both a file and the device.
	h, code := s.allocHost(4096)
	if code != codeOK {
		t.Fatal(code)
	}
	for _, p := range []uintptr{dev, fout} {
		id, code := s.submit(h, p, 4096, 0, 0)
		if code != codeOK || s.wait(id, 10000) != codeOK {
			t.Fatalf("host → %#x: %d", p, code)
		}
	}
	for _, tc := range []struct {
		name     string
		src, dst uintptr
		want     int32
	}{
		{"between two targets", fin, dev, codeEOPNOTSUPP},
		{"host to host without a memory target", h, h, codeEOPNOTSUPP},
		{"unallocated file space", h, fout + n, codeEFAULT},
		{"no such target", h, devAddrBase | 5<<targetShift, codeEFAULT},
	} {
		if _, code := s.submit(tc.src, tc.dst, 4096, 0, 0); code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
		}
	}
	if _, code := s.copy(dev, h, 4096, 0, 0, 0, 0); code != codeEFAULT {
		t.Errorf("copy from host memory: %d, want EFAULT", code)
	}
	if _, code := s.addTarget(targetConfig{Target: targetRemote}); code != codeEINVAL {
		t.Errorf("remote added: %d, want EINVAL", code)
	}
	// Memory target: host to host works then.
	if _, code := s.addTarget(targetConfig{Target: targetMemory}); code != codeOK {
		t.Fatal(code)
	}
	h2, _ := s.allocHost(4096)
	if id, code := s.submit(h, h2, 4096, 0, 0); code != codeOK || s.wait(id, 10000) != codeOK {
		t.Fatalf("host → host with a memory target: %d", code)
	}
	for range maxTargets - 4 {
		if _, code := s.addTarget(targetConfig{Target: targetMemory}); code != codeOK {
			t.Fatal(code)
		}
	}
	if _, code := s.addTarget(targetConfig{Target: targetMemory}); code != codeEMFILE {
		t.Errorf("target %d: %d, want EMFILE", maxTargets+1, code)
	}
}
