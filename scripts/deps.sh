#!/usr/bin/env bash
# deps.sh — the one list of Debian packages that building, testing,
# benchmarking and the demo need, and the check that they are installed.
#
#   scripts/deps.sh GROUP...     (groups: build generate vm python pybench test bench demo)
#
# The Makefile's targets call it first (make test, make bench, make demo,
# make generate, ...), and so does .ci/run. For each package of the groups
# named that is not installed:
#   - as root: apt-get update, then apt-get install -y of everything missing;
#   - as any other user: a required package stops the run at once, with the
#     exact apt-get install line to run as root (exit 2); an optional package
#     (its tests skip with the reason without it) is reported as a skip, and
#     the run goes on, unless HCOMM_REQUIRE_PRIVILEGED=1, which makes it
#     required too (nothing may skip then).
# Go itself (>= the version in go.mod) is not a Debian package here: it must
# be on PATH.
#
# HCOMM_DEPS_MISSING="pkg ..." treats those packages as not installed, so the
# behaviour on a fresh machine can be tried without removing packages that
# other programs on this one use (as root that means re-running apt-get
# install for them, which leaves an installed package as it is).
set -euo pipefail

# group     need      package          what needs it
# ("include" rows pull in another group.)
table() {
	cat <<'EOF'
build      required  make             the Makefile
build      required  git              go build's VCS stamp, make lint
build      required  gcc              cgo: capi/ (libhcomm.so) and backend/ucx
build      required  libc6-dev        cgo: the C library headers
build      required  libucx-dev       backend/ucx: ucp/api/ucp.h and libucp (go vet/build ./...)
generate   required  gcc              internal/cmd/godefs: go tool cgo -godefs
generate   required  linux-libc-dev   the kernel UAPI headers (godefs, eBPF syscall numbers)
generate   required  gcc-aarch64-linux-gnu       internal/cmd/godefs: the arm64 kernel ABI files
generate   required  linux-libc-dev-arm64-cross  arm64's asm/ headers (godefs; its syscall table's choices)
generate   required  clang-14         the eBPF programs' compiler
generate   required  llvm-14          llvm-strip-14 for the eBPF objects
generate   required  libbpf-dev       bpf_helpers.h
generate   required  bpftool          make bpf-vmlinux
vm         optional  qemu-system-x86  make test-vm: the QEMU guests
vm         optional  qemu-system-arm  make test-vm ARCH=arm64 (test-vm-arm64): the AArch64 guest
vm         optional  busybox-static   make test-vm: the guests' userland
vm         optional  cpio             make test-vm: the guests' initramfs
vm         optional  xz-utils         make test-vm: the guest kernel's modules
vm         optional  e2fsprogs        make test-vm's scratch disk; the ext4 tests of backend/uringfile and tests/soak
test       include   build
test       include   generate
test       include   vm
test       include   python
test       optional  valgrind         make capi-test: the memcheck run of the C example
test       optional  pkg-config       make capi-install-test: the pkg-config build
test       optional  binutils         make capi-install-test: nm -D of the exported symbols
test       optional  strace           cmd/hcomm-trace's test against strace
test       optional  dmsetup          tests/soak: the device-mapper I/O error test
test       optional  mount            the ext4 tests (mount, umount, losetup, fsfreeze)
python     required  python3-venv     make python-test: the venv the package is installed into
python     required  python3-pytest   make python-test
python     optional  python3-numpy    the Python package's numpy tests; make fuzz-python
python     optional  python3-torch    the Python package's torch tests
python     optional  python3-mypy     the Python package's type-checker test (its hints through py.typed)
pybench    required  python3-venv     make python-bench: the venv the package is installed into
pybench    required  python3-numpy    make python-bench: the DataLoader side reads with NumPy
pybench    required  python3-torch    make python-bench: torch's DataLoader, the loader's tensors
bench      include   build
bench      include   pybench
bench      optional  fio              hcomm-bench: the fio rows
bench      optional  ucx-utils        hcomm-bench: ucx_perftest, the remote rows' yardstick
bench      optional  strace           hcomm-bench: the system-call counts
bench      optional  liburing-dev     make bench-uring-nop: the C liburing side
bench      optional  valgrind         make bench-insn: instructions per transfer (callgrind)
EOF
}

[ $# -gt 0 ] || { echo "usage: scripts/deps.sh GROUP... (build generate vm python pybench test bench demo)" >&2; exit 64; }

# rows GROUP: the need/package/reason rows of GROUP, includes expanded.
rows() {
	local g=$1 group need pkg what
	while read -r group need pkg what; do
		[ "$group" = "$g" ] || continue
		if [ "$need" = include ]; then
			rows "$pkg"
		else
			printf '%s\t%s\t%s\n' "$need" "$pkg" "$what"
		fi
	done < <(table)
}

declare -A need_of what_of
order=()
for g in "$@"; do
	case $g in
	build | generate | vm | python | pybench | test | bench) ;;
	demo) continue ;; # the demo is pure Go: it needs only the Go toolchain
	*) echo "deps.sh: unknown group $g (build generate vm python pybench test bench demo)" >&2; exit 64 ;;
	esac
	while IFS=$'\t' read -r need pkg what; do
		if [ -z "${need_of[$pkg]:-}" ]; then
			order+=("$pkg")
			need_of[$pkg]=$need
			what_of[$pkg]=$what
		elif [ "$need" = required ]; then
			need_of[$pkg]=required
		fi
	done < <(rows "$g")
done

command -v go >/dev/null || {
	echo "deps.sh: go is not on PATH: install Go $(sed -n 's/^go //p' "$(dirname "$0")/../go.mod") or later (https://go.dev/dl/) and put its bin/ on PATH" >&2
	exit 2
}
[ ${#order[@]} -gt 0 ] || exit 0

# Installed packages, in one dpkg-query call (a fraction of a second).
declare -A installed
while read -r pkg state; do
	[ "$state" = installed ] && installed[$pkg]=1
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${order[@]}" 2>/dev/null || true)
for pkg in ${HCOMM_DEPS_MISSING:-}; do
	unset "installed[$pkg]"
done

missing=()
for pkg in "${order[@]}"; do
	[ -n "${installed[$pkg]:-}" ] || missing+=("$pkg")
done
[ ${#missing[@]} -gt 0 ] || exit 0

if [ "$(id -u)" -eq 0 ]; then
	echo "deps.sh: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt=(apt-get -o DPkg::Lock::Timeout=600 -qq)
	"${apt[@]}" update >&2
	"${apt[@]}" install -y "${missing[@]}" >&2
	exit 0
fi

stop=()
for pkg in "${missing[@]}"; do
	if [ "${need_of[$pkg]}" = required ] || [ "${HCOMM_REQUIRE_PRIVILEGED:-}" = 1 ]; then
		stop+=("$pkg")
	else
		echo "deps.sh: SKIP ${what_of[$pkg]}: $pkg is not installed (as root: apt-get install -y $pkg)" >&2
	fi
done
if [ ${#stop[@]} -gt 0 ]; then
	for pkg in "${stop[@]}"; do
		echo "deps.sh: missing Debian package $pkg (${what_of[$pkg]})" >&2
	done
	[ "${HCOMM_REQUIRE_PRIVILEGED:-}" = 1 ] && echo "deps.sh: HCOMM_REQUIRE_PRIVILEGED=1: optional packages are required too" >&2
	echo "deps.sh: run as root:  apt-get install -y ${stop[*]}" >&2
	exit 2
fi
