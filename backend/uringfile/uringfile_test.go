package uringfile_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

func tempFile(t *testing.T, flags int) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "data"), os.O_RDWR|os.O_CREATE|flags, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestRefusedFiles: files whose I/O could block for ever or land in the
// wrong place are refused at New, with ErrBadConfig naming the cause.
func TestRefusedFiles(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	appendF := tempFile(t, os.O_APPEND)
	devNull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	for _, c := range []struct {
		name string
		f    *os.File
		want string
	}{
		{"nil", nil, "nil"},
		{"pipe", r, "not a regular file"},
		{"O_APPEND", appendF, "O_APPEND"},
		{"character device", devNull, "not a regular file"},
		{"directory", dir, "not a regular file"},
	} {
		if _, err := uringfile.New(c.f, uringfile.Config{}); !errors.Is(err, engine.ErrBadConfig) || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: %v, want ErrBadConfig naming %q", c.name, err, c.want)
		}
	}
}

// TestGrowthRegistersArenas: the pool grows by arenas, each registered as
// its own fixed buffer, and transfers from every arena land in the file.
func TestGrowthRegistersArenas(t *testing.T) {
	f := tempFile(t, 0)
	be, err := uringfile.New(f, uringfile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Config{Backend: be, PoolSize: 1 << 20, PoolMax: 4 << 20, Alignment: 4096,
		Backings: []hugepage.Backing{hugepage.Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var blocks []engine.Block
	for i := range 3 {
		b, err := e.Alloc(1 << 20)
		if err != nil {
			t.Fatalf("alloc %d: %v", i, err)
		}
		for j := range b.Bytes() {
			b.Bytes()[j] = byte(i + 1)
		}
		blocks = append(blocks, b)
	}
	if st := e.Stats().Pool; st.Arenas < 3 {
		t.Fatalf("%d arenas after 3 MiB from a 1 MiB pool", st.Arenas)
	}
	for _, fb := range be.Describe().Fallbacks {
		if bytes.Contains([]byte(fb.Error()), []byte("not registered")) {
			t.Errorf("an arena the pool grew by is not a fixed buffer: %v", fb)
		}
		t.Logf("fallback: %v", fb)
	}
	if !slices.Contains(be.Describe().Features, "fixed-buffers") {
		t.Errorf("features %v: the first arena is not a fixed buffer", be.Describe().Features)
	}
	ctx := t.Context()
	for i, b := range blocks {
		id, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(int64(i) << 20), Len: b.Len()})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(ctx, id); err != nil {
			t.Fatalf("write from arena of block %d: %v", i, err)
		}
	}
	got := make([]byte, 3<<20)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got[i<<20] != byte(i+1) || got[(i+1)<<20-1] != byte(i+1) {
			t.Fatalf("block %d did not land at its offset", i)
		}
	}
}

