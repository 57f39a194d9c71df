package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// reverseBackend is a backend written outside the engine, as any package
// could: it proves that the core's contracts hold for a backend the core
// has never seen. It moves host bytes into a device memory of its own,
// completes what it was given in REVERSE order of submission, fails a
// seeded random share of transfers with its own status, and can hold every
// completion back (gate) to fill the queue.
type reverseBackend struct {
	ctr      *backend.Counters
	devMem   []byte
	arenas   [engine.MaxArenas][]byte
	queued   []pending // forwarded, not yet flushed
	issued   []pending // flushed: the device "has" them
	rng      *rand.Rand
	failRate float64
	held     atomic.Bool // completions held back while set
	injected atomic.Int64
	maxOut   int // the most transfers outstanding at once
}

type pending struct {
	tag uint64
	op  backend.Op
}

const (
	statusInjected = backend.StatusBackend + iota
	opH2D          = 1
)

var errInjected = fmt.Errorf("%w: reverse test backend: injected failure", engine.ErrDevice)

func newReverse(seed uint64, failRate float64) *reverseBackend {
	return &reverseBackend{devMem: make([]byte, 1<<20), rng: rand.New(rand.NewPCG(seed, seed)), failRate: failRate}
}

func (b *reverseBackend) Describe() backend.Description {
	return backend.Description{Name: "reverse", Device: "test", Locs: 1 << engine.LocDevice, DeviceMemory: uint64(len(b.devMem)), CPUThreshold: -1}
}
func (b *reverseBackend) Attach(env backend.Env) error { b.ctr = env.Counters; return nil }
func (b *reverseBackend) MapArena(slot int, a *hugepage.Arena) (uint64, error) {
	b.arenas[slot] = a.Bytes()
	return uint64(slot) << 40, nil
}
func (b *reverseBackend) UnmapArena(slot int) error { b.arenas[slot] = nil; return nil }
func (b *reverseBackend) Prepare(src, dst backend.Endpoint, n uint32, op *backend.Op) error {
	if src.Kind != engine.LocHost || dst.Kind != engine.LocDevice {
		return fmt.Errorf("reverse: host→device only: %w", engine.ErrBadTransfer)
	}
	if dst.Off+uint64(n) > uint64(len(b.devMem)) {
		return fmt.Errorf("reverse: beyond device memory: %w", engine.ErrOutOfBounds)
	}
	*op = backend.Op{Code: opH2D, Path: engine.PathDMA, Src: src.Addr, Dst: dst.Off, HostArena: uint16(src.Arena)}
	return nil
}
func (b *reverseBackend) Execute(*backend.Op) (uint32, backend.Status) {
	return 0, backend.StatusCanceled
}
func (b *reverseBackend) Forward(tag uint64, op *backend.Op, last bool) bool {
	b.queued = append(b.queued, pending{tag, *op})
	return true
}
func (b *reverseBackend) Flush() {
	b.issued = append(b.issued, b.queued...)
	b.queued = b.queued[:0]
	b.maxOut = max(b.maxOut, len(b.issued))
	b.ctr.Doorbells++
}
func (b *reverseBackend) Reap(out []backend.Completion) int {
	if b.held.Load() {
		return 0
	}
	n := 0
	for n < len(out) && len(b.issued) > 0 {
		p := b.issued[len(b.issued)-1] // newest first
		b.issued = b.issued[:len(b.issued)-1]
		c := backend.Completion{Tag: p.tag, N: p.op.Len}
		if b.rng.Float64() < b.failRate {
			c.Status, c.N = statusInjected, 0
			b.injected.Add(1)
		} else {
			src := b.arenas[p.op.HostArena][p.op.Src&(1<<40-1):]
			copy(b.devMem[p.op.Dst:p.op.Dst+uint64(p.op.Len)], src[:p.op.Len])
		}
		out[n] = c
		n++
	}
	return n
}
func (b *reverseBackend) Check()               {}
func (b *reverseBackend) Outstanding() int     { return len(b.issued) + len(b.queued) }
func (b *reverseBackend) ReadyFD() (int, bool) { return -1, false }
func (b *reverseBackend) Cancel(out []backend.Completion) int {
	n := 0
	for ; n < len(out) && len(b.issued) > 0; n++ {
		out[n] = backend.Completion{Tag: b.issued[0].tag, Status: backend.StatusCanceled}
		b.issued = b.issued[1:]
	}
	return n
}
func (b *reverseBackend) Close() error { return nil }
func (b *reverseBackend) Err(s backend.Status) error {
	if s == statusInjected {
		return errInjected
	}
	return nil
}

