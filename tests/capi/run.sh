#!/usr/bin/env bash
# C tests of libhcomm.so, run by `make capi-test` (part of `make test`).
#
#   tests/capi/run.sh OUTDIR
#
# OUTDIR holds libhcomm.so and hcomm.h (make capi) and, when built,
# valgrind/libhcomm.so (make capi-valgrind: -tags valgrind) and
# cgocheck2/libhcomm.so (make capi-cgocheck2: GOEXPERIMENT=cgocheck2).
# Every C file is compiled with cc -Wall -Werror against hcomm.h alone.
#
# Steps: the C test suite; the finalize-with-a-stalled-device test
# (HCOMM_MOCK_FAULT); the remote target between two processes
# (test_remote: UCX over tcp, then shared memory); the seed-style example; the test suite again against
# the cgocheck2 library (test_capi and test_remote tcp; the runtime then faults any Go pointer stored into
# C memory); the example, test_targets and test_remote (tcp) under valgrind memcheck, and a canary that must
# fail under the same suppressions (so they cannot hide a real C error).
# valgrind missing: skipped with the reason, or a failure when
# HCOMM_REQUIRE_PRIVILEGED=1 (CI installs it).
set -euo pipefail
out=${1:?usage: run.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
CC=${CC:-cc}
tb="$out/tests"
mkdir -p "$tb"
cflags=(-Wall -Werror -O2 -pthread -I "$out")

build() { # build NAME LIBDIR SRC...
	local name=$1 lib=$2
	shift 2
	"$CC" "${cflags[@]}" -o "$name" "$@" -L "$lib" -lhcomm -Wl,-rpath,"$(cd "$lib" && pwd)"
}
build "$tb/test_capi" "$out" "$here/test_capi.c"
build "$tb/seed_example" "$out" "$here/seed_example.c"
build "$tb/bench_submit" "$out" "$here/bench_submit.c"
build "$tb/test_remote" "$out" "$here/test_remote.c"
build "$tb/test_targets" "$out" "$here/test_targets.c"
"$CC" -Wall -Werror -O2 -o "$tb/no_uring" "$here/no_uring.c"

# hcomm.h alone under strict standards: C99 (the anonymous union of
# hcomm_config_t is marked __extension__ there), C11, C++11.
printf '#include <string.h>\n#include "hcomm.h"\nint main(void) { hcomm_config_t c; memset(&c, 0, sizeof c); c.flags = HCOMM_REMOTE_SHM; c.reserved = 0; return hcomm_remote_addr(0, 0) != 0 && c.flags; }\n' >"$tb/header_only.c"
for std in c99 c11; do "$CC" -std=$std -pedantic -Wall -Wextra -Werror -I "$out" -c -o /dev/null "$tb/header_only.c"; done
if command -v "${CXX:-c++}" >/dev/null; then
	cp "$tb/header_only.c" "$tb/header_only.cc"
	"${CXX:-c++}" -std=c++11 -pedantic -Wall -Wextra -Werror -I "$out" -c -o /dev/null "$tb/header_only.cc"
fi
start=$(date +%s)
echo "== fork before anything else: the child gets HCOMM_EFORK, never a hang"
HCOMM_LOG=off "$tb/test_capi" fork_noinit
echo "== C tests (test_capi)"
HCOMM_LOG=off "$tb/test_capi"
echo "== finalize with a stalled device (HCOMM_MOCK_FAULT=stall:1)"
HCOMM_LOG=off HCOMM_MOCK_FAULT=stall:1 "$tb/test_capi" finalize_canceled
echo "== unregister with a stalled transfer in flight (HCOMM_MOCK_FAULT=stall:1)"
HCOMM_LOG=off HCOMM_MOCK_FAULT=stall:1 "$tb/test_capi" register_busy
echo "== remote target across two processes (UCX_TLS=tcp; UCX_TLS=shm,tcp + HCOMM_REMOTE_SHM)"
HCOMM_LOG=off "$tb/test_remote" tcp
HCOMM_LOG=off "$tb/test_remote" shm
echo "== several targets on one handle, copies between them (test_targets)"
HCOMM_LOG=off "$tb/test_targets" files
HCOMM_LOG=off "$tb/test_targets" devices
echo "== seed example"
"$tb/seed_example"
CXX=${CXX:-c++}
if command -v "$CXX" >/dev/null; then
	echo "== C++ smoke test"
	"$CXX" -Wall -Werror -std=c++17 -O2 -I "$out" -o "$tb/cxx_smoke" "$here/cxx_smoke.cc" -L "$out" -lhcomm -Wl,-rpath,"$(cd "$out" && pwd)"
	"$tb/cxx_smoke"
else
	echo "SKIP: C++ smoke test: no C++ compiler ($CXX)"
fi

if [ -f "$out/cgocheck2/libhcomm.so" ]; then
	echo "== C tests against the cgocheck2 library (GODEBUG=cgocheck=1 + GOEXPERIMENT=cgocheck2)"
	build "$out/cgocheck2/test_capi" "$out/cgocheck2" "$here/test_capi.c"
	HCOMM_LOG=off GODEBUG=cgocheck=1 "$out/cgocheck2/test_capi"
	build "$out/cgocheck2/test_remote" "$out/cgocheck2" "$here/test_remote.c"
	HCOMM_LOG=off GODEBUG=cgocheck=1 "$out/cgocheck2/test_remote" tcp
fi

skip_or_fail() {
	if [ "${HCOMM_REQUIRE_PRIVILEGED:-}" = 1 ]; then
		echo "FAIL: $1 (HCOMM_REQUIRE_PRIVILEGED=1)"
		exit 1
	fi
	echo "SKIP: $1"
}
if ! command -v valgrind >/dev/null; then
	skip_or_fail "valgrind not installed (apt-get install valgrind): memcheck run of the seed example"
elif [ ! -f "$out/valgrind/libhcomm.so" ]; then
	skip_or_fail "$out/valgrind/libhcomm.so not built (make capi-valgrind)"
else
	vg=(valgrind --fair-sched=yes --suppressions="$here/valgrind.supp" --leak-check=full
		--show-leak-kinds=all --errors-for-leak-kinds=all --error-exitcode=9 -q)
	build "$out/valgrind/seed_example" "$out/valgrind" "$here/seed_example.c"
	build "$out/valgrind/canary" "$out/valgrind" "$here/valgrind_canary.c"
	build "$out/valgrind/test_targets" "$out/valgrind" "$here/test_targets.c"
	build "$out/valgrind/test_remote" "$out/valgrind" "$here/test_remote.c"
	# GODEBUG=asyncpreemptoff=1 and no_uring: see docs/capi.md (valgrind
	# and Go's signal-based preemption; valgrind 3.19 and io_uring_enter).
	# cpu.rdtscp=off: the runtime reads the TSC with RDTSCP when CPUID
	# offers it (runtime.cputicks, called when a runtime lock is contended,
	# so only under load); valgrind 3.19 passes the host's CPUID bit through
	# but cannot decode RDTSCP and raises SIGILL. With the feature off the
	# runtime uses LFENCE+RDTSC, which valgrind runs. Nothing memcheck
	# checks depends on which instruction reads the clock.
	vg_godebug=asyncpreemptoff=1,cpu.rdtscp=off
	echo "== seed example under valgrind memcheck"
	GODEBUG=$vg_godebug "$tb/no_uring" "${vg[@]}" "$out/valgrind/seed_example"
	echo "== several targets and a copy under valgrind memcheck (devices: no io_uring under valgrind)"
	GODEBUG=$vg_godebug HCOMM_LOG=off "$tb/no_uring" "${vg[@]}" "$out/valgrind/test_targets" devices
	echo "== the remote target, notifications included, under valgrind memcheck (UCX_TLS=tcp; its peers run natively)"
	GODEBUG=$vg_godebug HCOMM_LOG=off "$tb/no_uring" "${vg[@]}" "$out/valgrind/test_remote" tcp
	echo "== canary under valgrind memcheck: must be reported"
	set +e
	GODEBUG=$vg_godebug "$tb/no_uring" "${vg[@]}" "$out/valgrind/canary" >"$out/valgrind/canary.log" 2>&1
	rc=$?
	set -e
	if [ $rc -ne 9 ] || ! grep -q "definitely lost" "$out/valgrind/canary.log" || ! grep -q "Invalid read" "$out/valgrind/canary.log"; then
		cat "$out/valgrind/canary.log"
		echo "FAIL: valgrind did not report the canary's leak and invalid read (exit $rc)"
		exit 1
	fi
	echo "ok   canary: leak and invalid read reported (valgrind exit $rc)"
fi
echo "C tests passed in $(($(date +%s) - start)) s (library builds excluded)"