// TestReaperAfterWaiter: in the default mode a goroutine that Waits reaps
// for itself and the reaper stands aside while it does (engine/reap.go,
// sleepLazy); when the waiter has left, the callbacks of transfers nobody
// waits on must still all run — the reaper takes over.
func TestReaperAfterWaiter(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags int
	}{{"buffered", 0}, {"O_DIRECT", directFlag(t)}} {
		t.Run(c.name, func(t *testing.T) {
			f := tempFile(t, c.flags)
			if err := f.Truncate(1 << 20); err != nil {
				t.Fatal(err)
			}
			be, err := uringfile.New(f, uringfile.Config{})
			if err != nil {
				t.Fatal(err)
			}
			e, err := engine.Open(engine.Config{Backend: be, PoolSize: 1 << 20, Alignment: 4096, QueueDepth: 128})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			const depth = 64
			blocks := make([]engine.Block, depth)
			for i := range blocks {
				if blocks[i], err = e.Alloc(4096); err != nil {
					t.Fatal(err)
				}
			}
			var done atomic.Int64
			cb := func(r engine.Result) {
				if r.Err != nil {
					t.Errorf("transfer %d: %v", r.User, r.Err)
				}
				done.Add(1)
			}
			ts := make([]engine.Transfer, depth)
			ids := make([]engine.ID, depth)
			submit := func(round int) {
				for i := range ts {
					ts[i] = engine.Transfer{Src: engine.Host(blocks[i]), Dst: engine.FileAt(int64((round*depth+i)%256) * 4096),
						Len: 4096, Callback: cb, User: uint64(i)}
				}
				if n, err := e.SubmitBatch(ts, ids); err != nil || n != depth {
					t.Fatalf("round %d: submitted %d of %d: %v", round, n, depth, err)
				}
			}
			// A loop that submits and waits: its Waits reap.
			rounds := 50
			for r := range rounds {
				submit(r)
				for _, id := range ids {
					if err := e.Wait(t.Context(), id); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Then transfers nobody waits on: the reaper must deliver them.
			submit(rounds)
			want := int64((rounds + 1) * depth)
			deadline := time.Now().Add(10 * time.Second) // liveness only
			for done.Load() < want && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if got := done.Load(); got != want {
				t.Fatalf("%d of %d callbacks ran: the reaper did not take over from the waiter", got, want)
			}
		})
	}
}

// directFlag is O_DIRECT when the test directory's file system honours it
// (not tmpfs), else the test is skipped.
func directFlag(t *testing.T) int {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "probe"), os.O_RDWR|os.O_CREATE|syscall.O_DIRECT, 0o600)
	if err != nil {
		t.Skipf("O_DIRECT not available in the test directory: %v", err)
	}
	f.Close()
	return syscall.O_DIRECT
}

// TestWaitBothModes: a loop that submits batches and Waits for each
// transfer — reaping on the waiter, asleep in the backend between batches
// (ModePoll's waiters too) — writes a pattern and reads it back intact in
// both modes, each callback running exactly once.
func TestWaitBothModes(t *testing.T) {
	for _, c := range []struct {
		name  string
		mode  engine.Mode
		flags int
	}{
		{"reaper/buffered", engine.ModeReaper, 0},
		{"reaper/O_DIRECT", engine.ModeReaper, directFlag(t)},
		{"poll/buffered", engine.ModePoll, 0},
		{"poll/O_DIRECT", engine.ModePoll, directFlag(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, blocks := fileEngine(t, c.flags, c.mode, 64, 128)
			calls := make([]atomic.Int32, 2*len(blocks))
			cb := func(r engine.Result) {
				if r.Err != nil {
					t.Errorf("transfer %d: %v", r.User, r.Err)
				}
				calls[r.User].Add(1)
			}
			ts := make([]engine.Transfer, len(blocks))
			ids := make([]engine.ID, len(blocks))
			run := func(write bool) {
				for i, b := range blocks {
					if write {
						fill(b.Bytes(), i)
						ts[i] = engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(int64(i) * 4096), Len: 4096, Callback: cb, User: uint64(i)}
					} else {
						clear(b.Bytes())
						ts[i] = engine.Transfer{Src: engine.FileAt(int64(i) * 4096), Dst: engine.Host(b), Len: 4096, Callback: cb, User: uint64(len(blocks) + i)}
					}
				}
				// Two batches: the second is staged while the first is
				// in flight.
				half := len(ts) / 2
				for _, part := range [][2]int{{0, half}, {half, len(ts)}} {
					if n, err := e.SubmitBatch(ts[part[0]:part[1]], ids[part[0]:part[1]]); err != nil || n != part[1]-part[0] {
						t.Fatalf("submitted %d of %d: %v", n, part[1]-part[0], err)
					}
				}
				for _, id := range ids {
					if err := e.Wait(t.Context(), id); err != nil {
						t.Fatal(err)
					}
				}
			}
			run(true)
			run(false)
			for i, b := range blocks {
				if !checkFill(b.Bytes(), i) {
					t.Fatalf("block %d read back differs from what was written", i)
				}
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			for i := range calls {
				if n := calls[i].Load(); n != 1 {
					t.Errorf("callback of transfer %d ran %d times, want once", i, n)
				}
			}
		})
	}
}

