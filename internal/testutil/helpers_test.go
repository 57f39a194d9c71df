package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestHelper(t *testing.T) {
	dir := t.TempDir()
	built := 0
	build := func(out string) error { built++; return os.WriteFile(out, nil, 0o755) }
	pre := t.TempDir()
	if err := os.WriteFile(filepath.Join(pre, "there"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env, helper, want string
		wantBuilt               int
		wantErr                 bool
	}{
		{"built", "", "x", filepath.Join(dir, "x"), 1, false},
		{"prebuilt", pre, "there", filepath.Join(pre, "there"), 0, false},
		{"prebuilt missing", pre, "absent", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(HelpersEnv, tt.env)
			built = 0
			got, err := Helper(dir, tt.helper, build)
			if (err != nil) != tt.wantErr || got != tt.want || built != tt.wantBuilt {
				t.Errorf("Helper(%q) = %q, %v (built %d); want %q, error %v (built %d)", tt.helper, got, err, built, tt.want, tt.wantErr, tt.wantBuilt)
			}
		})
	}
	boom := errors.New("boom")
	t.Setenv(HelpersEnv, "")
	if _, err := Helper(dir, "y", func(string) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("build error lost: %v", err)
	}
}
