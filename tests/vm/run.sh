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
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
[ $# -gt 0 ] || { echo "usage: run.sh packages..." >&2; exit 2; }

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
CGO_ENABLED=0 go test -count=1 -timeout 10m ${HCOMM_VM_GOFLAGS:-} -exec "$here/exec.sh" "$@"
rc=$?
echo "test-vm: $( [ $rc -eq 0 ] && echo PASS || echo FAIL ) in $(( $(date +%s) - start )) s (packages: $*)"
exit $rc