// fileEngine opens an engine in mode and of queue depth depth over a 1 MiB
// temporary file opened with flags, with n blocks of 4 KiB allocated;
// Close is the test's cleanup.
func fileEngine(t *testing.T, flags int, mode engine.Mode, n, depth int) (*engine.Engine, []engine.Block) {
	t.Helper()
	f := tempFile(t, flags)
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	be, err := uringfile.New(f, uringfile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Config{Backend: be, PoolSize: 1 << 20, Alignment: 4096, QueueDepth: depth, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	blocks := make([]engine.Block, n)
	for i := range blocks {
		if blocks[i], err = e.Alloc(4096); err != nil {
			t.Fatal(err)
		}
	}
	return e, blocks
}

// fill writes block i's pattern into b; checkFill checks it.
func fill(b []byte, i int) {
	for j := range b {
		b[j] = byte(i*131 + j*7 + 1)
	}
}

func checkFill(b []byte, i int) bool {
	for j := range b {
		if b[j] != byte(i*131+j*7+1) {
			return false
		}
	}
	return true
}

// TestDeferredDoorbell: transfers submitted by callbacks — inside a
// completion round, where the engine defers their io_uring_enter to the
// round's holder — must all start and complete exactly once, with the data
// in place, however the round ends: a waiter's batched wait carries them
// (WaitIdle), the waiter returns (Wait on an older transfer), Poll returns
// (ModePoll, nobody waits), the reaper's round ends (nobody calls the
// engine at all), or a callback panics after submitting (ModePoll).
func TestDeferredDoorbell(t *testing.T) {
	type finish int
	const (
		byWaitIdle finish = iota // WaitIdle: rounds carry the doorbells in their waits
		byWait                   // Wait for the first generation only, then nobody waits
		byPoll                   // ModePoll: only Poll is called
		byReaper                 // default mode: nobody calls the engine
		byPanic                  // ModePoll: a callback submits, then panics
	)
	for _, c := range []struct {
		name   string
		mode   engine.Mode
		flags  int
		finish finish
	}{
		{"reaper/waitidle", engine.ModeReaper, directFlag(t), byWaitIdle},
		{"reaper/waitidle/buffered", engine.ModeReaper, 0, byWaitIdle},
		{"reaper/wait", engine.ModeReaper, directFlag(t), byWait},
		{"reaper/nobody", engine.ModeReaper, directFlag(t), byReaper},
		{"poll/waitidle", engine.ModePoll, directFlag(t), byWaitIdle},
		{"poll/wait", engine.ModePoll, directFlag(t), byWait},
		{"poll/poll", engine.ModePoll, directFlag(t), byPoll},
		{"poll/poll/buffered", engine.ModePoll, 0, byPoll},
		{"poll/panic", engine.ModePoll, directFlag(t), byPanic},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Blocks; generations of writes per block. The queue holds
			// every generation: a callback's submission never finds it
			// full (slots are released in order, after their callbacks).
			const n, gens = 32, 4
			e, blocks := fileEngine(t, c.flags, c.mode, n, n*gens)
			var done atomic.Int64
			calls := make([]atomic.Int32, n*gens)
			var cb func(engine.Result)
			submit := func(i, gen int) (engine.ID, error) {
				b := blocks[i]
				fill(b.Bytes(), gen*n+i)
				return e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(int64(gen*n+i) * 4096), Len: 4096, Callback: cb, User: uint64(gen*n + i)})
			}
			cb = func(r engine.Result) {
				if r.Err != nil {
					t.Errorf("transfer %d: %v", r.User, r.Err)
				}
				calls[r.User].Add(1)
				done.Add(1)
				// The next generation on this block, from the callback.
				if gen, i := int(r.User)/n, int(r.User)%n; gen+1 < gens {
					if _, err := submit(i, gen+1); err != nil {
						t.Errorf("submit from a callback: %v", err)
					}
					if c.finish == byPanic && i == 3 {
						panic("after submitting")
					}
				}
			}
			ids := make([]engine.ID, n)
			for i := range blocks {
				id, err := submit(i, 0)
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = id
			}
			want := int64(n * gens)
			deadline := time.Now().Add(10 * time.Second) // liveness only
			switch c.finish {
			case byWaitIdle:
				if err := e.WaitIdle(t.Context()); err != nil {
					t.Fatal(err)
				}
			case byWait:
				for _, id := range ids {
					if err := e.Wait(t.Context(), id); err != nil {
						t.Fatal(err)
					}
				}
				fallthrough
			case byPoll, byPanic, byReaper:
				panics := 0
				for done.Load() < want && time.Now().Before(deadline) {
					switch {
					case c.mode == engine.ModeReaper:
						time.Sleep(time.Millisecond)
					default:
						func() {
							defer func() {
								if p := recover(); p != nil {
									panics++
								}
							}()
							e.Poll()
						}()
					}
				}
				if c.finish == byPanic && panics != gens-1 {
					t.Errorf("Poll panicked %d times, want %d", panics, gens-1)
				}
			}
			if got := done.Load(); got != want {
				t.Fatalf("%d of %d callbacks ran: a deferred submission was stranded", got, want)
			}
			// Read every generation back: the data landed.
			for k := range n * gens {
				b := blocks[k%n]
				clear(b.Bytes())
				id, err := e.Submit(engine.Transfer{Src: engine.FileAt(int64(k) * 4096), Dst: engine.Host(b), Len: 4096})
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Wait(t.Context(), id); err != nil {
					t.Fatal(err)
				}
				if !checkFill(b.Bytes(), k) {
					t.Fatalf("block %d (generation %d) read back differs from what was written", k%n, k/n)
				}
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			for i := range calls {
				if k := calls[i].Load(); k != 1 {
					t.Errorf("callback of transfer %d ran %d times, want once", i, k)
				}
			}
		})
	}
}

