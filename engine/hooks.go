package engine

// Observability hooks: a stable interface for hcomm-trace, which attaches
// uprobes to these symbols by name (Go has no USDT probes):
//
//	github.com/hcomm-go/hcomm/engine.hookSubmitBatch
//	github.com/hcomm-go/hcomm/engine.hookReapBatch
//
// They are called once per submitted batch and once per reaped batch, never
// per transfer (a uprobe hit costs ~9.5µs in the development VM). With Go's
// register ABI the arguments arrive in the first three integer argument
// registers: RAX, RBX and RCX on amd64, R0, R1 and R2 on arm64. Untraced,
// each costs one call of an empty function. Attach uprobes only, never
// uretprobes (they corrupt Go stacks). Changing a name, a parameter, its
// order or type, or the path numbering breaks hcomm-trace: see
// docs/engine.md.

// hookSubmitBatch reports a batch handed to the backend: count transfers,
// bytes in total, by path (0 DMA, 1 CPU, 2 file/io_uring, 3 memory, 4 NVMe, 5 remote).
//
//go:noinline
func hookSubmitBatch(count uint32, bytes uint64, path uint8) {
	_, _, _ = count, bytes, path
}

// hookReapBatch reports a batch of completions: count transfers, bytes
// moved, and how many of them failed.
//
//go:noinline
func hookReapBatch(count uint32, bytes uint64, errors uint32) {
	_, _, _ = count, bytes, errors
}
