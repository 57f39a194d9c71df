// Package version is the --version line of hcomm's binaries: the module
// version (hcomm.Version) and what the binary knows of its build (VCS
// revision, modified tree, Go version).
package version

import (
	"fmt"
	"runtime/debug"

	"github.com/hcomm-go/hcomm"
)

// String is prog's --version line, e.g.
// "hcomm-demo 0.1.0, revision 0aa4c19…, go1.26.8" (the format of
// hcomm-trace's).
func String(prog string) string {
	rev, mod, gov := "unknown", "", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		gov = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					mod = " (modified)"
				}
			}
		}
	}
	return fmt.Sprintf("%s %s, revision %s%s, %s", prog, hcomm.Version, rev, mod, gov)
}
