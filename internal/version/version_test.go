package version

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm"
)

func TestString(t *testing.T) {
	got := String("hcomm-x")
	if !strings.HasPrefix(got, "hcomm-x "+hcomm.Version+", revision ") {
		t.Errorf("String = %q, want the program and hcomm.Version first", got)
	}
	if want := fmt.Sprintf("%d.%d.%d", hcomm.VersionMajor, hcomm.VersionMinor, hcomm.VersionPatch); hcomm.Version != want {
		t.Errorf("hcomm.Version %q, its parts say %q", hcomm.Version, want)
	}
}

// TestSameEverywhere: the C header and the Python package carry the same
// version as hcomm.Version (capi checks the header's numbers at compile
// time; this checks the strings; the Python package's build backend reads
// its version from __init__.py).
func TestSameEverywhere(t *testing.T) {
	for file, want := range map[string]string{
		"../../capi/hcomm.h":             `#define HCOMM_VERSION_STRING "` + hcomm.Version + `"`,
		"../../python/hcomm/__init__.py": `__version__ = "` + hcomm.Version + `"`,
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: no %s", file, want)
		}
	}
}
