package bpf

// The objects are compiled from hcomm.bpf.c and the committed vmlinux.h with
// clang-14 (-mcpu=v3: atomic adds, bounded loops) for x86-64 only. `make
// generate` installs the toolchain and runs this; `make check-generate`
// rebuilds into a temporary directory and compares with the committed files
// (HCOMM_BPF_OUT redirects the output there).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -target amd64 -output-dir=$HCOMM_BPF_OUT -type event Hcomm hcomm.bpf.c -- -I. -mcpu=v3 -Wall -Werror
