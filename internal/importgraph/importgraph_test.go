package importgraph

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/hcomm-go/hcomm"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	CgoFiles   []string
	Standard   bool
}

// load lists every package of the module with its direct imports and its
// transitive dependencies (non-test).
func load(t *testing.T) map[string]*pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(p.ImportPath, module) {
			pkgs[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = &p
		}
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d hcomm packages: the test would check nothing", len(pkgs))
	}
	return pkgs
}

func ours(deps []string) []string {
	var r []string
	for _, d := range deps {
		if strings.HasPrefix(d, module+"/") {
			r = append(r, strings.TrimPrefix(d, module+"/"))
		}
	}
	return r
}

// under reports whether p is one of prefixes or inside one; a prefix
// "x/*" matches only packages inside x, not x itself.
func under(p string, prefixes ...string) bool {
	for _, pre := range prefixes {
		if inner, ok := strings.CutSuffix(pre, "/*"); ok {
			if strings.HasPrefix(p, inner+"/") {
				return true
			}
			continue
		}
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// rules: for packages under `from`, no dependency (transitive) under any
// of `forbidden`.
var rules = []struct {
	from      []string
	forbidden []string
	why       string
}{
	{[]string{"engine"}, []string{"backend/*", "vfio", "capi", "cmd", "trace", "internal/baseline"},
		"the engine core knows no device, file or network: it imports the contract (package backend), and backends implement it"},
	{[]string{"backend"}, []string{"engine", "capi", "cmd"},
		"a backend imports the contract (package backend), never the engine"},
	{[]string{"hugepage", "ring", "internal/span", "internal/uring", "internal/atomicrel"}, []string{"engine", "backend", "vfio", "trace", "capi", "cmd"},
		"memory and rings know nothing of devices"},
	{[]string{"trace"}, []string{"engine", "backend", "capi", "cmd"},
		"trace observes processes from outside, by symbol names"},
	{[]string{"backend/uringfile", "backend/memory"}, []string{"vfio"},
		"a file or memory program links no device code"},
	{[]string{"engine", "backend", "vfio", "hugepage", "ring", "trace", "internal"}, []string{"vfio/mock", "capi", "cmd"},
		"the software device is linked only by programs that choose it (cmd/, capi, examples, tests)"},
}

func TestLayering(t *testing.T) {
	pkgs := load(t)
	for path, p := range pkgs {
		for _, r := range rules {
			if !under(path, r.from...) || path == "vfio/mock" {
				continue
			}
			for _, d := range ours(p.Deps) {
				if under(d, r.forbidden...) {
					t.Errorf("%s depends on %s: %s", path, d, r.why)
				}
			}
		}
	}
}

// TestCgo: cgo only in capi and the UCX backend; the core stays pure Go.
func TestCgo(t *testing.T) {
	for path, p := range load(t) {
		if len(p.CgoFiles) > 0 && !under(path, "capi", "backend/ucx") {
			t.Errorf("%s has cgo files %v: cgo belongs in capi/ and backend/ucx only", path, p.CgoFiles)
		}
	}
}

// TestFileProgramLinksNoMock: a program that uses the engine with the file
// backend (examples/fileio would be one) links no software device.
func TestFileProgramLinksNoMock(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/engine", module+"/backend/uringfile").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if d == module+"/vfio/mock" || strings.HasPrefix(d, module+"/vfio") {
			t.Errorf("engine + file backend link %s", d)
		}
	}
}
