package uringfile_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// exitEngine opens an engine over a buffered file in t's temporary
// directory (ext4 on the development machines: every buffered write is
// punted to an io-wq worker of the submitting thread) with n blocks of sz
// bytes.
func exitEngine(t *testing.T, mode engine.Mode, n, sz int) (*engine.Engine, *os.File, []engine.Block) {
	t.Helper()
	f := tempFile(t, 0)
	be, err := uringfile.New(f, uringfile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Config{Backend: be, Mode: mode, QueueDepth: n, PoolSize: int64(n * sz), Alignment: 4096,
		Backings: []hugepage.Backing{hugepage.Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	blocks := make([]engine.Block, n)
	for i := range blocks {
		if blocks[i], err = e.Alloc(sz); err != nil {
			t.Fatal(err)
		}
	}
	return e, f, blocks
}

// submitFromExitingThread submits ts from a goroutine locked to its OS
// thread and never unlocked, so that the thread exits with the goroutine
// as soon as SubmitBatch returns, before the transfers complete.
func submitFromExitingThread(e *engine.Engine, ts []engine.Transfer, ids []engine.ID) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		n, err := e.SubmitBatch(ts, ids)
		if err == nil && n != len(ts) {
			err = fmt.Errorf("submitted %d of %d", n, len(ts))
		}
		errc <- err
	}()
	return <-errc
}

// TestSubmitterThreadExits reproduces what goroutines locked to their
// threads meet when they return right after submitting: each round, 256
// buffered 64 KiB writes from a new thread that exits before they
// complete, while the previous round's writes (another thread's) are still
// in flight. The kernel serializes buffered writes to one inode across all
// the ring's io-wq workers; a thread that exits tears down its own io-wq
// and cancels what is still queued there, waiting behind the other
// thread's. Every write must complete once with its real result, and the
// file must hold every byte. In reaper mode the reaper sleeps in io_uring
// while the threads exit; in poll mode the test's goroutine reaps in Wait.
func TestSubmitterThreadExits(t *testing.T) {
	const n, sz, rounds = 256, 64 << 10, 20
	for _, mode := range []engine.Mode{engine.ModeReaper, engine.ModePoll} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			// Two sets of blocks and two regions of the file: round r
			// uses set r%2 and waits only for round r-2 first.
			e, f, blocks := exitEngine(t, mode, 2*n, sz)
			var calls, failed atomic.Int64
			cb := func(r engine.Result) {
				calls.Add(1)
				if r.Err != nil || r.N != sz {
					if failed.Add(1) <= 3 {
						t.Errorf("write %d of round %d: %d bytes, %v", r.User%n, r.User/n, r.N, r.Err)
					}
				}
			}
			ts := make([]engine.Transfer, 2*n)
			ids := make([]engine.ID, 2*n)
			got := make([]byte, sz)
			check := func(round int) {
				set := round % 2
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for _, id := range ids[set*n : set*n+n] {
					if err := e.Wait(ctx, id); err != nil && ctx.Err() != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
				if failed.Load() > 0 {
					t.Fatalf("round %d: %d writes failed", round, failed.Load())
				}
				for i := set * n; i < set*n+n; i++ {
					if _, err := f.ReadAt(got, int64(i)*sz); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, blocks[i].Bytes()) {
						t.Fatalf("round %d: block %d: the file does not hold what was written", round, i%n)
					}
				}
			}
			for round := range rounds {
				set := round % 2
				if round >= 2 {
					check(round - 2)
				}
				for i := set * n; i < set*n+n; i++ {
					fillRound(blocks[i].Bytes(), round, i)
					ts[i] = engine.Transfer{Src: engine.Host(blocks[i]), Dst: engine.FileAt(int64(i) * sz), Len: sz, Callback: cb, User: uint64(round*n + i%n)}
				}
				if err := submitFromExitingThread(e, ts[set*n:set*n+n], ids[set*n:set*n+n]); err != nil {
					t.Fatal(err)
				}
			}
			check(rounds - 2)
			check(rounds - 1)
			if got := calls.Load(); got != rounds*n {
				t.Fatalf("%d callbacks, want %d", got, rounds*n)
			}
		})
	}
}

// fillRound writes a pattern that names the round and the block.
func fillRound(b []byte, round, i int) {
	for j := range b {
		b[j] = byte(round*131 + i*7 + j>>12)
	}
}
