package main

import (
	"fmt"
	"os"

	"github.com/hcomm-go/hcomm/internal/version"
)

const versionUsage = "print the version (hcomm.Version, VCS revision, Go version) and exit"

// exitIfVersion prints the --version line and exits when -version was given.
func exitIfVersion(v bool) {
	if v {
		fmt.Println(version.String("hcomm-demo"))
		os.Exit(0)
	}
}
