#!/usr/bin/env bash
# prepare.sh — make the VM test harness ready: host tools, guest kernel, base
# initramfs. Idempotent; a second run with everything cached takes well under a
# second. Prints the cache directory of the guest kernel on stdout.
#
# HCOMM_VM_ARCH picks the guest: amd64 (default; qemu-system-x86_64, q35 with
# a VT-d vIOMMU) or arm64 (qemu-system-aarch64, the virt machine with an
# SMMUv3). Each architecture has its own kernel and base initramfs in the
# cache.
#
# Exit codes: 0 ready; 3 a host tool is missing and cannot be installed here
# (not root): the caller skips or fails (HCOMM_REQUIRE_PRIVILEGED=1); other
# non-zero: a real error.
#
# What it does (the facts behind each step are in docs/vm-tests.md):
#   - host tools: qemu-system-x86_64, busybox (static), cpio, xz, mkfs.ext4;
#     installed with apt-get when missing and running as root.
#   - guest kernel: Debian's linux-image-ARCH resolved at run time to its
#     versioned package (linux-image-X.Y.Z-N-ARCH) through its Depends,
#     fetched with `apt-get download` (never installed on the host; for a
#     foreign architecture through apt lists of its own in the cache, so
#     that the host's apt and dpkg configuration stay as they are); the
#     amd64 kernel image is decompressed to vmlinux (QEMU boots it through its PVH
#     entry, ~2.5 s faster under TCG than letting the bzImage decompress
#     itself; arm64's vmlinuz is a raw Image already), and the VFIO modules are extracted and decompressed (.ko.xz,
#     .ko.zst) on the host, because the guest's busybox insmod cannot; the
#     virtio-blk and ext4 modules too, for the guest's /tmp, and the NVMe
#     ones (nvme, nvme-core, t10-pi and its CRCs) for the kernel cross-check.
#   - base initramfs (newc cpio): busybox, the modules, /init. The per-test
#     part (test binary, arguments, testdata) is a second cpio archive that
#     exec.sh appends; the kernel unpacks concatenated archives in order.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${HCOMM_VM_CACHE:-$here/cache}"
mkdir -p "$cache"
arch="${HCOMM_VM_ARCH:-amd64}"
case "$arch" in
amd64) qemu=qemu-system-x86_64 qemupkg=qemu-system-x86 ;;
arm64) qemu=qemu-system-aarch64 qemupkg=qemu-system-arm ;;
*) echo "prepare: HCOMM_VM_ARCH=$arch: want amd64 or arm64" >&2; exit 2 ;;
esac
hostarch="$(dpkg --print-architecture)"

log() { echo "prepare: $*" >&2; }

# Serialise concurrent runs (go test runs several exec.sh at once).
exec 9>"$cache/.lock"
flock 9

# --- host tools -------------------------------------------------------------
need=()
command -v "$qemu" >/dev/null || need+=("$qemupkg")
if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed"; then
	need+=(busybox-static)
fi
command -v cpio >/dev/null || need+=(cpio)
command -v xz >/dev/null || need+=(xz-utils)
PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		log "missing host packages: ${need[*]} (install them as root: apt-get install ${need[*]})"
		exit 3
	fi
	log "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Another apt-get (a parallel install) may hold dpkg's lock: wait for it.
	aptget() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
	aptget install -y -qq "${need[@]}" >&2 || { aptget update -qq >&2 && aptget install -y -qq "${need[@]}" >&2; }
fi

# --- apt for the guest's architecture ----------------------------------------
# The host's own lists for its architecture; for another one, lists of its
# own under the cache (APT::Architectures and Dir::State::Lists point apt
# there), filled by one `apt-get update` of the host's sources for that
# architecture: nothing of the host's apt or dpkg configuration changes (no
# dpkg --add-architecture), and nothing is installed.
gapt=()
if [ "$arch" != "$hostarch" ]; then
	mkdir -p "$cache/apt-$arch/lists/partial" "$cache/apt-$arch/cache/archives/partial"
	gapt=(-o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
		-o "Dir::State::Lists=$cache/apt-$arch/lists" -o "Dir::Cache=$cache/apt-$arch/cache")
