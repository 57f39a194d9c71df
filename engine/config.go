package engine

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio"
)

// Target is where an engine moves data to and from host memory.
type Target int

const (
	// TargetDevice: an HDMA device over vfio (Config.Device; by default a
	// vfio-mock device the engine creates). Host↔device and device↔device.
	TargetDevice Target = iota
	// TargetFile: a file through io_uring (Config.File). Host↔file.
	TargetFile
	// TargetMemory: host→host copies, the bandwidth ceiling.
	TargetMemory
)

func (t Target) String() string {
	switch t {
	case TargetDevice:
		return "device"
	case TargetFile:
		return "file"
	case TargetMemory:
		return "memory"
	}
	return fmt.Sprintf("Target(%d)", int(t))
}

// Mode is how completions are driven.
type Mode int

const (
	// ModeReaper starts one background reaper goroutine that reaps
	// completions and runs callbacks. It spins for Config.Spin after its
	// last completion, then sleeps in io_uring on the device's interrupt
	// eventfd (or the file ring) and a wake-up eventfd.
	ModeReaper Mode = iota
	// ModePoll starts no goroutine: the application calls Poll, which
	// reaps and runs callbacks on the caller (DPDK/SPDK style). Wait,
	// Drain, blocking submission and Close call Poll themselves.
	ModePoll
)

func (m Mode) String() string {
	switch m {
	case ModeReaper:
		return "reaper"
	case ModePoll:
		return "poll"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults and limits of Config.
const (
	DefaultPoolSize   = 256 << 20
	DefaultQueueDepth = 64
	DefaultAlignment  = 64
	DefaultTimeout    = 2 * time.Second
	DefaultSpin       = 50 * time.Microsecond

	MinPoolSize   = 64 << 10
	MaxPoolSize   = 1 << 40
	MaxQueueDepth = 1 << 15
	MaxAlignment  = 2 << 20
	MaxCPUThresh  = 1 << 20
)

// Config configures an engine. The zero value is a device engine over a
// vfio-mock device with the seed's parameters: a 256 MiB pool, queue depth
// 64, 64-byte alignment, a background reaper.
type Config struct {
	// PoolSize is the size of the host memory pool in bytes (default
	// 256 MiB; MinPoolSize..MaxPoolSize). It is mapped once at Open and, for
	// the device target, DMA-mapped into the device once; it never grows.
	// Device targets carve their descriptor rings from it (a few KiB).
	PoolSize int64
	// QueueDepth is the most transfers in flight at once (default 64; a
	// power of two in 1..MaxQueueDepth). A full queue is ErrQueueFull, or a
	// wait with the Context submission calls.
	QueueDepth int
	// Alignment of every block's address and length (default 64; a power
	// of two in 8..MaxAlignment). Use 4096 for an O_DIRECT file target.
	Alignment int
	// Backings is the hugepage backing preference for the pool (default
	// hugepage.DefaultBackings: hugetlb 2 MiB, THP, 4 KiB).
	Backings []hugepage.Backing
	// Populate prefaults the pool; Lock mlocks it.
	Populate, Lock bool

	// Target selects where transfers go (default TargetDevice).
	Target Target
	// Device is the HDMA device for TargetDevice; nil creates a vfio-mock
	// device that the engine owns and closes. A caller's device stays open.
	Device vfio.Device
	// DeviceQueue is the HDMA queue index the engine uses (default 0).
	DeviceQueue int
	// CPUThreshold: host↔device transfers of at most this many bytes are
	// copied by the CPU straight into/out of device memory (BAR2) instead
	// of going to the DMA engine. 0 measures it at Open; -1 disables the
	// CPU path; otherwise 1..MaxCPUThresh.
	CPUThreshold int
	// Timeout is how long a device transfer may stay outstanding before
	// the device counts as stalled (default 2s; 1ms..1h).
	Timeout time.Duration

	// File is the file of TargetFile (the caller keeps ownership). Opened
	// with O_DIRECT, transfers must be 4096-byte aligned (ErrAlignment).
	File *os.File

	// Mode selects the background reaper (default) or poll mode.
	Mode Mode
	// Spin is how long the reaper keeps polling after its last completion
	// before it sleeps (default 50µs; negative: never spin, 0..1s).
	Spin time.Duration

	// Logger receives rare events (fallbacks, device recovery); default
	// slog.Default().
	Logger *slog.Logger
}

// withDefaults validates cfg and fills in defaults. Every error names the
// field and its allowed range, and wraps ErrBadConfig.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("engine: "+format+": %w", append(args, ErrBadConfig)...)
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = DefaultPoolSize
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.Alignment == 0 {
		cfg.Alignment = DefaultAlignment
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Spin == 0 {
		cfg.Spin = DefaultSpin
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.PoolSize < MinPoolSize || cfg.PoolSize > MaxPoolSize:
		return bad("PoolSize %d: want %d..%d bytes (0 = %d)", cfg.PoolSize, MinPoolSize, int64(MaxPoolSize), DefaultPoolSize)
	case cfg.QueueDepth < 1 || cfg.QueueDepth > MaxQueueDepth || cfg.QueueDepth&(cfg.QueueDepth-1) != 0:
		return bad("QueueDepth %d: want a power of two in 1..%d (0 = %d)", cfg.QueueDepth, MaxQueueDepth, DefaultQueueDepth)
	case cfg.Alignment < 8 || cfg.Alignment > MaxAlignment || cfg.Alignment&(cfg.Alignment-1) != 0:
		return bad("Alignment %d: want a power of two in 8..%d (0 = %d)", cfg.Alignment, MaxAlignment, DefaultAlignment)
	case cfg.Target < TargetDevice || cfg.Target > TargetMemory:
		return bad("Target %v: want TargetDevice, TargetFile or TargetMemory", cfg.Target)
	case cfg.DeviceQueue < 0:
		return bad("DeviceQueue %d: want 0..(device queues-1)", cfg.DeviceQueue)
	case cfg.CPUThreshold < -1 || cfg.CPUThreshold > MaxCPUThresh:
		return bad("CPUThreshold %d: want -1 (off), 0 (measure) or 1..%d bytes", cfg.CPUThreshold, MaxCPUThresh)
	case cfg.Timeout < time.Millisecond || cfg.Timeout > time.Hour:
		return bad("Timeout %v: want 1ms..1h (0 = %v)", cfg.Timeout, DefaultTimeout)
	case cfg.Mode != ModeReaper && cfg.Mode != ModePoll:
		return bad("Mode %v: want ModeReaper or ModePoll", cfg.Mode)
	case cfg.Spin > time.Second:
		return bad("Spin %v: want 0..1s, or negative for no spinning (0 = %v)", cfg.Spin, DefaultSpin)
	}
	for i, b := range cfg.Backings {
		if b < hugepage.Backing4K || b > hugepage.BackingMemfd1G {
			return bad("Backings[%d] %v: want a hugepage.Backing constant", i, b)
		}
	}
	switch cfg.Target {
	case TargetFile:
		if cfg.File == nil {
			return bad("File is nil: TargetFile needs an open *os.File")
		}
		if cfg.Device != nil {
			return bad("Device is set: only TargetDevice uses a device")
		}
	case TargetMemory:
		if cfg.Device != nil || cfg.File != nil {
			return bad("Device/File set: TargetMemory uses neither")
		}
	case TargetDevice:
		if cfg.File != nil {
			return bad("File is set: only TargetFile uses a file")
		}
	}
	return cfg, nil
}
