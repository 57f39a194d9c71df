#!/usr/bin/env bash
# exec.sh — a `go test -exec` wrapper that runs one test binary in a QEMU guest
# with real VFIO (vIOMMU + QEMU's edu device), hugetlb, io_uring and BPF:
#
#   CGO_ENABLED=0 go test -exec "$PWD/tests/vm/exec.sh" ./vfio/...
#
# go test calls it as `exec.sh /path/pkg.test -test.flags...` in the package's
# directory. It boots one VM per test binary, runs the binary there with the
# same arguments (and the HCOMM_* environment, plus HCOMM_IN_VM=1), copies its
# output to stdout and exits with its exit status, so go test reports as usual.
# A static binary (CGO_ENABLED=0) needs nothing else; a dynamically linked
# one (cgo) brings the libraries ldd names (amd64 guest only).
#
# Environment: HCOMM_VM_TIMEOUT (seconds, default 540) bounds one VM;
# HCOMM_VM_SCRATCH (size of the sparse ext4 disk that is the guest's /tmp,
# default 16G; 0: none, /tmp is tmpfs); HCOMM_VM_NVME (size of the QEMU NVMe
# controller's namespace, a sparse raw image, default 1G; 0: no controller);
# HCOMM_VM_MEM (MiB, default 6144: the hugepage tests reserve a 1 GiB page
# at run time, which a 4 GiB guest cannot find contiguous; TCG only backs
# what the guest touches); HCOMM_VM_KEEP=1 keeps the work directory
# (console log) for inspection; HCOMM_VM_LOGLEVEL sets the guest console's
# loglevel (default 5; 8 shows info messages such as arm-smmu-v3's fault
# events, slowly: the emulated UART prints each line).
#
# The verdict comes from the guest's own "HCOMM-VM-VERDICT rc=N" line on its
# second serial port: QEMU exits 0 on a guest power-off whatever the tests
# did, so its exit code alone proves nothing. When that channel lost its last
# lines (a lost UART interrupt strands them), /init's mark of the test's exit
# status on the kernel console stands in for it, and exec.sh says so. No
# verdict at all (kernel panic, hang, setup failure) is a failure.
#
# A hang shows where it stands: a Go test binary's -test.timeout is kept
# under the VM's limit (its goroutines' stacks come out before the VM is
# killed); /init marks each stage on the kernel console; and at the VM
# timeout exec.sh reads the vCPUs' state from QEMU's monitor, then makes the
# guest's kernel panic (an NMI on x86, SysRq-c over the console on arm64),
# which prints every task's stack and every CPU's backtrace, before it kills
# QEMU (docs/vm-tests.md, "When a guest hangs").
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:?usage: exec.sh test-binary [args...]}"
shift

die() { echo "exec.sh: $*" >&2; exit 1; }

[ -x "$bin" ] || die "$bin is not executable"
# has_interp: does the ELF64 binary have a PT_INTERP program header (is it
# dynamically linked)? Reads the header table with od: no binutils needed.
has_interp() {
	local f="$1" phoff phentsize phnum i type
	u() { od -An -t "u$2" -j "$1" -N "$2" "$f" | tr -d ' '; }
	phoff=$(u 32 8) phentsize=$(u 54 2) phnum=$(u 56 2)
	for ((i = 0; i < phnum; i++)); do
		type=$(u $((phoff + i * phentsize)) 4)
		[ "$type" = 3 ] && return 0
	done
	return 1
}
dynamic=0
has_interp "$bin" && dynamic=1

# The guest's architecture is the binary's (ELF e_machine): 62 x86-64, 183
# AArch64.
case "$(od -An -t u2 -j 18 -N 2 "$bin" | tr -d ' ')" in
62) arch=amd64 ;;
183) arch=arm64 ;;
*) die "$bin: not an x86-64 or AArch64 ELF binary" ;;
esac
export HCOMM_VM_ARCH=$arch
if [ $dynamic = 1 ] && [ "$arch" != "$(dpkg --print-architecture)" ]; then
	die "$bin is dynamically linked; build it with CGO_ENABLED=0 (the $arch guest has no libc)"