fi
gapt_update() {
	if [ ${#gapt[@]} -gt 0 ]; then
		log "apt-get update of the $arch lists (in $cache/apt-$arch)"
		apt-get "${gapt[@]}" update -qq >&2
	elif [ "$(id -u)" -eq 0 ]; then
		apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
	else
		return 1
	fi
}
# gapt_download dir pkg: fetch pkg's .deb for the guest's architecture.
gapt_download() {
	(cd "$1" && apt-get "${gapt[@]}" download "$2" >&2 2> >(grep -v 'unsandboxed as root' >&2)) ||
		{ gapt_update && (cd "$1" && apt-get "${gapt[@]}" download "$2" >&2 2> >(grep -v 'unsandboxed as root' >&2)); }
}

# --- guest kernel -------------------------------------------------------------
# The modules /init loads, in dependency order (modules.dep is not used):
# VFIO, then virtio-blk and ext4 for the scratch disk that becomes /tmp,
# then the kernel's NVMe driver (nvme-core needs t10-pi and its CRCs) for
# the vfio/nvme tests' cross-check against the kernel.
MODULES="irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci
	virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk
	crc16 mbcache crc32c_generic jbd2 ext4
	crct10dif_common crct10dif_generic crc-t10dif crc64 crc64_rocksoft_generic crc64-rocksoft t10-pi
	nvme-core nvme
	loop dax dm-mod"
# arm64's virt machine has one UART (the kernel console): the test output
# goes to a virtio console (/dev/hvc0). Modules the kernel has built in
# (modules.builtin: virtio, virtio_ring, irqbypass on arm64) are skipped.
[ "$arch" = arm64 ] && MODULES="$MODULES virtio_console"
# Soft-RoCE for backend/ucx over RDMA verbs (loaded by /init only when
# HCOMM_VM_RDMA=1): the virtio-net device exec.sh then adds, the verbs core,
# rxe (it needs the "crc32" algorithm, crc32_generic) and rdma_cm.
RDMA_MODULES="failover net_failover virtio_net ib_core ib_uverbs udp_tunnel ip6_udp_tunnel
	crc32_generic rdma_rxe ib_cm iw_cm configfs rdma_cm rdma_ucm"

# Resolve linux-image-amd64's candidate to its versioned package.
resolve() {
	apt-cache "${gapt[@]}" depends "linux-image-$arch" 2>/dev/null |
		sed -n "s/^ *Depends: \(linux-image-[0-9][^ ]*-$arch\)\$/\1/p" | head -n1
}
kpkg="$(resolve || true)"
if [ -z "$kpkg" ] && [ ! -L "$cache/current-$arch" ]; then
	gapt_update || true
	kpkg="$(resolve || true)"
fi
if [ -z "$kpkg" ]; then
	if [ -L "$cache/current-$arch" ]; then
		log "cannot resolve linux-image-$arch (no apt lists?); using the cached $(readlink "$cache/current-$arch")"
		kpkg="$(readlink "$cache/current-$arch")"
	else
		log "cannot resolve linux-image-$arch's versioned package (run apt-get update as root)"
		exit 3
	fi
fi
kdir="$cache/$kpkg"
# .ready holds the module list it was made with: a new list re-extracts.
if [ "$(cat "$kdir/.ready" 2>/dev/null)" != "$(echo v3 $MODULES $RDMA_MODULES)" ]; then
	rm -rf "$kdir"
	mkdir -p "$kdir/debs" "$kdir/x" "$kdir/modules"
	log "downloading $kpkg"
	# Stale lists name a version the mirror no longer has: update once.
	gapt_download "$kdir/debs" "$kpkg" || { log "apt-get download $kpkg failed"; exit 1; }
	deb="$(ls "$kdir"/debs/*.deb | head -n1)"
	dpkg-deb --fsys-tarfile "$deb" |
		tar -x -C "$kdir/x" --wildcards './boot/vmlinuz-*' '*/modules.builtin' '*/drivers/vfio/*' '*/virt/lib/irqbypass.ko*' \
			'*/drivers/virtio/*' '*/drivers/block/virtio_blk.ko*' '*/fs/ext4/*' '*/fs/jbd2/*' \
			'*/fs/mbcache.ko*' '*/lib/crc16.ko*' '*/crypto/crc32c_generic.ko*' \
			'*/crypto/crct10dif_*.ko*' '*/lib/crc-t10dif.ko*' '*/lib/crc64*.ko*' \
			'*/crypto/crc64_rocksoft_generic.ko*' '*/block/t10-pi.ko*' '*/drivers/nvme/host/nvme*.ko*' \
			'*/drivers/block/loop.ko*' '*/drivers/md/dm-mod.ko*' '*/drivers/dax/dax.ko*' '*/drivers/char/virtio_console.ko*' \
			'*/drivers/net/virtio_net.ko*' '*/drivers/net/net_failover.ko*' '*/net/core/failover.ko*' \
			'*/drivers/infiniband/*' '*/net/ipv4/udp_tunnel.ko*' '*/net/ipv6/ip6_udp_tunnel.ko*' \
			'*/crypto/crc32_generic.ko*' '*/fs/configfs/*' \
			2> >(grep -v 'Not found in archive\|Exiting with failure status' >&2) || true
	# (A pattern with no file — a module built in — is no error: each module
	# is looked for below, in the archive or in modules.builtin.)
	vmlinuz="$(ls "$kdir"/x/boot/vmlinuz-* | head -n1)"
	[ -f "$vmlinuz" ] || { log "no vmlinuz in $deb"; exit 1; }
	# Decompress the bzImage payload: find the compressor's magic and feed
	# the rest of the file to it (trailing bytes make it complain; the
	# output is checked as an ELF below).
	extract() { # magic-regex decompress-cmd
		local off
		for off in $(LC_ALL=C grep -obUaP "$1" "$vmlinuz" | cut -d: -f1); do
			tail -c +"$((off + 1))" "$vmlinuz" | $2 >"$kdir/vmlinux" 2>/dev/null || true
			if [ "$(head -c 4 "$kdir/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
				return 0
			fi
		done
		return 1
	}
	if [ "$arch" = arm64 ]; then
		# A raw arm64 Image ("ARM\x64" at offset 56): QEMU boots it as it is.
		cp "$vmlinuz" "$kdir/vmlinux"
	elif extract '\xfd\x37\x7a\x58\x5a\x00' 'xz -dc' ||
		{ command -v zstd >/dev/null && extract '\x28\xb5\x2f\xfd' 'zstd -dc'; } ||
		extract '\x1f\x8b\x08' 'gzip -dc'; then
		:
	else
		log "cannot decompress $vmlinuz; booting the bzImage"
		cp "$vmlinuz" "$kdir/vmlinux"
	fi
	builtin="$(find "$kdir/x" -name modules.builtin | head -n1)"
	: >"$kdir/modules/order"
	: >"$kdir/modules/order-rdma"
	for m in $MODULES $RDMA_MODULES; do
		f="$(find "$kdir/x" -name "$m.ko*" | head -n1)"
		if [ -z "$f" ] && [ -n "$builtin" ] && grep -q "/$m\.ko\$" "$builtin"; then
			continue # built into the kernel
		fi
		[ -n "$f" ] || { log "module $m not in $kpkg"; exit 1; }
		case " $(echo $RDMA_MODULES) " in
		*" $m "*) echo "$m" >>"$kdir/modules/order-rdma" ;;
		*) echo "$m" >>"$kdir/modules/order" ;;
		esac
		case "$f" in
		*.ko.xz) xz -dc "$f" >"$kdir/modules/$m.ko" ;;
		*.ko.zst)
			command -v zstd >/dev/null || apt-get -o DPkg::Lock::Timeout=600 install -y -qq zstd >&2 || { log "zstd needed for $f"; exit 1; }
			zstd -qdc "$f" >"$kdir/modules/$m.ko"
			;;
		*.ko.gz) gzip -dc "$f" >"$kdir/modules/$m.ko" ;;
		*.ko) cp "$f" "$kdir/modules/$m.ko" ;;
		esac
	done
	rm -rf "$kdir/x" "$kdir/debs"
	echo v3 $MODULES $RDMA_MODULES >"$kdir/.ready"
