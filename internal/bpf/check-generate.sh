#!/usr/bin/env bash
# Rebuilds the committed generated files of internal/bpf/ and trace/ into a temporary
# directory and compares them byte for byte with the committed ones. The
# build is reproducible: bpf2go maps the source directory out of the debug
# info, omits the compiler ident and strips DWARF, and the toolchain is
# pinned by Debian (clang-14, llvm-strip-14, libbpf-dev headers), so the
# bytes are the same on every machine with those packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd internal/bpf && HCOMM_BPF_OUT="$tmp" $GO generate ./)
(cd trace && $GO run mksyscalls.go -o "$tmp/zsyscalls_amd64.go")

fail=0
for f in internal/bpf/hcomm_x86_bpfel.go internal/bpf/hcomm_x86_bpfel.o trace/zsyscalls_amd64.go; do
	if ! cmp -s "$f" "$tmp/$(basename "$f")"; then
		echo "check-generate: $f differs from what its sources produce; run 'make generate' and commit" >&2
		fail=1
	fi
done
[ $fail -eq 0 ] && echo "check-generate: internal/bpf/ and trace/ generated files match their sources"
exit $fail
