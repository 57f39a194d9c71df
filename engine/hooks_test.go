package engine_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHooksInBinary builds examples/seedflow (a real program using the
// engine), checks that both hook symbols are in its symbol table with
// their documented names, and that the compiler reports them not inlinable
// (//go:noinline), so every call site really calls them.
func TestHooksInBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program (-short)")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build a binary with: %v", err)
	}
	if _, err := os.Stat("../examples/seedflow/main.go"); err != nil {
		t.Skipf("run from the engine package directory (go test does): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "seedflow")
	out, err := exec.Command(gobin, "build", "-gcflags=github.com/hcomm-go/hcomm/engine=-m=2", "-o", bin, "../examples/seedflow").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, h := range []string{"hookSubmitBatch", "hookReapBatch"} {
		if !strings.Contains(string(out), "cannot inline "+h+": marked go:noinline") {
			t.Errorf("compiler did not report %s as noinline:\n%s", h, grepLines(string(out), "hook"))
		}
	}
	f, err := elf.Open(bin)
	must(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	must(t, err)
	found := 0
	for _, s := range syms {
		switch s.Name {
		case "github.com/hcomm-go/hcomm/engine.hookSubmitBatch", "github.com/hcomm-go/hcomm/engine.hookReapBatch":
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
				found++
				t.Logf("%s at %#x, %d bytes", s.Name, s.Value, s.Size)
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d of the 2 hook symbols in %s", found, bin)
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