fi
ln -sfn "$kpkg" "$cache/current-$arch"
# Older guest kernels of this architecture are not needed any more.
for old in "$cache"/linux-image-*-"$arch"; do
	[ "$old" = "$kdir" ] || rm -rf "$old"
done

# --- base initramfs -------------------------------------------------------------
# Rebuilt when /init, busybox, the modules or the tools change (cheap: ~3 MB).
# Host tools the tests run, with the shared libraries and loader ldd names,
# copied to the same paths (the guest has no libc of its own): strace for
# the tracer's cross-checks (cmd/hcomm-trace compares with strace -c);
# util-linux losetup, dmsetup and mkfs.ext4 for the I/O error tests
# (tests/soak; busybox's losetup lacks --find --show). A tool the host lacks
# is left out: the tests that need it say so.
# For another architecture the host's tools do not run in the guest: its
# busybox comes from Debian's busybox-static for that architecture, and the
# other tools are left out.
# For soft-RoCE: iproute2's rdma, UCX's ucx_info and ucx_perftest, UCX's
# transport plugins (dlopened: ldd of the tools does not name them) and the
# rxe provider of libibverbs with its driver file.
busybox=/bin/busybox
# iproute2's ip for network namespaces (busybox's has none). UCX's rdmacm
# plugin (with librdmacm) is what connects a listener's endpoints over rxe:
# UCX 1.13 confines an endpoint's lanes to the device its connection manager
# resolved the peer's address on — rxe0:1 for rdmacm, the netdev (eth0, lo)
# for tcp's, which has no verbs transport.
tools=(strace losetup dmsetup mkfs.ext4 ip rdma ucx_info ucx_perftest)
multiarch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
dlopened=()
for f in /usr/lib/"$multiarch"/ucx/lib*.so.0 /usr/lib/"$multiarch"/libibverbs/librxe-rdmav*.so; do
	dlopened+=("$f")
