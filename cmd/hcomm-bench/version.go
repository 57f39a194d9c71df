package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/hcomm-go/hcomm/internal/version"
)

var versionFlag = flag.Bool("version", false, "print the version (hcomm.Version, VCS revision, Go version) and exit")

// exitIfVersion prints the --version line and exits when -version was given.
func exitIfVersion() {
	if *versionFlag {
		fmt.Println(version.String("hcomm-bench"))
		os.Exit(0)
	}
}