fi

kdir="$("$here/prepare.sh")"
rc=$?
if [ $rc -eq 3 ]; then
	die "the VM harness cannot run on this host (see the message above)"
fi
[ $rc -eq 0 ] && [ -n "$kdir" ] || die "prepare.sh failed (exit $rc)"

work="$(mktemp -d "${TMPDIR:-/tmp}/hcomm-vm.XXXXXX")"
if [ "${HCOMM_VM_KEEP:-0}" != 1 ]; then
	trap 'rm -rf "$work"' EXIT
else
	echo "exec.sh: keeping $work" >&2
fi

# The per-test archive: /pkg/test, /pkg/args, /pkg/env and, when the package
# has one, its testdata/ under /pkg/wd (the working directory go test gives).
mkdir -p "$work/root/pkg/wd"
cp "$bin" "$work/root/pkg/test"
# A dynamically linked binary (a cgo package: backend/ucx) brings the
# shared libraries and the loader ldd names, at the same paths; the base
# initramfs has no libc of its own, only what its tools brought.
copy_libs() {
	ldd "$1" | grep -o '/[^ ]*' | while read -r lib; do
		mkdir -p "$work/root$(dirname "$lib")" && cp -L "$lib" "$work/root$lib"
	done
}
[ $dynamic = 1 ] && copy_libs "$bin"
[ -d testdata ] && cp -r testdata "$work/root/pkg/wd/"
# Helper programs the package's tests would build at run time (the guest
# has no toolchain): testdata/vm-helpers lists "NAME SOURCE [cgo]" lines, a Go
# package (built static, or with cgo) or a C file (cc -static); they go to /pkg/helpers,
# which HCOMM_TEST_HELPERS names in the guest (internal/testutil.Helper).
helpers_env=
if [ -f testdata/vm-helpers ]; then
	mkdir -p "$work/root/pkg/helpers"
	while read -r name src mode; do
		case "$name" in '' | '#'*) continue ;; esac
		out="$work/root/pkg/helpers/$name"
		if [ "${mode:-}" = cgo ]; then
			# A cgo program (a third field "cgo"): built for the host's
			# libc, it brings the libraries ldd names, as a cgo test
			# binary does.
			# A foreign guest (arm64 on an x86 host) gets no cgo helper:
			# there is no libucx of that architecture to link. The
			# tests that need one are left out there (args-arm64); any
			# other fails on the missing helper.
			if [ "$arch" != "$(dpkg --print-architecture)" ]; then
				echo "exec.sh: $src (testdata/vm-helpers): cgo helper not built for the $arch guest (no $arch libraries on this host)" >&2
				continue
			fi
			CGO_ENABLED=1 go build -o "$out" "$src" || die "go build $src (cgo, testdata/vm-helpers) failed"
			copy_libs "$out"
			continue
		fi
		case "$src" in
		*.c) ccs=cc
			if [ "$arch" = arm64 ]; then
				ccs=aarch64-linux-gnu-gcc
				command -v $ccs >/dev/null || die "$src (testdata/vm-helpers): no $ccs for the arm64 guest (apt-get install gcc-aarch64-linux-gnu)"
			fi
			$ccs -static -O2 -Wall -Werror -pthread -o "$out" "$src" ||
			die "cc -static $src (testdata/vm-helpers) failed" ;;
		*) CGO_ENABLED=0 GOARCH=$arch go build -o "$out" "$src" ||
			die "go build $src (testdata/vm-helpers) failed" ;;
		esac
	done <testdata/vm-helpers
	helpers_env=/pkg/helpers
