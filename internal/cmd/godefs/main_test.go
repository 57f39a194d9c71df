package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// committed lists every package with a generated kernel ABI file: a new
// one belongs here and in the Makefile's check-generate.
var committed = []string{"../../uring", "../../../vfio"}

// TestCommittedFilesFresh regenerates each committed z-file and compares it
// byte for byte (the same check as make check-generate, run by go test).
func TestCommittedFilesFresh(t *testing.T) {
	for _, dir := range committed {
		for _, a := range arches {
			t.Run(filepath.Base(dir)+"/"+a.goarch, func(t *testing.T) {
				testFresh(t, dir, a)
			})
		}
	}
}

// testFresh compares dir's committed z-file for a with what generate makes.
func testFresh(t *testing.T, dir string, a arch) {
	out, got, err := generate(dir, a)
	if errors.Is(err, errMissingTool) {
		t.Skipf("cannot run cgo -godefs here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from what its types_linux.go produces: run make generate", out)
	}
}

// TestStaleFileFails: -check refuses a z-file that does not match its
// input (a copy of internal/uring with one constant changed).
func TestStaleFileFails(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"types_linux.go", "zuring_linux_" + runtime.GOARCH + ".go"} {
		b, err := os.ReadFile(filepath.Join("../../uring", f))
		if err != nil {
			t.Skipf("no committed %s for %s: %v", f, runtime.GOARCH, err)
		}
		if f != "types_linux.go" {
			b = bytes.Replace(b, []byte("opNop            = 0x0"), []byte("opNop            = 0x1"), 1)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, err := lookupArch(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	err = run(dir, a, true)
	if errors.Is(err, errMissingTool) {
		t.Skipf("cannot run cgo -godefs here: %v", err)
	}
	if err == nil {
		t.Fatal("-check accepted a z-file with a changed constant")
	}
	t.Log(err)
}
