package bpf

// The objects are compiled from hcomm.bpf.c and the committed vmlinux.h with
// clang-14 (-mcpu=v3: atomic adds, bounded loops), once per architecture:
// bpf2go's amd64 and arm64 targets define __TARGET_ARCH_x86 and
// __TARGET_ARCH_arm64 and write hcomm_x86_bpfel.* and hcomm_arm64_bpfel.*,
// each built only for its GOARCH. `make
// generate` installs the toolchain and runs this; `make check-generate`
// rebuilds into a temporary directory and compares with the committed files
// (HCOMM_BPF_OUT redirects the output there).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -target amd64,arm64 -output-dir=$HCOMM_BPF_OUT -type event hcomm hcomm.bpf.c -- -I. -mcpu=v3 -Wall -Werror
