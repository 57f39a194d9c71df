// Command godefs turns a package's types_linux.go (C structs and constants
// named through cgo) into the committed pure-Go z<pkg>_linux_<GOARCH>.go, the
// way golang.org/x/sys/unix generates its types: `go tool cgo -godefs`, a
// stable second header line (cgo's names a temporary directory), gofmt.
// It is hcomm's one generator for kernel ABI files (internal/uring from
// linux/io_uring.h, vfio from linux/vfio.h):
//
//	go run ./internal/cmd/godefs DIR...          write each DIR's z-file (go generate runs this)
//	go run ./internal/cmd/godefs -check DIR...   compare instead, exit 1 if any differs (make check-generate)
//
// It needs a C compiler (gcc, or $CC) and the kernel UAPI headers that
// types_linux.go includes (Debian: gcc, linux-libc-dev; `make godefs-tools`
// installs them). It installs nothing itself: a missing one is an error that
// says what to install.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
)

// input is the file each package names its C types in.
const input = "types_linux.go"

// header is the generated file's second line, in place of cgo's own (which
// names the temporary object directory and so changes on every run).
const header = "// cgo -godefs " + input + " (internal/cmd/godefs)"

func main() {
	check := flag.Bool("check", false, "compare each committed file with what its input produces instead of writing it")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: godefs [-check] DIR...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, dir := range flag.Args() {
		if err := run(dir, *check); err != nil {
			fmt.Fprintln(os.Stderr, "godefs:", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// run generates dir's z-file and writes it, or with check compares it with
// the committed one.
func run(dir string, check bool) error {
	out, src, err := generate(dir)
	if err != nil {
		return err
	}
	if !check {
		return os.WriteFile(out, src, 0o644)
	}
	old, err := os.ReadFile(out)
	if err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	if !bytes.Equal(old, src) {
		return fmt.Errorf("%s differs from what %s produces: run 'make generate' and commit", out, filepath.Join(dir, input))
	}
	fmt.Printf("godefs: %s matches %s\n", out, filepath.Join(dir, input))
	return nil
}

// generate returns the path of dir's z-file (named after the package of its
// types_linux.go) and the bytes it should hold.
func generate(dir string) (out string, src []byte, err error) {
	in := filepath.Join(dir, input)
	text, err := os.ReadFile(in)
	if err != nil {
		return "", nil, err
	}
	f, err := parser.ParseFile(token.NewFileSet(), in, text, parser.PackageClauseOnly)
	if err != nil {
		return "", nil, err
	}
	out = filepath.Join(dir, "z"+f.Name.Name+"_linux_"+runtime.GOARCH+".go")
	if err := checkTools(in, text); err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp("", "godefs")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(goCommand(), "tool", "cgo", "-objdir", tmp, "-godefs", input)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("%s: go tool cgo -godefs: %w\n%s", in, err, stderr.Bytes())
	}
	lines := strings.SplitN(string(raw), "\n", 3)
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "// cgo ") {
		return "", nil, fmt.Errorf("%s: unexpected cgo -godefs output: %.200q", in, raw)
	}
	lines[1] = header
	src, err = format.Source([]byte(strings.Join(lines, "\n")))
	if err != nil {
		return "", nil, fmt.Errorf("%s: gofmt the generated code: %w", in, err)
	}
	return out, src, nil
}

// includeRe matches the system headers that the cgo preamble includes.
var includeRe = regexp.MustCompile(`(?m)^#include <([^>]+)>`)

// errMissingTool: a C compiler or a kernel header is not installed.
var errMissingTool = errors.New("missing a build dependency (make godefs-tools installs gcc and linux-libc-dev)")

// checkTools reports a missing C compiler or kernel header up front, with
// what to install, instead of a compiler error.
func checkTools(in string, text []byte) error {
	cc := "gcc"
	if v := strings.Fields(os.Getenv("CC")); len(v) > 0 {
		cc = v[0]
	}
	if _, err := exec.LookPath(cc); err != nil {
		return fmt.Errorf("%s: C compiler %q not found: %w", in, cc, errMissingTool)
	}
	for _, m := range includeRe.FindAllSubmatch(text, -1) {
		h := filepath.Join("/usr/include", string(m[1]))
		if _, err := os.Stat(h); err != nil {
			return fmt.Errorf("%s: %s not found: %w", in, h, errMissingTool)
		}
	}
	return nil
}

// goCommand is the go command to run cgo with: $GO (as the Makefile sets
// it), else go from PATH (go run and go generate put the toolchain that
// runs them first on PATH).
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}
