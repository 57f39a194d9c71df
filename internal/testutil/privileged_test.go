package testutil

import (
	"fmt"
	"testing"
)

// fakeTB records how a helper ended the test instead of ending it, and runs
// registered cleanups when asked.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
	cleanups        []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = true
	f.msg = fmt.Sprintf(format, args...)
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}
func (f *fakeTB) Errorf(format string, args ...any) { f.Fatalf(format, args...) }
func (f *fakeTB) Error(args ...any)                 { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeTB) Fatal(args ...any)                 { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeTB) Cleanup(fn func())                 { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestMissingPrivilege(t *testing.T) {
	tests := []struct {
		name     string
		env      string
		wantSkip bool
		wantFail bool
	}{
		{"not required skips", "", true, false},
		{"zero skips", "0", true, false},
		{"required fails", "1", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.env)
			f := &fakeTB{TB: t}
			MissingPrivilege(f, "reason")
			if f.skipped != tc.wantSkip || f.failed != tc.wantFail {
				t.Fatalf("skipped=%v failed=%v, want skipped=%v failed=%v", f.skipped, f.failed, tc.wantSkip, tc.wantFail)
			}
		})
	}
}
