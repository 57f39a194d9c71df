#!/bin/sh
# mkzuring.sh — regenerate zuring_linux_$GOARCH.go from linux/io_uring.h
# through `go tool cgo -godefs types_linux.go` (run by `go generate`, i.e.
# `make generate`). Needs gcc and the kernel UAPI headers (Debian:
# linux-libc-dev, installed here when missing and running as root).
set -eu
cd "$(dirname "$0")"
arch="$(go env GOARCH)"
if [ ! -f /usr/include/linux/io_uring.h ]; then
	if [ "$(id -u)" -eq 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-libc-dev >&2
	else
		echo "mkzuring.sh: /usr/include/linux/io_uring.h missing: install linux-libc-dev" >&2
		exit 1
	fi
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go tool cgo -objdir "$tmp" -godefs types_linux.go >"$tmp/z.go"
# The command line names a temporary directory: keep the header stable.
sed "2s|.*|// cgo -godefs types_linux.go (mkzuring.sh)|" "$tmp/z.go" | gofmt >"zuring_linux_$arch.go"
