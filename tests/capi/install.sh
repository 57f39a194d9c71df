#!/usr/bin/env bash
# The installed library as a user meets it (make capi-install-test, part of
# make capi-test):
#
#   tests/capi/install.sh OUTDIR     (OUTDIR: bin/capi, already built)
#
# 1. make install PREFIX=<temporary directory>: libhcomm.so.X.Y.Z with the
#    soname libhcomm.so.X and both symlinks, hcomm.h, hcomm.pc;
# 2. the seed example built with `pkg-config --cflags --libs hcomm` against
#    that prefix alone, and run; again with --libs --static (Libs.private:
#    the UCX libraries the remote target needs);
# 3. the library exports exactly the hcomm_* functions of hcomm.h
#    (nm -D --defined-only; the linker version script capi/hcomm.map), and
#    hcomm_version() equals the header's version;
# 4. make uninstall leaves no file behind.
set -euo pipefail
out=${1:?usage: install.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CC=${CC:-cc}
# A make of its own: not the calling make's flags (-n would install nothing).
MAKE=(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "${HCOMM_MAKE:-make}")
for tool in pkg-config nm; do
	if ! command -v "$tool" >/dev/null; then
		if [ "${HCOMM_REQUIRE_PRIVILEGED:-}" = 1 ]; then
			echo "FAIL: $tool not installed (HCOMM_REQUIRE_PRIVILEGED=1)"
			exit 1
		fi
		echo "SKIP: install test: $tool not installed (apt-get install pkg-config binutils)"
		exit 0
	fi
done
prefix=$(mktemp -d /tmp/hcomm-install.XXXXXX)
trap 'rm -rf "$prefix"' EXIT

echo "== make install PREFIX=$prefix"
"${MAKE[@]}" -s -C "$root" install PREFIX="$prefix" >/dev/null
ver=$(sed -n 's/^#define HCOMM_VERSION_STRING "\(.*\)"/\1/p' "$root/capi/hcomm.h")
major=${ver%%.*}
for f in "lib/libhcomm.so.$ver" "lib/libhcomm.so.$major" lib/libhcomm.so include/hcomm.h lib/pkgconfig/hcomm.pc; do
	[ -e "$prefix/$f" ] || { echo "FAIL: make install did not install $f"; exit 1; }
done
[ "$(readlink "$prefix/lib/libhcomm.so.$major")" = "libhcomm.so.$ver" ] || { echo "FAIL: libhcomm.so.$major does not point to libhcomm.so.$ver"; exit 1; }
soname=$(readelf -d "$prefix/lib/libhcomm.so.$ver" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p' || true)
if command -v readelf >/dev/null && [ "$soname" != "libhcomm.so.$major" ]; then
	echo "FAIL: soname is '$soname', want libhcomm.so.$major"
	exit 1
fi

echo "== pkg-config build of the seed example against the installed copy"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion hcomm)" = "$ver" ] || { echo "FAIL: pkg-config --modversion hcomm: $(pkg-config --modversion hcomm), want $ver"; exit 1; }
bin="$prefix/seed_example"
# shellcheck disable=SC2046 # pkg-config's output is meant to be split
"$CC" -Wall -Werror -O2 -o "$bin" "$here/seed_example.c" $(pkg-config --cflags --libs hcomm) -Wl,-rpath,"$(pkg-config --variable=libdir hcomm)"
# ldd's output is read whole before it is searched: `ldd | grep -q` under
# pipefail fails when grep exits at its first match and ldd, still
# writing, dies of SIGPIPE.
deps=$(ldd "$bin")
if grep -qF "$root/bin" <<<"$deps"; then
	echo "FAIL: the example links the build tree's library, not the installed one:"; echo "$deps"; exit 1
fi
grep -qF "libhcomm.so.$major => $prefix/lib/libhcomm.so.$major" <<<"$deps" || { echo "FAIL: not linked against $prefix/lib/libhcomm.so.$major:"; echo "$deps"; exit 1; }
HCOMM_LOG=off "$bin"
# The library's own dependencies (libucp, libucs: the remote target) come
# with it (DT_NEEDED) and are listed in Libs.private for a --static link
# line; both must link and run.
libdeps=$(ldd "$prefix/lib/libhcomm.so.$ver")
grep -qF 'libucp.so' <<<"$libdeps" || { echo "FAIL: libhcomm does not record libucp:"; echo "$libdeps"; exit 1; }
# shellcheck disable=SC2046
"$CC" -Wall -Werror -O2 -o "$prefix/seed_example_static" "$here/seed_example.c" $(pkg-config --cflags --libs --static hcomm) -Wl,-rpath,"$(pkg-config --variable=libdir hcomm)"
HCOMM_LOG=off "$prefix/seed_example_static" >/dev/null
echo "ok   pkg-config --libs and --libs --static ($(pkg-config --libs --static hcomm | sed "s|-L$prefix/lib ||"))"

echo "== exported symbols (nm -D --defined-only)"
syms=$(nm -D --defined-only "$prefix/lib/libhcomm.so.$ver" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort)
want=$(sed -n '/^static inline/d; s/^[a-z_ ]*[ *]\(hcomm_[a-z_]*\)(.*/\1/p' "$root/capi/hcomm.h" | sort -u) # inline functions are no symbols
if [ "$syms" != "$want" ]; then
	echo "FAIL: exported symbols differ from hcomm.h's functions"
	diff <(echo "$want") <(echo "$syms") || true
	exit 1
fi
echo "ok   $(echo "$syms" | wc -l) symbols, all hcomm_*: $(echo $syms)"

echo "== hcomm_version() and the header agree"
cat >"$prefix/ver.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "hcomm.h"
int main(void) {
	int a = -1, b = -1, c = -1;
	const char *v = hcomm_version(&a, &b, &c);
	if (strcmp(v, HCOMM_VERSION_STRING) != 0 || a != HCOMM_VERSION_MAJOR || b != HCOMM_VERSION_MINOR ||
	    c != HCOMM_VERSION_PATCH || HCOMM_VERSION_NUMBER != a * 10000 + b * 100 + c) {
		fprintf(stderr, "library %s (%d.%d.%d), header %s\n", v, a, b, c, HCOMM_VERSION_STRING);
		return 1;
	}
	printf("ok   libhcomm %s\n", v);
	return 0;
}
C
# shellcheck disable=SC2046
"$CC" -Wall -Werror -o "$prefix/ver" "$prefix/ver.c" $(pkg-config --cflags --libs hcomm) -Wl,-rpath,"$prefix/lib"
"$prefix/ver"

echo "== make uninstall"
"${MAKE[@]}" -s -C "$root" uninstall PREFIX="$prefix" >/dev/null
left=$(find "$prefix" \( -type f -o -type l \) ! -name 'seed_example' ! -name 'ver' ! -name 'ver.c' ! -name 'seed_example_static')
if [ -n "$left" ]; then
	echo "FAIL: make uninstall left: $left"
	exit 1
fi
echo "install test passed"
