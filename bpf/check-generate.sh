#!/usr/bin/env bash
# Rebuilds the committed generated files of bpf/ and trace/ into a temporary
# directory and compares them byte for byte with the committed ones: the
# eBPF objects and their Go loaders for both architectures (amd64, arm64)
# and both system call tables. The build is reproducible: bpf2go maps the
# source directory out of the debug info, omits the compiler ident and
# strips DWARF, and the toolchain is pinned by Debian (clang-14,
# llvm-strip-14, libbpf-dev headers, linux-libc-dev and
# linux-libc-dev-arm64-cross for the tables), so the bytes are the same on
# every machine with those packages.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd bpf && HCOMM_BPF_OUT="$tmp" $GO generate ./)
for arch in amd64 arm64; do
	(cd trace && $GO run mksyscalls.go -arch $arch -o "$tmp/zsyscalls_$arch.go")
done

fail=0
for f in bpf/hcomm_x86_bpfel.go bpf/hcomm_x86_bpfel.o \
	bpf/hcomm_arm64_bpfel.go bpf/hcomm_arm64_bpfel.o \
	trace/zsyscalls_amd64.go trace/zsyscalls_arm64.go; do
	if ! cmp -s "$f" "$tmp/$(basename "$f")"; then
		echo "check-generate: $f differs from what its sources produce; run 'make generate' and commit" >&2
		fail=1
	fi
done
[ $fail -eq 0 ] && echo "check-generate: bpf/ and trace/ generated files (amd64, arm64) match their sources"
exit $fail