// TestForeignBackendExactlyOnce runs the core's exactly-once contract on a
// backend outside the engine: many submitters, completions in reverse
// order, injected failures. Every callback runs once, every failure is one
// the backend injected, every success moved its bytes.
func TestForeignBackendExactlyOnce(t *testing.T) {
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		t.Run(mode.String(), func(t *testing.T) {
			be := newReverse(7, 0.05)
			e := open(t, engine.Config{Backend: be, Mode: mode, QueueDepth: 32})
			const submitters, per = 8, 2000
			const total = submitters * per
			counts := make([]atomic.Int32, total)
			var failed atomic.Int64
			cb := func(r engine.Result) {
				counts[r.User].Add(1)
				if r.Err != nil {
					if !errors.Is(r.Err, errInjected) || !errors.Is(r.Err, engine.ErrDevice) {
						t.Errorf("transfer %d: %v, want the injected failure", r.User, r.Err)
					}
					failed.Add(1)
				}
			}
			ctx := ctxT(t, 2*time.Minute)
			var wg sync.WaitGroup
			for g := range submitters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					blk := alloc(t, e, 64)
					for i := range per {
						u := uint64(g*per + i)
						if _, err := e.SubmitContext(ctx, engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(uint64(g) * 64), Len: 64, Callback: cb, User: u}); err != nil {
							t.Errorf("submit %d: %v", u, err)
							return
						}
						if mode == engine.ModePoll {
							e.Poll()
						}
					}
				}()
			}
			wg.Wait()
			must(t, e.Drain(ctx))
			for i := range counts {
				if c := counts[i].Load(); c != 1 {
					t.Fatalf("transfer %d: %d callbacks", i, c)
				}
			}
			st := e.Stats()
			if failed.Load() != be.injected.Load() || st.DeviceErrors != uint64(failed.Load()) || st.Completed != total {
				t.Errorf("failed %d, injected %d, Stats %+v", failed.Load(), be.injected.Load(), st)
			}
			if be.maxOut > 32 {
				t.Errorf("%d transfers outstanding in the backend at once, QueueDepth 32", be.maxOut)
			}
			t.Logf("%d transfers, %d injected failures, completed newest-first", total, failed.Load())
		})
	}
}

// TestForeignBackendBackpressure: with the backend holding every completion
// back, QueueDepth transfers fill the queue, the next Submit is
// ErrQueueFull, SubmitContext waits and proceeds once completions flow,
// and Close cancels what is held, each callback once.
func TestForeignBackendBackpressure(t *testing.T) {
	be := newReverse(1, 0)
	be.held.Store(true)
	e, err := engine.Open(small(t, engine.Config{Backend: be, QueueDepth: 8}))
	must(t, err)
	blk := alloc(t, e, 64)
	var calls, canceled atomic.Int32
	tr := engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(0), Len: 64, Callback: func(r engine.Result) {
		calls.Add(1)
		if errors.Is(r.Err, engine.ErrCanceled) {
			canceled.Add(1)
		}
	}}
	for i := range 8 {
		if _, err := e.Submit(tr); err != nil {
			t.Fatalf("submit %d of 8: %v", i, err)
		}
	}
	if _, err := e.Submit(tr); !errors.Is(err, engine.ErrQueueFull) {
		t.Fatalf("9th submit on a full queue: %v, want ErrQueueFull", err)
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.SubmitContext(short, tr); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SubmitContext on a full queue that stays full: %v, want the context's deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.SubmitContext(ctxT(t, 30*time.Second), tr)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	be.held.Store(false) // completions flow: room opens
	must(t, <-done)
	must(t, e.Drain(ctxT(t, 30*time.Second)))
	if c := calls.Load(); c != 9 {
		t.Fatalf("%d callbacks after 9 transfers", c)
	}
	// Close with completions held: every held transfer is canceled once.
	be.held.Store(true)
	for range 5 {
		_, err := e.Submit(tr)
		must(t, err)
	}
	must(t, e.Close())
	if c, k := calls.Load(), canceled.Load(); c != 14 || k != 5 {
		t.Errorf("after Close: %d callbacks (want 14), %d canceled (want 5)", c, k)
	}
	if st := e.Stats(); st.QueueFull == 0 || st.Canceled != 5 {
		t.Errorf("stats: QueueFull %d, Canceled %d", st.QueueFull, st.Canceled)
	}
}

// refuseGrowth is the memory backend refusing every arena but the first.
type refuseGrowth struct{ *memory.Backend }

var errNoMoreMappings = errors.New("test backend: no more mappings")

func (r refuseGrowth) MapArena(slot int, a *hugepage.Arena) (uint64, error) {
	if slot > 0 {
		return 0, errNoMoreMappings
	}
	return r.Backend.MapArena(slot, a)
}

