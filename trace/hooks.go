package trace

import "strconv"

// The engine's batch hooks: tiny //go:noinline functions of package engine
// whose symbol names are a stable, documented interface (docs/tracing.md).
// Go has no USDT probes, so hcomm-trace attaches uprobes to these symbols and
// reads the arguments from registers at function entry. With Go's register
// ABI, integer arguments are passed one per register (amd64: RAX, RBX, RCX,
// RDI, RSI, R8, R9, R10, R11; arm64: R0-R15), so:
//
//	func hookSubmitBatch(count uint32, bytes uint64, path uint8)  // amd64 RAX, RBX, RCX; arm64 R0, R1, R2
//	func hookReapBatch(count uint32, bytes uint64, errors uint32) // amd64 RAX, RBX, RCX; arm64 R0, R1, R2
//
// count is the number of transfers in the batch, bytes their total length;
// path says how the batch is carried out (see EnginePath*); errors is how
// many of the reaped transfers failed. The engine calls each hook once per
// batch, never per transfer: a uprobe hit costs microseconds. Only entry
// uprobes are used: uretprobes corrupt Go programs whose stacks move.
const (
	HookSubmitBatch = "github.com/hcomm-go/hcomm/engine.hookSubmitBatch"
	HookReapBatch   = "github.com/hcomm-go/hcomm/engine.hookReapBatch"
)

// Engine paths, the path argument of hookSubmitBatch (engine.Path: the
// numbering is part of the contract). The engine may add paths; a number
// trace does not know is reported as "path(N)".
const (
	EnginePathDMA    = 0 // the device's DMA engine (doorbell write)
	EnginePathCPU    = 1 // the CPU, straight into device memory (BAR2)
	EnginePathFile   = 2 // a file or block device through io_uring
	EnginePathMemory = 3 // host-to-host copy
	EnginePathNVMe   = 4 // an NVMe queue pair driven from user space
	EnginePathRemote = 5 // another host (UCX)
)

// enginePathNames names the known engine paths, indexed by number.
var enginePathNames = [...]string{
	EnginePathDMA:    "dma",
	EnginePathCPU:    "cpu",
	EnginePathFile:   "file",
	EnginePathMemory: "memory",
	EnginePathNVMe:   "nvme",
	EnginePathRemote: "remote",
}

// EnginePathName names an engine path for reports: "dma", "cpu", "file",
// "memory", "nvme", "remote", or "path(N)" for a number it does not know.
func EnginePathName(p int) string {
	if p >= 0 && p < len(enginePathNames) && enginePathNames[p] != "" {
		return enginePathNames[p]
	}
	return "path(" + strconv.Itoa(p) + ")"
}

// Hooks names the symbols the engine uprobes attach to. Tests point them at
// their own hook functions (a test binary's main.hookSubmitBatch); the
// default is the engine's.
type Hooks struct {
	SubmitBatch string
	ReapBatch   string
}

// DefaultHooks are the engine's hook symbols.
var DefaultHooks = Hooks{SubmitBatch: HookSubmitBatch, ReapBatch: HookReapBatch}
