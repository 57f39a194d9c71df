package uringfile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// exitEngine opens an engine over a buffered file in t's temporary
// directory (ext4 on the development machines: every buffered write is
// punted to an io-wq worker of the submitting thread) with n blocks of sz
// bytes.
func exitEngine(t *testing.T, mode engine.Mode, n, sz int) (*engine.Engine, *uringfile.Backend, *os.File, []engine.Block) {
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
	return e, be, f, blocks
}

// The main goroutine keeps the process's main thread for itself, so that
// no test goroutine runs there: Go never ends that thread (a goroutine
// locked to it that exits leaves it parked for ever instead), and
// onExitingThread needs threads that end.
func init() { runtime.LockOSThread() }

// onExitingThread runs f on a goroutine locked to an OS thread that exits
// when f returns (runtime.LockOSThread without Unlock), and returns once
// the thread is gone.
func onExitingThread(t *testing.T, f func()) {
	t.Helper()
	tid := make(chan int)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			tid <- 0 // cannot happen: init holds the main thread
			return
		}
		f()
		tid <- unix.Gettid()
	}()
	id := <-tid
	if id == 0 {
		t.Fatal("a test goroutine ran on the main thread, which never exits")
	}
	task := fmt.Sprintf("/proc/self/task/%d", id)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if _, err := os.Stat(task); errors.Is(err, fs.ErrNotExist) {
			return
		}
	}
	t.Fatalf("thread %d did not exit", id)
}

// TestSubmitterThreadExits reproduces what goroutines locked to their
// threads meet when they return right after submitting. Each round, the
// test's goroutine submits 256 buffered 64 KiB writes to one half of a
// file, and a goroutine locked to its thread (never unlocked: the thread
// exits with it) submits 256 more to the other half and returns at once.
// The kernel runs buffered writes to one inode one at a time across all
// the ring's io-wq workers, so the second batch waits behind the first in
// the exiting thread's io-wq, which the kernel tears down at the exit,
// canceling what is queued there. Every write must complete once with its
// real result, and the file must hold every byte. In reaper mode the
// reaper sleeps in io_uring while the thread exits; in poll mode the test's
// goroutine reaps in Wait. The last case lets the reaper fall asleep in
// io_uring (it waits for the writes' completions there) before the thread
// exits.
func TestSubmitterThreadExits(t *testing.T) {
	const n, sz, rounds = 256, 64 << 10, 20
	for _, c := range []struct {
		name  string
		mode  engine.Mode
		delay time.Duration // between the submission and the thread's exit
	}{
		{"reaper", engine.ModeReaper, 0},
		{"poll", engine.ModePoll, 0},
		{"reaper/exit-while-reaper-sleeps", engine.ModeReaper, 2 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, be, f, blocks := exitEngine(t, c.mode, 2*n, sz)
			var calls, failed atomic.Int64
			cb := func(r engine.Result) {
				calls.Add(1)
				if r.Err != nil || r.N != sz {
					if failed.Add(1) <= 3 {
						t.Errorf("write %d of round %d: %d bytes, %v", r.User%(2*n), r.User/(2*n), r.N, r.Err)
					}
				}
			}
			ts := make([]engine.Transfer, 2*n)
			ids := make([]engine.ID, 2*n)
			got := make([]byte, sz)
			for round := range rounds {
				for i, b := range blocks {
					fillRound(b.Bytes(), round, i)
					ts[i] = engine.Transfer{Src: engine.Host(b), Dst: engine.FileAt(int64(i) * sz), Len: sz, Callback: cb, User: uint64(round*2*n + i)}
				}
				if k, err := e.SubmitBatch(ts[:n], ids[:n]); err != nil || k != n {
					t.Fatalf("submitted %d of %d: %v", k, n, err)
				}
				var k int
				var err error
				onExitingThread(t, func() {
					k, err = e.SubmitBatch(ts[n:], ids[n:])
					time.Sleep(c.delay)
				})
				if err != nil || k != n {
					t.Fatalf("submitted %d of %d from the exiting thread: %v", k, n, err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				for _, id := range ids {
					if err := e.Wait(ctx, id); err != nil && ctx.Err() != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
				cancel()
				if failed.Load() > 0 {
					t.Fatalf("round %d: %d writes failed", round, failed.Load())
				}
				for i := range blocks {
					if _, err := f.ReadAt(got, int64(i)*sz); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, blocks[i].Bytes()) {
						t.Fatalf("round %d: block %d: the file does not hold what was written", round, i)
					}
				}
			}
			if got := calls.Load(); got != rounds*2*n {
				t.Fatalf("%d callbacks, want %d", got, rounds*2*n)
			}
			t.Logf("%d of %d writes issued again after a thread's exit canceled them", be.Reissued(), rounds*2*n)
		})
	}
}

// fillRound writes a pattern that names the round and the block.
func fillRound(b []byte, round, i int) {
	for j := range b {
		b[j] = byte(round*131 + i*7 + j>>12)
	}
}
