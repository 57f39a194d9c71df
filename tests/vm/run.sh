#!/usr/bin/env bash
# run.sh — `make test-vm`: run the tests of the given packages inside a QEMU
# guest that has what the host may lack (kernel VFIO with a vIOMMU and QEMU's
# edu device, hugetlb pages, io_uring, BPF), one VM per test binary, through
# `go test -exec tests/vm/exec.sh`. go test reports as usual; a failing guest
# test fails the run.
#
#   tests/vm/run.sh ./hugepage/... ./vfio/...
#
# No root is needed once the host tools are installed (QEMU's TCG runs as
# any user). When they are missing and cannot be installed (not root), the
# run is skipped with a message — or fails when HCOMM_REQUIRE_PRIVILEGED=1.
# Extra go test flags: HCOMM_VM_GOFLAGS (e.g. "-v -run Edu").
# HCOMM_VM_ARCH=arm64 builds the test binaries for linux/arm64 and runs them
# in an AArch64 guest (qemu-system-aarch64; exec.sh picks the guest by the
# binary's architecture). HCOMM_VM_CGO=1 builds with cgo (backend/ucx; the
# binary then brings the shared libraries it links).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
[ $# -gt 0 ] || { echo "usage: run.sh packages..." >&2; exit 2; }

arch="${HCOMM_VM_ARCH:-amd64}"
export HCOMM_VM_ARCH=$arch
start=$(date +%s)
"$here/prepare.sh" >/dev/null
rc=$?
if [ $rc -eq 3 ]; then
	if [ "${HCOMM_REQUIRE_PRIVILEGED:-}" = 1 ]; then
		echo "test-vm: FAIL: the VM harness cannot run here (see above) and HCOMM_REQUIRE_PRIVILEGED=1 demands it" >&2
		exit 1
	fi
	echo "test-vm: SKIPPED: the VM harness cannot run here (see above); set HCOMM_REQUIRE_PRIVILEGED=1 to make this a failure" >&2
	exit 0
fi
[ $rc -eq 0 ] || { echo "test-vm: FAIL: tests/vm/prepare.sh exited $rc" >&2; exit 1; }

# shellcheck disable=SC2086
CGO_ENABLED="${HCOMM_VM_CGO:-0}" GOARCH=$arch go test -count=1 -timeout "${HCOMM_VM_GOTIMEOUT:-10m}" ${HCOMM_VM_GOFLAGS:-} -exec "$here/exec.sh" "$@"
rc=$?
echo "test-vm: $( [ $rc -eq 0 ] && echo PASS || echo FAIL ) in $(( $(date +%s) - start )) s ($arch guest; packages: $*)"
exit $rc