done
if [ "$arch" != "$hostarch" ]; then
	tools=() dlopened=()
	busybox="$cache/busybox-$arch"
	if [ ! -x "$busybox" ]; then
		bb="$(mktemp -d)"
		gapt_download "$bb" "busybox-static:$arch" || { log "apt-get download busybox-static:$arch failed"; exit 1; }
		dpkg-deb --fsys-tarfile "$bb"/busybox-static_*.deb | tar -xO ./bin/busybox >"$busybox.tmp" &&
			chmod 755 "$busybox.tmp" && mv "$busybox.tmp" "$busybox"
		rm -rf "$bb"
		[ -x "$busybox" ] || { log "no busybox in busybox-static:$arch"; exit 1; }
	fi
	# The same tools from Debian's packages for that architecture (never
	# installed: unpacked under the cache), each with the libraries its ELF
	# NEEDED entries name, found in the unpacked tree, and its loader.
	troot="$cache/tools-$arch/root"
	tpkgs="strace mount dmsetup e2fsprogs libc6 libblkid1 libmount1 libselinux1 libsmartcols1
		libpcre2-8-0 libdevmapper1.02.1 libudev1 libuuid1 libcom-err2 libext2fs2 libss2"
	if [ "$(cat "$cache/tools-$arch/.ready" 2>/dev/null)" != "$(echo $tpkgs)" ]; then
		rm -rf "$cache/tools-$arch"
		mkdir -p "$cache/tools-$arch/debs" "$troot"
		for p in $tpkgs; do
			gapt_download "$cache/tools-$arch/debs" "$p:$arch" || { log "apt-get download $p:$arch failed"; exit 1; }
		done
		for d in "$cache/tools-$arch"/debs/*.deb; do dpkg-deb -x "$d" "$troot"; done
		rm -rf "$cache/tools-$arch/debs"
		echo $tpkgs >"$cache/tools-$arch/.ready"
	fi
fi
# foreign: "path-in-troot" entries for the guest (same path there, /sbin
# tools under /usr/sbin, the guest's PATH).
foreign=()
if [ -n "${troot:-}" ]; then
	needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
	for tool in usr/bin/strace sbin/losetup sbin/dmsetup sbin/mkfs.ext4; do
		[ -e "$troot/$tool" ] || { log "no $tool in the $arch tool packages"; continue; }
		want=("$tool") seen=() ok=1
		interp="$(readelf -l "$troot/$tool" 2>/dev/null | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')"
		[ -n "$interp" ] && want+=("${interp#/}")
		while [ ${#want[@]} -gt 0 ]; do
			f="${want[0]}" want=("${want[@]:1}")
			case " ${seen[*]} " in *" $f "*) continue ;; esac
			seen+=("$f")
			for lib in $(needed "$troot/$f"); do
				l="$(cd "$troot" && ls -d lib/*/"$lib" usr/lib/*/"$lib" lib/"$lib" 2>/dev/null | head -n1 || true)"
				[ -n "$l" ] || { log "$tool: $lib not in the $arch tool packages; left out"; ok=0; }
				[ -n "$l" ] && want+=("$l")
			done
		done
		[ $ok = 1 ] && foreign+=("${seen[@]}")
	done
	[ ${#foreign[@]} -eq 0 ] || mapfile -t foreign < <(printf '%s\n' "${foreign[@]}" | sort -u)
fi
extras=()
files=()
for tool in "${tools[@]}"; do
	t="$(PATH="$PATH:/usr/sbin:/sbin" command -v "$tool")" || continue
	files+=("$t")
done
for f in "${dlopened[@]}"; do
	[ -e "$f" ] && files+=("$f")
done
for t in "${files[@]}"; do
	extras+=("$t")
	while read -r lib; do extras+=("$lib"); done < <(ldd "$t" | grep -o '/[^ ]*')
done
[ ${#dlopened[@]} -gt 0 ] && [ -f /etc/libibverbs.d/rxe.driver ] && extras+=(/etc/libibverbs.d/rxe.driver)
[ ${#extras[@]} -eq 0 ] || mapfile -t extras < <(printf '%s\n' "${extras[@]}" | sort -u)
stamp="$(cat "$here/init" "$busybox" "$kdir/modules/order" "$kdir/modules/order-rdma" "${extras[@]}" \
	"${foreign[@]/#/${troot:-}/}" | sha256sum | cut -c1-16)"
if [ ! -f "$kdir/base-$stamp.cpio" ]; then
	root="$(mktemp -d)"
	trap 'rm -rf "$root"' EXIT
	mkdir -p "$root"/{bin,dev,proc,sys,tmp,root,pkg,lib/modules}
	cp "$busybox" "$root/bin/busybox"
	cp "$kdir"/modules/*.ko "$kdir/modules/order" "$kdir/modules/order-rdma" "$root/lib/modules/"
	cp "$here/init" "$root/init"
	for f in "${extras[@]}"; do
		mkdir -p "$root$(dirname "$f")" && cp -L "$f" "$root$f"
	done
	for f in "${foreign[@]}"; do
		d="/$f"
		case "$f" in sbin/*) d="/usr/$f" ;; esac
		mkdir -p "$root$(dirname "$d")" && cp -L "$troot/$f" "$root$d"
	done
	chmod 755 "$root/init" "$root/bin/busybox"
	rm -f "$kdir"/base-*.cpio
	(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$kdir/base-$stamp.cpio.tmp"
	mv "$kdir/base-$stamp.cpio.tmp" "$kdir/base-$stamp.cpio"
fi
ln -sfn "base-$stamp.cpio" "$kdir/base.cpio"
echo "$kdir"
