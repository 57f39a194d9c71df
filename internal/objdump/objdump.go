// Package objdump disassembles functions of a package as built for a given
// architecture, for tests that hold hand-written assembly to the
// instructions it must be (access widths, barriers): it builds the
// package's test binary with `go test -c` for GOOS=linux and the named
// GOARCH (cgo off, so any host cross-builds it) and reads it back with
// `go tool objdump`.
package objdump

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Inst is one disassembled instruction.
type Inst struct {
	Word string // the encoding as objdump prints it (hex, e.g. "d50332bf" on arm64)
	Asm  string // the instruction in Go assembler syntax ("DMB $2")
}

// String is the instruction as "word asm".
func (i Inst) String() string { return i.Word + " " + i.Asm }

// textRe matches objdump's function header: TEXT name(SB) file.
var textRe = regexp.MustCompile(`^TEXT (\S+)\(SB\) (\S+)`)

// Funcs builds the test binary of the package in dir (a directory of the
// calling test's module; "." is the calling test's own package) for
// linux/goarch and returns the instructions of each function whose name
// matches sym and which is defined in an assembly (.s) file, keyed by the
// function's name without its package path ("mmioWrite32"); each ends at
// its first RET (what follows is alignment padding). The go command is the
// one on PATH (go test puts the toolchain that runs it first). It skips the test under -short (a build takes
// seconds) and fails it if the go command fails.
func Funcs(t testing.TB, goarch, dir, sym string) map[string][]Inst {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a test binary for " + goarch + ": skipped under -short")
	}
	if _, err := exec.LookPath("go"); err != nil && os.Getenv("HCOMM_IN_VM") == "1" {
		// The VM test guest (tests/vm) has no toolchain; the host's run
		// of the same test checks the machine code.
		t.Skip("no Go toolchain in the VM guest: the disassembly is checked on the host")
	}
	bin := filepath.Join(t.TempDir(), "pkg.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=%s go test -c in %s: %v\n%s", goarch, dir, err, out)
	}
	dump := exec.Command("go", "tool", "objdump", "-s", sym, bin)
	out, err := dump.Output()
	if err != nil {
		t.Fatalf("go tool objdump -s %q: %v", sym, err)
	}
	return parse(out)
}

// parse reads objdump's output: per function a TEXT line, then one line per
// instruction, "file:line<TAB>address<TAB>word<TAB>asm".
func parse(out []byte) map[string][]Inst {
	funcs := map[string][]Inst{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := textRe.FindStringSubmatch(line); m != nil {
			cur = ""
			if strings.HasSuffix(m[2], ".s") {
				name := strings.TrimSuffix(m[1], ".abi0") // the linker's ABI suffix
				cur = name[strings.LastIndex(name, ".")+1:]
				funcs[cur] = nil
			}
			continue
		}
		if cur == "" {
			continue
		}
		f := strings.Split(strings.TrimSpace(line), "\t")
		var cols []string
		for _, c := range f {
			if c = strings.TrimSpace(c); c != "" {
				cols = append(cols, c)
			}
		}
		if len(cols) < 4 {
			continue
		}
		in := Inst{Word: cols[2], Asm: cols[3]}
		if n := len(funcs[cur]); n > 0 && funcs[cur][n-1].Asm == "RET" {
			continue // alignment padding after the last RET
		}
		funcs[cur] = append(funcs[cur], in)
	}
	return funcs
}

// Format lists instructions one per line, for failure messages.
func Format(insts []Inst) string {
	var b strings.Builder
	for _, in := range insts {
		fmt.Fprintf(&b, "\t%s\n", in)
	}
	return b.String()
}
