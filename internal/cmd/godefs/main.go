// Command godefs turns a package's types_linux.go (C structs and constants
// named through cgo) into the committed pure-Go z<pkg>_linux_<GOARCH>.go, one
// per architecture hcomm supports (amd64, arm64), the way
// golang.org/x/sys/unix generates its types: `go tool cgo -godefs` with
// GOARCH and that architecture's C compiler and kernel headers, a stable
// second header line (cgo's names a temporary directory), gofmt. It is
// hcomm's one generator for kernel ABI files (internal/uring from
// linux/io_uring.h, vfio from linux/vfio.h):
//
//	go run ./internal/cmd/godefs DIR...          write each DIR's z-files (go generate runs this)
//	go run ./internal/cmd/godefs -check DIR...   compare instead, exit 1 if any differs (make check-generate)
//	-arch amd64                                  only the named architectures (comma-separated)
//
// It needs the kernel UAPI headers (linux-libc-dev; their linux/ and
// asm-generic/ serve every architecture) and, per architecture, a C
// compiler for it with its asm/ headers: the host's gcc for the host's
// architecture, Debian's cross compiler and headers for the other
// (gcc-aarch64-linux-gnu and linux-libc-dev-arm64-cross on an x86-64 host,
// gcc-x86-64-linux-gnu and linux-libc-dev-amd64-cross on an arm64 one;
// `make godefs-tools` installs them). It installs nothing itself: a missing one is an error
// that says what to install.
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
	archList := flag.String("arch", strings.Join(archNames(), ","), "architectures to generate for, comma-separated")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: godefs [-check] DIR...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var as []arch
	for _, name := range strings.Split(*archList, ",") {
		a, err := lookupArch(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "godefs:", err)
			os.Exit(2)
		}
		as = append(as, a)
	}
	failed := false
	for _, dir := range flag.Args() {
		for _, a := range as {
			if err := run(dir, a, *check); err != nil {
				fmt.Fprintln(os.Stderr, "godefs:", err)
				failed = true
			}
		}
	}
	if failed {
		os.Exit(1)
	}
}

// arch is an architecture the z-files are generated for: its GOARCH and
// the GNU triple of its C toolchain (Debian's cross compilers and headers
// are named after it).
type arch struct {
	goarch, triple string
	gccPkg, hdrPkg string // Debian packages of the cross compiler and headers
}

var arches = []arch{
	{goarch: "amd64", triple: "x86_64-linux-gnu", gccPkg: "gcc-x86-64-linux-gnu", hdrPkg: "linux-libc-dev-amd64-cross"},
	{goarch: "arm64", triple: "aarch64-linux-gnu", gccPkg: "gcc-aarch64-linux-gnu", hdrPkg: "linux-libc-dev-arm64-cross"},
}

func archNames() []string {
	var names []string
	for _, a := range arches {
		names = append(names, a.goarch)
	}
	return names
}

func lookupArch(goarch string) (arch, error) {
	for _, a := range arches {
		if a.goarch == goarch {
			return a, nil
		}
	}
	return arch{}, fmt.Errorf("no architecture %q (have %s)", goarch, strings.Join(archNames(), ", "))
}

// native says whether a is the host's architecture: then the host's C
// compiler ($CC, else gcc) and /usr/include serve.
func (a arch) native() bool { return a.goarch == runtime.GOARCH }

// cc is the C compiler for a.
func (a arch) cc() string {
	if a.native() {
		if v := strings.Fields(os.Getenv("CC")); len(v) > 0 {
			return v[0]
		}
		return "gcc"
	}
	return a.triple + "-gcc"
}

// asmDir is where a's architecture-specific kernel headers (asm/) are.
// The rest of the UAPI headers (linux/, asm-generic/) are the same for
// every architecture and come from the host's /usr/include for all of
// them, so that the z-files of all architectures describe one kernel
// version (Debian's cross headers lag behind its native ones).
func (a arch) asmDir() string {
	if a.native() {
		return "/usr/include/" + a.triple
	}
	return "/usr/" + a.triple + "/include"
}

// install names the Debian packages that provide a's compiler and headers.
func (a arch) install() string {
	if a.native() {
		return "gcc linux-libc-dev"
	}
	return a.gccPkg + " " + a.hdrPkg
}

// run generates dir's z-file for a and writes it, or with check compares it
// with the committed one.
func run(dir string, a arch, check bool) error {
	out, src, err := generate(dir, a)
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

// generate returns the path of dir's z-file for a (named after the package
// of its types_linux.go) and the bytes it should hold.
func generate(dir string, a arch) (out string, src []byte, err error) {
	in := filepath.Join(dir, input)
	text, err := os.ReadFile(in)
	if err != nil {
		return "", nil, err
	}
	f, err := parser.ParseFile(token.NewFileSet(), in, text, parser.PackageClauseOnly)
	if err != nil {
		return "", nil, err
	}
	out = filepath.Join(dir, "z"+f.Name.Name+"_linux_"+a.goarch+".go")
	if err := checkTools(in, text, a); err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp("", "godefs")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"tool", "cgo", "-objdir", tmp, "-godefs"}
	if !a.native() {
		// The cross compiler searches its own headers first: put the
		// host's architecture-independent ones ahead of them.
		inc := filepath.Join(tmp, "include")
		if err := os.Mkdir(inc, 0o755); err != nil {
			return "", nil, err
		}
		for _, d := range []string{"linux", "asm-generic"} {
			if err := os.Symlink(filepath.Join("/usr/include", d), filepath.Join(inc, d)); err != nil {
				return "", nil, err
			}
		}
		args = append(args, "--", "-I"+inc)
	}
	cmd := exec.Command(goCommand(), append(args, input)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+a.goarch, "CC="+a.cc(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("%s: GOARCH=%s go tool cgo -godefs: %w\n%s", in, a.goarch, err, stderr.Bytes())
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
var errMissingTool = errors.New("missing a build dependency (make godefs-tools installs it)")

// checkTools reports a missing C compiler or kernel header for a up front,
// with what to install, instead of a compiler error.
func checkTools(in string, text []byte, a arch) error {
	cc := a.cc()
	if _, err := exec.LookPath(cc); err != nil {
		return fmt.Errorf("%s: %s C compiler %q not found (apt-get install %s): %w", in, a.goarch, cc, a.install(), errMissingTool)
	}
	for _, m := range includeRe.FindAllSubmatch(text, -1) {
		h := filepath.Join("/usr/include", string(m[1]))
		if _, err := os.Stat(h); err != nil {
			return fmt.Errorf("%s: header %s not found (apt-get install linux-libc-dev): %w", in, h, errMissingTool)
		}
	}
	if h := filepath.Join(a.asmDir(), "asm", "types.h"); !fileExists(h) {
		return fmt.Errorf("%s: %s header %s not found (apt-get install %s): %w", in, a.goarch, h, a.install(), errMissingTool)
	}
	return nil
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
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