fi
q() { printf "'%s' " "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
# Per-architecture test flags of a package (tests/vm/args-<arch>: "PACKAGE
# FLAGS...", PACKAGE relative to the module root): the subset that fits the
# arm64 guest's budget, or the tests it cannot run. They come after go
# test's own, so HCOMM_VM_GOFLAGS's -run still narrows the set; a -test.skip
# of the user's is overridden, and said so.
extra=()
if [ -f "$here/args-$arch" ]; then
	pkg=$(realpath --relative-to="$here/../.." "$PWD")
	while read -r name rest; do
		case "$name" in '' | '#'*) continue ;; esac
		[ "$name" = "$pkg" ] || continue
		read -ra extra <<<"${rest%%#*}"
	done <"$here/args-$arch"
	if [ ${#extra[@]} -gt 0 ]; then
		echo "exec.sh: $pkg in the $arch guest: ${extra[*]} (tests/vm/args-$arch)" >&2
	fi
fi
# A Go test binary's own timeout must end before the VM's: at its
# -test.timeout the binary panics with every goroutine's stack, which the
# VM's timeout (a kill) would never let it print. go test passes its
# -timeout (run.sh: 10m) as -test.timeout, longer than the VM's 540 s; a
# binary with -test.* flags whose timeout is longer than the VM's less a
# margin for the boot and the output (60 s, at most half the VM's) — or
# none — gets that instead (the last flag wins).
vm_timeout=${HCOMM_VM_TIMEOUT:-540}
# dur_s: a Go duration (10m0s, 1h2m3.5s, 90s, 0) in whole seconds.
dur_s() {
	awk -v d="$1" 'BEGIN {
		s = 0
		while (match(d, /^[0-9.]+(ns|us|ms|s|m|h)/)) {
			t = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
			match(t, /[a-z]+$/); u = substr(t, RSTART); v = substr(t, 1, RSTART - 1) + 0
			s += v * (u == "h" ? 3600 : u == "m" ? 60 : u == "s" ? 1 : u == "ms" ? 1e-3 : u == "us" ? 1e-6 : 1e-9)
		}
		printf "%d\n", (s > 0 && s < 1) ? 1 : s
	}'
}
test_timeout=() gotest=0 given= prev=
for a in "$@" "${extra[@]}"; do
	case $a in -test.* | --test.*) gotest=1 ;; esac
	case $a in -test.timeout=* | --test.timeout=*) given=${a#*=} ;; esac
	case $prev in -test.timeout | --test.timeout) given=$a ;; esac
	prev=$a
done
if [ $gotest = 1 ]; then
	margin=$((vm_timeout / 2 < 60 ? vm_timeout / 2 : 60))
	want=$((vm_timeout - margin))
	given_s=$(dur_s "${given:-0}")
	if [ "$given_s" -eq 0 ] || [ "$given_s" -gt "$want" ]; then
		test_timeout=("-test.timeout=${want}s")
		echo "exec.sh: -test.timeout=${want}s (given: ${given:-none}), ${margin}s under the VM's limit of ${vm_timeout}s, so that a hanging test prints its goroutines" >&2
	fi
fi
: >"$work/root/pkg/args"
for a in "$@" "${extra[@]}" "${test_timeout[@]}"; do q "$a" >>"$work/root/pkg/args"; done
: >"$work/root/pkg/env"
while IFS= read -r name; do
	printf 'export %s=%s\n' "$name" "$(q "${!name}")" >>"$work/root/pkg/env"
