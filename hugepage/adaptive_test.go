package hugepage

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitArenas waits until the pool has n arenas (idle release runs on a
// timer), failing after a generous deadline.
func waitArenas(t *testing.T, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := p.Stats()
		if st.Arenas == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d arenas after 10 s, want %d: %+v", st.Arenas, n, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// hookLog records the arenas the pool hands to OnGrow and OnRelease. The
// hooks run under the pool's lock, on whichever goroutine caused them (an
// idle timer's, too), so the log has its own mutex.
type hookLog struct {
	mu       sync.Mutex
	grown    map[*Arena]bool
	released []*Arena
	fail     error // returned by OnGrow when set
	closed   atomic.Bool
	late     atomic.Int32 // hooks called after Pool.Close returned
}

func newHookLog() *hookLog { return &hookLog{grown: map[*Arena]bool{}} }

func (h *hookLog) config(cfg PoolConfig) PoolConfig {
	cfg.OnGrow = func(a *Arena) error {
		if h.closed.Load() {
			h.late.Add(1)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.fail != nil {
			return h.fail
		}
		h.grown[a] = true
		mem := a.Bytes() // what a device mapping would do: the arena is usable here
		mem[0], mem[len(mem)-1] = 1, 1
		return nil
	}
	cfg.OnRelease = func(a *Arena) {
		if h.closed.Load() {
			h.late.Add(1)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.released = append(h.released, a)
	}
	return cfg
}

func (h *hookLog) isGrown(a *Arena) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.grown[a]
}

func (h *hookLog) counts() (grown, released int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.grown), len(h.released)
}

// TestAdaptiveGrowth runs workloads that need three times the first arena:
// the pool grows, OnGrow sees each added arena before any block of it is
// handed out, and once everything is freed the pool returns to its first
// arena after IdleRelease, calling OnRelease for each added one.
func TestAdaptiveGrowth(t *testing.T) {
	const first = 4 << 20
	tests := []struct {
		name  string
		sizes []int // allocated round robin until 3×first bytes are live
	}{
		{"large blocks", []int{1 << 20}},
		{"slab blocks", []int{32 << 10}},
		{"mixed", []int{64, 4096, 100 << 10, 1000, 512 << 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHookLog()
			p := newTestPool(t, h.config(PoolConfig{
				Size: first, GrowBy: first, MaxSize: 6 * first, IdleRelease: 5 * time.Millisecond,
			}))
			firstArena := p.Arenas()[0]
			var blocks []Block
			var live int64
			for i := 0; live < 3*first; i++ {
				b, err := p.Alloc(tc.sizes[i%len(tc.sizes)])
				if err != nil {
					t.Fatalf("block %d with %d bytes live: %v", i, live, err)
				}
				if a := b.Arena(); a != firstArena && !h.isGrown(a) {
					t.Fatalf("block %d is in arena %#x, which OnGrow never saw", i, a.Addr())
				}
				blocks = append(blocks, b)
				live += int64(b.Len())
			}
			st := p.Stats()
			grown, released := h.counts()
			if st.Arenas < 3 || grown != st.Grows || st.Grows != st.Arenas-1 || released != 0 {
				t.Fatalf("after %d bytes: %d arenas, %d grows, OnGrow %d, OnRelease %d", live, st.Arenas, st.Grows, grown, released)
			}
			if st.Mapped != int64(st.Arenas)*first || st.InUse != live {
				t.Fatalf("stats after growth: %+v", st)
			}
			for _, b := range blocks {
				if err := p.Free(b); err != nil {
					t.Fatal(err)
				}
			}
			waitArenas(t, p, 1)
			st = p.Stats()
			grown, released = h.counts()
			if st.Mapped != first || st.Releases != st.Grows || released != grown || p.Arenas()[0] != firstArena {
				t.Fatalf("after idle release: %+v, OnGrow %d, OnRelease %d", st, grown, released)
			}
			for _, a := range h.released {
				if !h.isGrown(a) || a.Bytes() != nil {
					t.Fatalf("OnRelease got arena %#x: grown %v, still mapped %v", a.Addr(), h.isGrown(a), a.Bytes() != nil)
				}
			}
		})
	}
}

// TestOnGrowError: a growth the hook refuses fails the Alloc with both
// sentinels, names the arena, and leaves nothing mapped or counted.
func TestOnGrowError(t *testing.T) {
	h := newHookLog()
	refused := errors.New("device refused the mapping")
	h.fail = refused
	var seen *Arena
	cfg := h.config(PoolConfig{Size: 4 << 20, MaxSize: 8 << 20})
	hook := cfg.OnGrow
	cfg.OnGrow = func(a *Arena) error { seen = a; return hook(a) }
	p := newTestPool(t, cfg)
	full, err := p.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	before := p.Stats()
	_, err = p.Alloc(64)
	if !errors.Is(err, ErrPoolExhausted) || !errors.Is(err, refused) || !strings.Contains(err.Error(), "4194304 bytes") {
		t.Fatalf("Alloc with a refusing OnGrow = %v; want ErrPoolExhausted and the hook's error, naming the 4194304-byte arena", err)
	}
	after := p.Stats()
	if after.Arenas != before.Arenas || after.Mapped != before.Mapped || after.Grows != before.Grows ||
		after.InUse != before.InUse || after.Allocs != before.Allocs || after.Failures != before.Failures+1 ||
		len(p.Arenas()) != 1 {
		t.Fatalf("a refused growth changed the pool: before %+v, after %+v", before, after)
	}
	if seen == nil || seen.Bytes() != nil {
		t.Fatalf("the refused arena is not closed (OnGrow saw %v)", seen)
	}
	h.mu.Lock()
	h.fail = nil
	h.mu.Unlock()
	b, err := p.Alloc(64)
	if err != nil || b.Arena() == p.Arenas()[0] {
		t.Fatalf("Alloc once OnGrow accepts: %v in arena %v", err, b.Arena())
	}
	p.Free(b)
	p.Free(full)
}

// TestIdleReleaseReallocated: an arena that gets a block again before its
// idle timer fires is kept; once idle again it is released.
func TestIdleReleaseReallocated(t *testing.T) {
	const idle = 300 * time.Millisecond
	h := newHookLog()
	p := newTestPool(t, h.config(PoolConfig{Size: 4 << 20, MaxSize: 8 << 20, IdleRelease: idle}))
	full, _ := p.Alloc(4 << 20)
	b, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	added := b.Arena()
	p.Free(b) // arms the timer
	b, err = p.Alloc(1 << 20)
	if err != nil || b.Arena() != added {
		t.Fatalf("re-allocation: %v, arena %v, want the added arena %v (was it released within %v?)", err, b.Arena(), added, idle)
	}
	time.Sleep(3 * idle)
	if st := p.Stats(); st.Arenas != 2 || st.Releases != 0 || added.Bytes() == nil {
		t.Fatalf("an arena holding a block was released: %+v", st)
	}
	p.Free(b)
	waitArenas(t, p, 1)
	if grown, released := h.counts(); grown != 1 || released != 1 || h.released[0] != added {
		t.Fatalf("OnGrow %d, OnRelease %d (want the added arena once each)", grown, released)
	}
	p.Free(full)
}

// TestCloseStopsIdleTimers: Close stops pending idle releases, waits for a
// callback already started, calls no hook afterwards and leaves no
// goroutine behind.
func TestCloseStopsIdleTimers(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, idle := range []time.Duration{time.Hour, time.Microsecond, 50 * time.Microsecond, time.Millisecond} {
		for range 20 {
			h := newHookLog()
			p := newTestPool(t, h.config(PoolConfig{Size: 1 << 20, MaxSize: 4 << 20, IdleRelease: idle}))
			full, _ := p.Alloc(1 << 20)
			var bs []Block
			for range 2 {
				b, err := p.Alloc(1 << 20)
				if err != nil {
					t.Fatal(err)
				}
				bs = append(bs, b)
			}
			for _, b := range bs {
				p.Free(b) // two added arenas, two timers
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			h.closed.Store(true)
			p.Free(full)
			time.Sleep(2 * time.Millisecond)
			if n := h.late.Load(); n != 0 {
				t.Fatalf("IdleRelease %v: %d hooks ran after Close returned", idle, n)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after closing the pools, %d before", runtime.NumGoroutine(), base)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHooksConcurrent grows and releases arenas while several goroutines
// allocate and free (run with -race): the hooks' calls match the pool's
// counters and the pool's accounting balances.
func TestHooksConcurrent(t *testing.T) {
	h := newHookLog()
	p := newTestPool(t, h.config(PoolConfig{Size: 2 << 20, GrowBy: 2 << 20, MaxSize: 16 << 20, IdleRelease: 100 * time.Microsecond}))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []Block
			for i := range 3000 {
				if len(held) >= 12 || (len(held) > 0 && (i+g)%5 == 0) {
					if err := p.Free(held[0]); err != nil {
						errs <- err
						return
					}
					held = held[1:]
					continue
				}
				b, err := p.Alloc([]int{100, 64 << 10, 300 << 10}[(i+g)%3])
				if errors.Is(err, ErrPoolExhausted) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				held = append(held, b)
			}
			for _, b := range held {
				p.Free(b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitArenas(t, p, 1)
	st := p.Stats()
	grown, released := h.counts()
	if st.InUse != 0 || grown != st.Grows || released != st.Releases || st.Grows != st.Releases {
		t.Fatalf("stats %+v, OnGrow %d, OnRelease %d", st, grown, released)
	}
	t.Logf("%d grows, %d releases", st.Grows, st.Releases)
}
