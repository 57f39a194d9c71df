package version

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm"
)

func TestString(t *testing.T) {
	got := String("hcomm-x")
	if !strings.HasPrefix(got, "hcomm-x "+hcomm.Version+" (") {
		t.Errorf("String = %q, want the program and hcomm.Version first", got)
	}
	if want := fmt.Sprintf("%d.%d.%d", hcomm.VersionMajor, hcomm.VersionMinor, hcomm.VersionPatch); hcomm.Version != want {
		t.Errorf("hcomm.Version %q, its parts say %q", hcomm.Version, want)
	}
}