// TestPollCarriesCallbackSubmissions: in ModePoll, the transfers that one
// Poll's callbacks submit start with one io_uring_enter, made when that
// Poll ends (the engine's own count of its system calls).
func TestPollCarriesCallbackSubmissions(t *testing.T) {
	const n = 32
	e, blocks := fileEngine(t, directFlag(t), engine.ModePoll, n, 2*n)
	var done atomic.Int64
	submitted := 0 // by callbacks, which run on this goroutine (Poll)
	cb := func(r engine.Result) {
		if r.Err != nil {
			t.Errorf("transfer %d: %v", r.User, r.Err)
		}
		done.Add(1)
		b := blocks[r.User]
		if _, err := e.Submit(engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(int64(n+r.User) * 4096), Len: 4096}); err != nil {
			t.Errorf("submit from a callback: %v", err)
		}
		submitted++
	}
	ids := make([]engine.ID, n)
	ts := make([]engine.Transfer, n)
	for i, b := range blocks {
		ts[i] = engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(int64(i) * 4096), Len: 4096, Callback: cb, User: uint64(i)}
	}
	if k, err := e.SubmitBatch(ts, ids); err != nil || k != n {
		t.Fatalf("submitted %d of %d: %v", k, n, err)
	}
	// Wait (polling) for the last of the batch: the callbacks run inside
	// its rounds; count the system calls of the Poll that runs them.
	deadline := time.Now().Add(10 * time.Second) // liveness only
	for done.Load() < n && time.Now().Before(deadline) {
		before, k := e.Stats(), submitted
		e.Poll()
		after := e.Stats()
		// (A Poll that reaped only the callbacks' own transfers, which
		// have no callback, submitted nothing.)
		if k := submitted - k; k > 0 {
			if enters := after.Syscalls - before.Syscalls; enters != 1 {
				t.Errorf("a Poll whose callbacks submitted %d transfers made %d system calls, want 1", k, enters)
			}
		}
	}
	if done.Load() != n {
		t.Fatalf("%d of %d completed", done.Load(), n)
	}
	if err := e.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Completed != 2*n {
		t.Fatalf("%d completed, want %d", st.Completed, 2*n)
	}
}
