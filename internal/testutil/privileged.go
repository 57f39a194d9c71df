package testutil

import (
	"errors"
	"os"
	"strconv"
	"testing"
)

// RequireEnv is the environment variable that turns privileged skips into
// failures.
const RequireEnv = "HCOMM_REQUIRE_PRIVILEGED"

// Required reports whether privileged tests must run (HCOMM_REQUIRE_PRIVILEGED=1).
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// MissingPrivilege stops the test because a privilege or feature it needs is
// missing: it skips with the reason, or fails with it when privileged tests
// are required. why names what the test needs and why it is missing.
func MissingPrivilege(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("privileged test cannot run (%s=1 demands it): %s", RequireEnv, why)
		return
	}
	t.Skipf("skipped, needs privileges: %s (set %s=1 to make this a failure)", why, RequireEnv)
}

// RequirePrivileged skips (or fails, see MissingPrivilege) unless the test runs
// as root. why says what the test does that needs root, e.g. "reserve 2 MiB
// hugepages".
func RequirePrivileged(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		MissingPrivilege(t, why+": not running as root (euid "+strconv.Itoa(os.Geteuid())+")")
	}
}

// RequireFeature stops the test when a feature probe failed. When err says
// that a feature or a privilege is missing (Missing), it skips with the
// reason, or fails under HCOMM_REQUIRE_PRIVILEGED=1 (see MissingPrivilege).
// Any other error FAILS the test: a regression in the code under test must
// never read as "feature unavailable". feature names the feature, err is
// what the probe said (nil: the feature is there, nothing happens).
func RequireFeature(t testing.TB, feature string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if !Missing(err) {
		t.Fatalf("%s: the probe failed, and not because the feature or a privilege is missing: %v", feature, err)
		return
	}
	MissingPrivilege(t, feature+" unavailable: "+err.Error())
}

// Missing reports whether err says that a feature or a privilege is
// missing: it wraps errors.ErrUnsupported (so do ENOSYS, EOPNOTSUPP/ENOTSUP,
// and the packages' own "not supported" sentinels, which wrap it) or
// os.ErrPermission (so do EPERM and EACCES). A bare EINVAL does not count:
// the package that knows an EINVAL means "the kernel lacks this feature"
// wraps it with its not-supported sentinel (internal/uring does).
func Missing(err error) bool {
	return errors.Is(err, errors.ErrUnsupported) || errors.Is(err, os.ErrPermission)
}

// SkipAllowed skips with the reason even when privileged tests are required.
// It exists for the single documented case where the host kernel cannot
// provide a feature that another harness (the VM tests) covers; every call
// site must name that harness in reason.
func SkipAllowed(t testing.TB, reason string) {
	t.Helper()
	t.Skip(reason)
}
