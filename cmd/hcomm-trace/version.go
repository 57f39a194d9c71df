package main

import (
	"fmt"
	"runtime/debug"

	"github.com/hcomm-go/hcomm"
)

// buildInfo is what the binary knows of its own build: the module version
// (a pseudo-version from the VCS, or "(devel)"), the VCS revision and
// whether the tree was modified, and the Go version.
type buildInfo struct {
	version, revision, goVersion string
	modified                     bool
}

func readBuildInfo() buildInfo {
	b := buildInfo{version: "(unknown)", revision: "unknown", goVersion: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.goVersion = bi.GoVersion
	if bi.Main.Version != "" {
		b.version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "vcs.modified":
			b.modified = s.Value == "true"
		}
	}
	return b
}

func versionString() string {
	b := readBuildInfo()
	mod := ""
	if b.modified {
		mod = " (modified)"
	}
	return fmt.Sprintf("hcomm-trace %s, revision %s%s, %s", hcomm.Version, b.revision, mod, b.goVersion)
}