done < <(compgen -e | grep -E '^(HCOMM_|UCX_|GOTRACEBACK$|GODEBUG$|GOMAXPROCS$)' | grep -v '^HCOMM_IN_VM$\|^HCOMM_TEST_HELPERS$')
[ -z "$helpers_env" ] || echo "export HCOMM_TEST_HELPERS=$helpers_env" >>"$work/root/pkg/env"
(cd "$work/root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$work/pkg.cpio" ||
	die "cpio failed"
cat "$kdir/base.cpio" "$work/pkg.cpio" >"$work/initrd"

# The guest's /tmp: a sparse ext4 image on virtio-blk (lazy init: mkfs
# writes a few MB; the host file grows only with what the tests write).
# HCOMM_VM_SCRATCH=0: no disk, /tmp is tmpfs.
scratch=()
if [ "${HCOMM_VM_SCRATCH:-16G}" != 0 ]; then
	mkfs=$(PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.ext4) || die "mkfs.ext4 not found (e2fsprogs)"
	truncate -s "${HCOMM_VM_SCRATCH:-16G}" "$work/scratch.img" &&
		"$mkfs" -q -F -E lazy_itable_init=1,lazy_journal_init=1 "$work/scratch.img" ||
		die "cannot make the scratch disk"
	scratch=(-drive "file=$work/scratch.img,if=none,id=scratch,format=raw,cache=unsafe"
		-device virtio-blk-pci,drive=scratch)
fi

# HCOMM_VM_RDMA=1: a virtio-net device for soft-RoCE (rxe0 on eth0, set up
# by /init) on a user-mode netdev with restrict=on: QEMU passes nothing
# between the guest and the host or any network.
net=()
if [ "${HCOMM_VM_RDMA:-0}" = 1 ]; then
	[ "$arch" = amd64 ] || die "HCOMM_VM_RDMA=1: soft-RoCE is set up in the amd64 guest only"
	net=(-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0)
fi

# The NVMe controller's namespace: a sparse raw image per VM, so every test
# binary starts from zeros (HCOMM_VM_NVME sets its size, 0: no controller).
# cmb_size_mb gives it a Controller Memory Buffer (BAR2, NVMe 1.4 rules).
nvme=()
if [ "${HCOMM_VM_NVME:-1G}" != 0 ]; then
	truncate -s "${HCOMM_VM_NVME:-1G}" "$work/nvme.img" || die "cannot make the NVMe image"
	nvme=(-drive "file=$work/nvme.img,if=none,id=nvm,format=raw,cache=unsafe"
		-device nvme,serial=hcomm0,drive=nvm,cmb_size_mb=16)
fi

# clocksource=tsc tsc=reliable: without them the TCG guest's kernel does
# not trust the TSC and picks a clocksource the vDSO cannot read, so every
# clock_gettime (Go's time.Now) becomes a system call — 3 to 13 per I/O in
# make bench-vm, drowning what the paths under test make.
# The console shows what a hang needs: no `quiet` (it hides the stack of a
# soft lockup, printed below the "BUG:" line at the default level) but
# loglevel=5 (warnings and the default level, not the info messages: an
# SMMUv3 fault event is five info lines, at most 10 events per 5 s), a soft
# lockup panics at once (softlockup_panic=1, with every CPU's backtrace)
# instead of running into the VM timeout, and the panic prints every task's
# stack and every CPU's backtrace (panic_print=0x41); panic=-1 with
# -no-reboot then ends QEMU, and exec.sh shows the console.
# no_timer_check: the kernel checks at boot that the timer interrupt arrives
# through the IO-APIC within a few ticks; under TCG on a loaded host it may
# not, and with interrupt remapping on (the vIOMMU) the kernel then panics
# ("timer doesn't work through Interrupt-remapped IO-APIC") — seen here.
# arm64: the virt machine with an SMMUv3 in front of its PCIe bus (edu,
# NVMe, virtio) and GICv3 — with the default GICv2 VFIO_SET_IOMMU fails
# with EPERM (no interrupt remapping, which the GICv3 ITS gives); -cpu max
# with pauth-impdef=on, since emulating the architected pointer
# authentication makes every function return slow under TCG (a boot 18.8 s
# instead of 6.6 s); the test's channel is a virtio console (the machine has
# one UART, the kernel console).
# The TCG mode: HCOMM_VM_TCG_THREAD, else the package's testdata/vm-tcg-thread
# ("single" for the tracer's packages: under multi-threaded TCG a jump label
# the kernel patches in the system-call entry path while the other vCPU runs
# it locks the guest up, tests/vm/repro/jumplabel-tcg.c), else multi.
tcg_thread=${HCOMM_VM_TCG_THREAD:-}
[ -n "$tcg_thread" ] || [ ! -f testdata/vm-tcg-thread ] || tcg_thread=$(tr -d ' \n' <testdata/vm-tcg-thread)
tcg_thread=${tcg_thread:-multi}
case $tcg_thread in single | multi) ;; *) die "TCG thread mode '$tcg_thread': single or multi" ;; esac
# QEMU's human monitor on a pipe chardev: commands go in through a FIFO
# (mon.in, which exec.sh opens read-write, so a write never blocks), the
# answers go to a file (mon.out). Nothing is said to it unless the VM times
# out (hang_diag).
# The console: a file on x86; on arm64 a multiplexed pipe chardev (the same
# FIFO-and-file pair), whose escape Ctrl-A b sends a break to the UART —
# SysRq for the kernel, which takes the next character as the command.
timed_out=0
# An exec.sh that is stopped (go test's SIGQUIT at its own timeout, a ^C)
# takes its QEMU along: QEMU runs in the background here. QEMU removes its
# pid file when it ends.
trap '[ -s "$work/qemu.pid" ] && kill "$(cat "$work/qemu.pid")" 2>/dev/null; exit 130' INT TERM HUP QUIT
run_vm() {
	rm -f "$work/out.log" "$work/console.log" "$work/mon.in" "$work/mon.out" "$work/qemu.pid" "$work/con.in"
	mkfifo "$work/mon.in" && : >"$work/mon.out" || die "cannot make the monitor's FIFO"
	timed_out=0
	if [ ${#nvme[@]} -gt 0 ]; then
		rm -f "$work/nvme.img"
		truncate -s "${HCOMM_VM_NVME:-1G}" "$work/nvme.img" || die "cannot make the NVMe image"
	fi
	local -a machine
	case $arch in
	amd64)
		machine=(qemu-system-x86_64 -cpu max -machine q35
			-device intel-iommu,intremap=on,caching-mode=on
			-device edu
			-append "console=ttyS0 intel_iommu=on $cmdline no_timer_check clocksource=tsc tsc=reliable"
			-serial "file:$work/console.log" -serial "file:$work/out.log")
		;;
	arm64)
		machine=(qemu-system-aarch64 -machine virt,iommu=smmuv3,gic-version=3 -cpu max,pauth-impdef=on
			-device edu
			-device virtio-serial-pci -chardev "file,id=hcout,path=$work/out.log" -device virtconsole,chardev=hcout
			-append "console=ttyAMA0 $cmdline sysrq_always_enabled"
			-chardev "pipe,id=con,mux=on,path=$work/con" -serial chardev:con)
		mkfifo "$work/con.in" && : >"$work/console.log" && ln -sf console.log "$work/con.out" ||
			die "cannot make the console's FIFO"
		;;
	esac
	# In the background, in a subshell whose stderr is dropped (bash's
	# "Killed" notice when QEMU is killed; QEMU's own messages go to
	# qemu.log); the exit status is QEMU's, 128+N for a signal. The outer
	# timeout is a safety net for an exec.sh that is itself killed; the
	# VM's limit is kept by the loop below.
	(timeout --foreground -k 5 $((vm_timeout + 120)) \
		"${machine[@]}" \
		-accel "tcg,thread=$tcg_thread" -smp 2 -m "${HCOMM_VM_MEM:-6144}" \
		-nodefaults -display none -no-reboot \
		"${scratch[@]}" "${nvme[@]}" "${net[@]}" \
		-chardev "pipe,id=mon,path=$work/mon" -mon chardev=mon,mode=readline \
		-pidfile "$work/qemu.pid" \
		-kernel "$kdir/vmlinux" -initrd "$work/initrd" \
		</dev/null >"$work/qemu.log" 2>&1; exit $?) 2>/dev/null &
	local vm=$! start=$SECONDS
	while kill -0 $vm 2>/dev/null; do
		if [ $((SECONDS - start)) -ge "$vm_timeout" ]; then
			hang_diag $vm
			break
		fi
		sleep 1
	done
	wait $vm
	local rc=$?
	[ $timed_out = 1 ] && rc=124
	return $rc
}
# hang_diag VM: the VM ran into its limit. Ask the monitor where the vCPUs
# stand (info cpus, info registers -a: the state of a guest frozen solid),
# then make the guest's kernel panic: on x86 an NMI, which the kernel takes
# as unknown and panics on (unknown_nmi_panic=1), even with interrupts
# off; on arm64 (QEMU 7.2's virt machine has no NMI to inject) SysRq-c, a
# break and "c" on the console, which needs the UART's interrupt to be
# served. The panic prints every task's stack and every CPU's backtrace
# (panic_print=0x41, at any loglevel) and ends QEMU (panic=-1,
# -no-reboot); exec.sh gives it 30 s, then kills QEMU. A monitor that does
# not answer means QEMU itself is stuck: its threads' states (and stacks,
# with gdb) go to the log instead.
hang_diag() {
	local vm=$1 qpid i
	timed_out=1
	qpid=$(cat "$work/qemu.pid" 2>/dev/null)
	echo "exec.sh: the VM ran ${vm_timeout}s; asking QEMU's monitor for the vCPUs and making the guest panic with its stacks" >&2
	printf 'info cpus\ninfo registers -a\n' 1<>"$work/mon.in"
	case $arch in
	amd64) printf 'nmi\n' 1<>"$work/mon.in" ;;
	arm64) printf '\001b' 1<>"$work/con.in"; sleep 1; printf 'c' 1<>"$work/con.in" ;;
	esac
	for ((i = 0; i < 30; i++)); do
		kill -0 "$vm" 2>/dev/null || return
		sleep 1
	done
	if ! grep -aq 'CPU #0' "$work/mon.out" && [ -n "$qpid" ]; then
		{
			echo "exec.sh: QEMU's monitor did not answer in 30 s: QEMU itself is stuck; its threads (name, state, wait channel):"
			for t in /proc/"$qpid"/task/*; do
				echo "  $(cat "$t/comm" 2>/dev/null) $(awk '{print $3}' "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
			done
			command -v gdb >/dev/null &&
				timeout 60 gdb -p "$qpid" -batch -nx -ex 'thread apply all bt' 2>&1 | grep -v '^\[New LWP'
		} >>"$work/qemu.log"
	fi
	[ -n "$qpid" ] && kill "$qpid" 2>/dev/null
	for ((i = 0; i < 5; i++)); do
		kill -0 "$vm" 2>/dev/null || return
		sleep 1
	done
	[ -n "$qpid" ] && kill -9 "$qpid" 2>/dev/null
}
cmdline="loglevel=${HCOMM_VM_LOGLEVEL:-5} panic=-1 softlockup_panic=1 softlockup_all_cpu_backtrace=1 panic_print=0x41"
[ "$arch" = amd64 ] && cmdline="$cmdline unknown_nmi_panic=1"
# QEMU itself (7.2, TCG) has been seen to die of SIGSEGV mid-run (exit 139)
# on this host: that is the emulator, not the code under test. Only then —
# SIGSEGV or SIGABRT (139, 134), no verdict from the guest — the run is repeated once,
# from a fresh NVMe image, and says so. A timeout (124) is never retried.
run_vm
qrc=$?
if { [ $qrc -eq 139 ] || [ $qrc -eq 134 ]; } && ! grep -aq 'HCOMM-VM-VERDICT rc=' "$work/out.log" 2>/dev/null; then
	echo "exec.sh: qemu died of signal $((qrc - 128)) with no verdict from the guest; running the VM once more" >&2
	run_vm
	qrc=$?
fi

# The test output is between the BEGIN line and the END marker (which may
# follow output that did not end in a newline).
out="$work/out.log"
touch "$out"
# A virtio console (arm64) may add carriage returns: drop them.
if grep -aq $'\r' "$out"; then
	tr -d '\r' <"$out" >"$out.lf" && mv "$out.lf" "$out"
fi
awk '
	/^HCOMM-VM-BEGIN$/ && !begun { begun = 1; next }
	begun && !ended {
		i = index($0, "HCOMM-VM-END")
		if (i > 0) { ended = 1; if (i > 1) print substr($0, 1, i - 1); next }
		print
	}
' "$out"
verdict="$(grep -ao 'HCOMM-VM-VERDICT rc=[0-9]*$' "$out" | tail -n1 | sed 's/.*rc=//')"
setup="$(grep -a 'HCOMM-VM-SETUP-FAILED' "$out")"
# The test's channel is an interrupt-driven UART (x86's ttyS1) or virtio
# console (arm64): output that a lost interrupt strands in the guest's tty
# buffer never reaches the file — the kernel drops it when the last close
# has waited 30 s (closing_wait) — and with it, at the end, the verdict
# line. The kernel console is written by polling, interrupt or not, and
# /init marks the test's exit status there too: without a verdict line that
# mark is the verdict, and exec.sh says the channel lost output.
if [ -z "$verdict" ] && [ -z "$setup" ]; then
	cverdict="$(grep -ao 'hcomm-vm: the test exited with [0-9]*;' "$work/console.log" 2>/dev/null | tail -n1 | sed 's/.*with \([0-9]*\);/\1/')"
	if [ -n "$cverdict" ]; then
		{
			echo "exec.sh: the test's channel lost its last lines (no verdict line on it); the verdict is the kernel console's: the test exited with $cverdict"
			echo "--- guest console (last 10 lines):"; tail -n 10 "$work/console.log"
		} >&2
		verdict=$cverdict
	fi
fi
if [ -z "$verdict" ] || [ -n "$setup" ]; then
	{
		echo "exec.sh: no verdict from the guest (qemu exit $qrc${setup:+; $setup})"
		[ $qrc -eq 124 ] && echo "exec.sh: the VM ran longer than ${vm_timeout}s and was killed"
		echo "--- qemu:"; cat "$work/qemu.log"
		if [ $qrc -eq 124 ]; then
			# The monitor's answers without its prompt, its echo and the
			# vector and floating-point registers.
			echo "--- qemu monitor at the timeout (info cpus, info registers -a):"
			sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/\r//g' "$work/mon.out" |
				grep -avE '^\(qemu\)|^QEMU .* monitor|^ *([XY]MM|FPR|[QZP])[0-9]+(\[[0-9-]+\])?=|^ *\[[0-9-]+\]=|^ *FFR='
		fi
		# /init's progress lines: the last one names the stage a guest
		# that gives no verdict stopped in.
		echo "--- /init's progress (guest console):"
		grep -a 'hcomm-vm: ' "$work/console.log"
		# From the first sign of a kernel in trouble (the stacks) if there
		# is one, else the last 60 lines.
		first="$(grep -anm1 -E 'BUG:|Kernel panic|rcu: INFO|WARNING:|Oops|NMI received|sysrq: Trigger a crash' "$work/console.log" | cut -d: -f1)"
		if [ -n "$first" ]; then
			echo "--- guest console (from line $first):"; tail -n +"$first" "$work/console.log" | head -n 3000
		else
			echo "--- guest console (last 60 lines):"; tail -n 60 "$work/console.log"
		fi
		echo "--- guest output:"; cat "$out"
	} >&2
	exit 1
fi
if [ "$verdict" -ne 0 ] && [ "${HCOMM_VM_CONSOLE:-1}" = 1 ]; then
	{ echo "--- guest console (last 30 lines):"; tail -n 30 "$work/console.log"; } >&2
fi
exit "$verdict"
