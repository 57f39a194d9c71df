package testutil

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// errPkgUnsupported is a package's "not supported" sentinel, which wraps
// errors.ErrUnsupported (as internal/uring's ErrUnsupported does).
var errPkgUnsupported = fmt.Errorf("pkg: not supported by the kernel (%w)", errors.ErrUnsupported)

// TestRequireFeature: RequireFeature skips on missing features and
// privileges only; any other error fails the test, whatever
// HCOMM_REQUIRE_PRIVILEGED says.
func TestRequireFeature(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string // "", "skip", "fail"
	}{
		{"no error", nil, ""},
		{"errors.ErrUnsupported", errors.ErrUnsupported, "skip"},
		{"package sentinel, wrapped", fmt.Errorf("pkg: register: %w: %w", errPkgUnsupported, syscall.EINVAL), "skip"},
		{"ENOSYS", fmt.Errorf("io_uring_setup: %w", syscall.ENOSYS), "skip"},
		{"EOPNOTSUPP", syscall.EOPNOTSUPP, "skip"},
		{"EPERM", fmt.Errorf("bpf: %w", syscall.EPERM), "skip"},
		{"EACCES", &os.PathError{Op: "open", Path: "/dev/vfio/vfio", Err: syscall.EACCES}, "skip"},
		{"os.ErrPermission", os.ErrPermission, "skip"},
		{"bare EINVAL", fmt.Errorf("io_uring_setup: %w", syscall.EINVAL), "fail"},
		{"EFAULT", syscall.EFAULT, "fail"},
		{"a regression", errors.New("uring: mmap rings: index out of range"), "fail"},
		{"not exist", os.ErrNotExist, "fail"},
	}
	for _, env := range []string{"", "1"} {
		for _, tc := range tests {
			t.Run(tc.name+"/"+RequireEnv+"="+env, func(t *testing.T) {
				t.Setenv(RequireEnv, env)
				f := &fakeTB{TB: t}
				RequireFeature(f, "the feature", tc.err)
				want := tc.want
				if want == "skip" && env == "1" {
					want = "fail" // required: a missing feature is a failure too
				}
				got := ""
				switch {
				case f.skipped && f.failed:
					got = "both"
				case f.skipped:
					got = "skip"
				case f.failed:
					got = "fail"
				}
				if got != want {
					t.Fatalf("RequireFeature(%v): %q (%s), want %q", tc.err, got, f.msg, want)
				}
				if tc.err != nil && !strings.Contains(f.msg, tc.err.Error()) {
					t.Errorf("message %q does not carry the error %q", f.msg, tc.err)
				}
			})
		}
	}
}
