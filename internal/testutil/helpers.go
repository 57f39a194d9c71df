package testutil

import (
	"fmt"
	"os"
	"path/filepath"
)

// HelpersEnv names the directory of test helper programs built ahead of
// time. The VM harness (tests/vm/exec.sh) sets it in the guest, which has no
// Go toolchain and no C compiler: it builds what the package's
// testdata/vm-helpers lists on the host and puts the programs there.
const HelpersEnv = "HCOMM_TEST_HELPERS"

// Helper returns the path of the helper program name: the prebuilt one in
// $HCOMM_TEST_HELPERS when that is set (an error if it is missing there:
// testdata/vm-helpers must list it), else the one build writes into dir.
func Helper(dir, name string, build func(out string) error) (string, error) {
	if pre := os.Getenv(HelpersEnv); pre != "" {
		p := filepath.Join(pre, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("prebuilt test helper %s (list it in the package's testdata/vm-helpers): %w", name, err)
		}
		return p, nil
	}
	p := filepath.Join(dir, name)
	if err := build(p); err != nil {
		return "", err
	}
	return p, nil
}
