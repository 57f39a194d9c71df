#!/usr/bin/env bash
# prepare.sh — make the VM test harness ready: host tools, guest kernel, base
# initramfs. Idempotent; a second run with everything cached takes well under a
# second. Prints the cache directory of the guest kernel on stdout.
#
# Exit codes: 0 ready; 3 a host tool is missing and cannot be installed here
# (not root): the caller skips or fails (HCOMM_REQUIRE_PRIVILEGED=1); other
# non-zero: a real error.
#
# What it does (the facts behind each step are in docs/vm-tests.md):
#   - host tools: qemu-system-x86_64, busybox (static), cpio, xz, mkfs.ext4;
#     installed with apt-get when missing and running as root.
#   - guest kernel: Debian's linux-image-amd64 resolved at run time to its
#     versioned package (linux-image-X.Y.Z-N-amd64) through its Depends,
#     fetched with `apt-get download` (never installed on the host); the
#     kernel image is decompressed to vmlinux (QEMU boots it through its PVH
#     entry, ~2.5 s faster under TCG than letting the bzImage decompress
#     itself), and the VFIO modules are extracted and decompressed (.ko.xz,
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

log() { echo "prepare: $*" >&2; }

# Serialise concurrent runs (go test runs several exec.sh at once).
exec 9>"$cache/.lock"
flock 9

# --- host tools -------------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
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
	apt-get install -y -qq "${need[@]}" >&2 || { apt-get update -qq >&2 && apt-get install -y -qq "${need[@]}" >&2; }
fi

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
	loop dm-mod"

# Resolve linux-image-amd64's candidate to its versioned package.
resolve() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1
}
kpkg="$(resolve || true)"
if [ -z "$kpkg" ] && [ "$(id -u)" -eq 0 ]; then
	apt-get update -qq >&2 || true
	kpkg="$(resolve || true)"
fi
if [ -z "$kpkg" ]; then
	if [ -L "$cache/current" ]; then
		log "cannot resolve linux-image-amd64 (no apt lists?); using the cached $(readlink "$cache/current")"
		kpkg="$(readlink "$cache/current")"
	else
		log "cannot resolve linux-image-amd64's versioned package (run apt-get update as root)"
		exit 3
	fi
fi
kdir="$cache/$kpkg"
# .ready holds the module list it was made with: a new list re-extracts.
if [ "$(cat "$kdir/.ready" 2>/dev/null)" != "$(echo $MODULES)" ]; then
	rm -rf "$kdir"
	mkdir -p "$kdir/debs" "$kdir/x" "$kdir/modules"
	log "downloading $kpkg"
	# Stale lists name a version the mirror no longer has: update once.
	(cd "$kdir/debs" && apt-get download "$kpkg" >&2) ||
		{ [ "$(id -u)" -eq 0 ] && apt-get update -qq >&2 && (cd "$kdir/debs" && apt-get download "$kpkg" >&2); } ||
		{ log "apt-get download $kpkg failed"; exit 1; }
	deb="$(ls "$kdir"/debs/*.deb | head -n1)"
	dpkg-deb --fsys-tarfile "$deb" |
		tar -x -C "$kdir/x" --wildcards './boot/vmlinuz-*' '*/drivers/vfio/*' '*/virt/lib/irqbypass.ko*' \
			'*/drivers/virtio/*' '*/drivers/block/virtio_blk.ko*' '*/fs/ext4/*' '*/fs/jbd2/*' \
			'*/fs/mbcache.ko*' '*/lib/crc16.ko*' '*/crypto/crc32c_generic.ko*' \
			'*/crypto/crct10dif_*.ko*' '*/lib/crc-t10dif.ko*' '*/lib/crc64*.ko*' \
			'*/crypto/crc64_rocksoft_generic.ko*' '*/block/t10-pi.ko*' '*/drivers/nvme/host/nvme*.ko*' \
			'*/drivers/block/loop.ko*' '*/drivers/md/dm-mod.ko*'
	vmlinuz="$(ls "$kdir"/x/boot/vmlinuz-* | head -n1)"
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
	extract '\xfd\x37\x7a\x58\x5a\x00' 'xz -dc' ||
		{ command -v zstd >/dev/null && extract '\x28\xb5\x2f\xfd' 'zstd -dc'; } ||
		extract '\x1f\x8b\x08' 'gzip -dc' || {
		log "cannot decompress $vmlinuz; booting the bzImage"
		cp "$vmlinuz" "$kdir/vmlinux"
	}
	for m in $MODULES; do
		f="$(find "$kdir/x" -name "$m.ko*" | head -n1)"
		[ -n "$f" ] || { log "module $m not in $kpkg"; exit 1; }
		case "$f" in
		*.ko.xz) xz -dc "$f" >"$kdir/modules/$m.ko" ;;
		*.ko.zst)
			command -v zstd >/dev/null || apt-get install -y -qq zstd >&2 || { log "zstd needed for $f"; exit 1; }
			zstd -qdc "$f" >"$kdir/modules/$m.ko"
			;;
		*.ko.gz) gzip -dc "$f" >"$kdir/modules/$m.ko" ;;
		*.ko) cp "$f" "$kdir/modules/$m.ko" ;;
		esac
	done
	rm -rf "$kdir/x" "$kdir/debs"
	echo $MODULES >"$kdir/.ready"
fi
ln -sfn "$kpkg" "$cache/current"
# Older guest kernels are not needed any more.
for old in "$cache"/linux-image-*; do
	[ "$old" = "$kdir" ] || rm -rf "$old"
done

# --- base initramfs -------------------------------------------------------------
# Rebuilt when /init or busybox changes (cheap: ~3 MB).
# Host tools the tests run, with the shared libraries and loader ldd names,
# copied to the same paths (the guest has no libc of its own): strace for
# the tracer's cross-checks (cmd/hcomm-trace compares with strace -c);
# util-linux losetup, dmsetup and mkfs.ext4 for the I/O error tests
# (tests/soak; busybox's losetup lacks --find --show). A tool the host lacks
# is left out: the tests that need it say so.
extras=()
for tool in strace losetup dmsetup mkfs.ext4; do
	t="$(PATH="$PATH:/usr/sbin:/sbin" command -v "$tool")" || continue
	extras+=("$t")
	while read -r lib; do extras+=("$lib"); done < <(ldd "$t" | grep -o '/[^ ]*')
done
mapfile -t extras < <(printf '%s\n' "${extras[@]}" | sort -u)
stamp="$(cat "$here/init" /bin/busybox "${extras[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$kdir/base-$stamp.cpio" ]; then
	root="$(mktemp -d)"
	trap 'rm -rf "$root"' EXIT
	mkdir -p "$root"/{bin,dev,proc,sys,tmp,root,pkg,lib/modules}
	cp /bin/busybox "$root/bin/busybox"
	cp "$kdir"/modules/*.ko "$root/lib/modules/"
	cp "$here/init" "$root/init"
	for f in "${extras[@]}"; do
		mkdir -p "$root$(dirname "$f")" && cp -L "$f" "$root$f"
	done
	chmod 755 "$root/init" "$root/bin/busybox"
	rm -f "$kdir"/base-*.cpio
	(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$kdir/base-$stamp.cpio.tmp"
	mv "$kdir/base-$stamp.cpio.tmp" "$kdir/base-$stamp.cpio"
fi
ln -sfn "base-$stamp.cpio" "$kdir/base.cpio"
echo "$kdir"
