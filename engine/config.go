package engine

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/hugepage"
)

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
	// Drain, blocking submission and Close call Poll themselves; on a
	// backend waited on in batches (backend/uringfile) a waiter whose poll
	// found nothing sleeps in the backend until about half of what is
	// outstanding has completed, as in ModeReaper, instead of spinning.
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
	DefaultSpin       = 50 * time.Microsecond

	MinPoolSize   = 64 << 10
	MaxPoolSize   = 1 << 40
	MaxQueueDepth = 1 << 15
	MaxAlignment  = 2 << 20
)

// Config configures an engine. Backend is the one field without a default:
// the zero Config with a Backend is a 256 MiB pool, queue depth 64, 64-byte
// alignment and a background reaper.
type Config struct {
	// Backend is what the engine moves data with (required): an HDMA
	// device (backend/hdmadev over a vfio.Device: kernel VFIO, or
	// vfio/mock's software device), a file through io_uring
	// (backend/uringfile), host memory (backend/memory), or any other
	// implementation of Backend. Open takes ownership: Close, or a failed
	// Open, closes it.
	Backend backend.Backend
	// Backends are more backends for the same engine and pool (Backend,
	// when set, is the first; Backends follow it): e.g. an HDMA device, a
	// file backend and a UCX backend at once. Every arena is mapped into
	// each. At most MaxBackends in all; AddBackend adds more later.
	Backends []backend.Backend

	// PoolSize is the initial size of the host memory pool in bytes
	// (default 256 MiB; MinPoolSize..MaxPoolSize). It is mapped once at
	// Open and mapped into the backend (DMA-mapped, registered) once.
	PoolSize int64
	// PoolMax lets the pool grow: when Alloc finds no room, the pool adds
	// an arena (of PoolSize bytes, or the block's size if larger), maps it
	// into the backend before handing out its first block, and so on up to
	// PoolMax bytes in all. 0 (or ≤ PoolSize): the pool never grows.
	PoolMax int64
	// PoolIdle is how long an added arena must hold no block before it is
	// unmapped from the backend and given back (default 1s when PoolMax
	// allows growth; negative: never give arenas back).
	PoolIdle time.Duration
	// QueueDepth is the most transfers in flight at once (default 64; a
	// power of two in 1..MaxQueueDepth). A full queue is ErrQueueFull, or a
	// wait with the Context submission calls.
	QueueDepth int
	// Alignment of every block's address and length (default 64; a power
	// of two in 8..MaxAlignment, at most PoolSize). Use 4096 for an
	// O_DIRECT file.
	Alignment int
	// Backings is the hugepage backing preference for the pool (default
	// hugepage.DefaultBackings: hugetlb 2 MiB, THP, 4 KiB).
	Backings []hugepage.Backing
	// Populate prefaults the pool; Lock mlocks it.
	Populate, Lock bool

	// Mode selects the background reaper (default) or poll mode.
	Mode Mode
	// Spin is how long the reaper keeps polling after its last completion
	// before it sleeps (default 50µs; negative: never spin, 0..1s).
	Spin time.Duration

	// Logger receives rare events (fallbacks, device recovery); default
	// slog.Default().
	Logger *slog.Logger
}

// backends is Backend (when set) followed by Backends.
func (cfg Config) backends() []backend.Backend {
	if cfg.Backend == nil {
		return cfg.Backends
	}
	return append([]backend.Backend{cfg.Backend}, cfg.Backends...)
}

// DefaultPoolIdle is how long an added arena stays idle before it is given
// back, when Config.PoolMax allows growth.
const DefaultPoolIdle = time.Second

// withDefaults validates cfg and fills in defaults. Every error names the
// field and its allowed range, and wraps ErrBadConfig.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("engine: "+format+": %w", append(args, ErrBadConfig)...)
	}
	bes := cfg.backends()
	for i, be := range cfg.Backends {
		if be == nil {
			return bad("Config.Backends[%d] is nil", i)
		}
	}
	if len(bes) > MaxBackends {
		return bad("%d backends: an engine holds at most %d (MaxBackends)", len(bes), MaxBackends)
	}
	if len(bes) == 0 {
		return bad("Config.Backend is nil: give the engine what it moves data with — " +
			"hdmadev.New(dev, hdmadev.Config{}) over a vfio.Device (mock.New(mock.Config{}) from " +
			"github.com/hcomm-go/hcomm/vfio/mock is a software HDMA device for tests and demos), " +
			"uringfile.New(f, uringfile.Config{}) for a file, or memory.New() for host copies " +
			"(packages under github.com/hcomm-go/hcomm/backend/)")
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
	if cfg.Spin == 0 {
		cfg.Spin = DefaultSpin
	}
	if cfg.PoolIdle == 0 {
		cfg.PoolIdle = DefaultPoolIdle
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.PoolSize < MinPoolSize || cfg.PoolSize > MaxPoolSize:
		return bad("PoolSize %d: want %d..%d bytes (0 = %d)", cfg.PoolSize, MinPoolSize, int64(MaxPoolSize), DefaultPoolSize)
	case cfg.PoolMax < 0 || cfg.PoolMax > MaxPoolSize:
		return bad("PoolMax %d: want 0 (no growth) or up to %d bytes", cfg.PoolMax, int64(MaxPoolSize))
	case cfg.QueueDepth < 1 || cfg.QueueDepth > MaxQueueDepth || cfg.QueueDepth&(cfg.QueueDepth-1) != 0:
		return bad("QueueDepth %d: want a power of two in 1..%d (0 = %d)", cfg.QueueDepth, MaxQueueDepth, DefaultQueueDepth)
	case cfg.Alignment < 8 || cfg.Alignment > MaxAlignment || cfg.Alignment&(cfg.Alignment-1) != 0:
		return bad("Alignment %d: want a power of two in 8..%d (0 = %d)", cfg.Alignment, MaxAlignment, DefaultAlignment)
	case int64(cfg.Alignment) > cfg.PoolSize:
		return bad("Alignment %d: larger than PoolSize %d, no block would fit", cfg.Alignment, cfg.PoolSize)
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
	return cfg, nil
}