// TestAdaptivePool: a workload that needs 3× the initial pool completes,
// each added arena mapped into the backend before its blocks are used, and
// the pool returns to its initial size once idle. A growth the backend
// refuses is an error that says why, with nothing half-mapped.
func TestAdaptivePool(t *testing.T) {
	const initial = 1 << 20
	e := open(t, engine.Config{Backend: memory.New(), PoolSize: initial, PoolMax: 4 * initial, PoolIdle: 30 * time.Millisecond,
		Backings: []hugepage.Backing{hugepage.Backing4K}, Mode: engine.ModePoll})
	var blocks []engine.Block
	for range 3 * initial / (256 << 10) {
		blocks = append(blocks, alloc(t, e, 256<<10))
	}
	src := blocks[0]
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i)
	}
	// Copy into every block, the added arenas' included: they are mapped.
	ctx := ctxT(t, 10*time.Second)
	for _, b := range blocks[1:] {
		id, err := e.Submit(engine.Transfer{Src: engine.Host(src), Dst: engine.Host(b), Len: b.Len()})
		must(t, err)
		must(t, e.Wait(ctx, id))
		if b.Bytes()[1000] != byte(1000&0xff) || b.Bytes()[b.Len()-1] != byte((b.Len()-1)&0xff) {
			t.Fatalf("block at %#x: copy did not land", b.Addr())
		}
	}
	st := e.Stats().Pool
	if st.Grows < 2 || st.Arenas < 3 {
		t.Fatalf("3× the initial pool: %d grows, %d arenas", st.Grows, st.Arenas)
	}
	for _, b := range blocks {
		must(t, e.Free(b))
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Pool.Arenas > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.Stats().Pool; st.Arenas != 1 || st.Mapped != initial || st.Releases < 2 {
		t.Fatalf("idle: %d arenas, %d bytes mapped, %d releases; want back to 1 arena of %d", st.Arenas, st.Mapped, st.Releases, initial)
	}

	refusing := open(t, engine.Config{Backend: refuseGrowth{memory.New()}, PoolSize: initial, PoolMax: 4 * initial,
		Backings: []hugepage.Backing{hugepage.Backing4K}})
	a := alloc(t, refusing, initial/2)
	before := refusing.Stats().Pool
	_, err := refusing.Alloc(initial)
	if !errors.Is(err, hugepage.ErrPoolExhausted) || !errors.Is(err, errNoMoreMappings) {
		t.Fatalf("growth the backend refuses: %v, want ErrPoolExhausted wrapping the backend's reason", err)
	}
	if after := refusing.Stats().Pool; after.Arenas != before.Arenas || after.Mapped != before.Mapped {
		t.Errorf("refused growth left %d arenas, %d bytes mapped (before: %d, %d)", after.Arenas, after.Mapped, before.Arenas, before.Mapped)
	}
	must(t, refusing.Free(a))
}

// batchWaitingBackend is reverseBackend with batched waits
// (WaitCompletions) that one instance may decline (BatchWaits). It holds
// every completion back until the engine waits in it — or, when it
// declined, until release fires.
type batchWaitingBackend struct {
	*reverseBackend
	wants bool
	waits atomic.Int64
}

func (b *batchWaitingBackend) BatchWaits() bool { return b.wants }
func (b *batchWaitingBackend) WaitCompletions(want int, minWait, timeout time.Duration) int {
	b.waits.Add(1)
	b.held.Store(false)
	return 0
}

// TestBatchWaitsDeclined: a backend with WaitCompletions is waited on in
// batches unless its BatchWaits says no; then the engine never calls
// WaitCompletions and completions are reaped as for any backend. ModePoll:
// the goroutine in Wait does the waiting; the default mode: the reaper
// (nobody Waits: a parked waiter makes the reaper sleep on the backend's
// completion signal instead, which this test backend does not have).
func TestBatchWaitsDeclined(t *testing.T) {
	for _, mode := range []engine.Mode{engine.ModePoll, engine.ModeReaper} {
		for _, wants := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/wants=%v", mode, wants), func(t *testing.T) {
				be := &batchWaitingBackend{reverseBackend: newReverse(3, 0), wants: wants}
				be.held.Store(true)
				e := open(t, engine.Config{Backend: be, Mode: mode})
				b := alloc(t, e, 4096)
				if !wants {
					// Nobody calls WaitCompletions: let the completions go.
					time.AfterFunc(20*time.Millisecond, func() { be.held.Store(false) })
				}
				ctx := ctxT(t, 10*time.Second)
				done := make(chan struct{})
				id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(0), Len: 4096,
					Callback: func(engine.Result) { close(done) }})
				must(t, err)
				if mode == engine.ModePoll {
					must(t, e.Wait(ctx, id))
				}
				select {
				case <-done:
				case <-ctx.Done():
					t.Fatalf("no completion (WaitCompletions called %d times)", be.waits.Load())
				}
				if n := be.waits.Load(); wants && n == 0 || !wants && n != 0 {
					t.Errorf("WaitCompletions called %d times with BatchWaits %v", n, wants)
				}
			})
		}
	}
}
