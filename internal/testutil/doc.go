// Package testutil holds helpers shared by hcomm's tests.
//
// The central rule it enforces: a test that needs privileges (root, hugepages,
// eBPF, VFIO, io_uring features) skips with the reason when the privilege or
// feature is missing, and FAILS instead of skipping when the environment
// variable HCOMM_REQUIRE_PRIVILEGED=1 is set (CI sets it and runs as root), so
// that a green CI run can never hide a privileged test that did not run
// (MissingPrivilege, RequirePrivileged, RequireFeature).
//
// File descriptor leaks: RunCheckingFDs (a package's TestMain), CheckFDs (one
// test), and SnapshotFDs with FDs.Leaked (around any stretch of a test) are
// the one implementation the packages share.
package testutil
