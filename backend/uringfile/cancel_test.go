package uringfile_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
)

// frozenFS mounts a fresh ext4 file system on a loop device under a
// temporary directory and returns its mount point and the functions that
// freeze (FIFREEZE) and thaw it. Writes to a frozen file system block in
// the kernel until it is thawed: file I/O that does not complete, and that
// io_uring cannot cancel once an io-wq worker waits in it.
func frozenFS(t *testing.T) (dir string, freeze, thaw func()) {
	t.Helper()
	testutil.RequirePrivileged(t, "mount a loop-device ext4 file system and freeze it")
	for _, tool := range []string{"mkfs.ext4", "mount", "umount", "fsfreeze"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.MissingPrivilege(t, tool+" not installed (e2fsprogs, util-linux)")
		}
	}
	run := func(args ...string) error {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return errors.New(strings.Join(args, " ") + ": " + err.Error() + ": " + strings.TrimSpace(string(out)))
		}
		return nil
	}
	tmp := t.TempDir()
	img, dir := filepath.Join(tmp, "fs.img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := run("mkfs.ext4", "-q", "-F", img); err != nil {
		t.Fatal(err)
	}
	if err := run("mount", "-o", "loop", img, dir); err != nil {
		testutil.MissingPrivilege(t, "loop mount: "+err.Error())
	}
	frozen := false
	t.Cleanup(func() {
		if frozen {
			_ = run("fsfreeze", "-u", dir)
		}
		// A closed io_uring lets go of its files asynchronously: retry
		// while the mount is busy.
		var err error
		for range 100 {
			if err = run("umount", dir); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("cleanup: %v", err)
	})
	freeze = func() {
		if err := run("fsfreeze", "-f", dir); err != nil {
			t.Fatal(err)
		}
		frozen = true
	}
	thaw = func() {
		if err := run("fsfreeze", "-u", dir); err != nil {
			t.Fatal(err)
		}
		frozen = false
	}
	return dir, freeze, thaw
}

// TestShutdownHungIO: file I/O that never completes
// (writes to a frozen file system: an io-wq worker waits in the kernel)
// does not hold Shutdown past its context. The backend asks the kernel to
// cancel (IORING_OP_ASYNC_CANCEL), waits uringfile.CancelWait, and gives
// up; Shutdown returns an error wrapping the context's, every callback has
// run once with ErrCanceled, and the engine keeps the pool mapped until
// the kernel lets go (after the thaw), then releases everything. Before the
// fix Shutdown blocked in io_uring_enter until the file system was thawed.
func TestShutdownHungIO(t *testing.T) {
	dir, freeze, thaw := frozenFS(t)
	for _, direct := range []bool{false, true} {
		name := map[bool]string{false: "buffered", true: "O_DIRECT"}[direct]
		t.Run(name, func(t *testing.T) {
			flags := os.O_RDWR | os.O_CREATE
			if direct {
				flags |= 0o40000 // O_DIRECT
			}
			f, err := os.OpenFile(filepath.Join(dir, name), flags, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			be, err := uringfile.New(f, uringfile.Config{})
			if err != nil {
				t.Fatal(err)
			}
			e, err := engine.Open(engine.Config{Backend: be, PoolSize: 1 << 20, Alignment: 4096,
				Backings: []hugepage.Backing{hugepage.Backing4K}})
			if err != nil {
				t.Fatal(err)
			}
			b, err := e.Alloc(64 << 10)
			if err != nil {
				t.Fatal(err)
			}
			const n = 4
			var calls, canceled atomic.Int32
			cb := func(r engine.Result) {
				calls.Add(1)
				if errors.Is(r.Err, engine.ErrCanceled) {
					canceled.Add(1)
				}
			}
			freeze()
			for i := range n {
				if _, err := e.Submit(engine.Transfer{Src: engine.HostAt(b, i*4096), Dst: engine.FileAt(int64(i) * 4096), Len: 4096, Callback: cb}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(50 * time.Millisecond) // let the writes reach the file system
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- e.Shutdown(ctx) }()
			select {
			case err := <-done:
				if calls.Load() == n && canceled.Load() == 0 {
					t.Skip("the writes completed on the frozen file system: nothing hung")
				}
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "could not cancel") {
					t.Errorf("Shutdown with hung writes: %v, want an error saying what the backend holds, wrapping DeadlineExceeded", err)
				}
			case <-time.After(20 * time.Second):
				thaw()
				t.Fatal("Shutdown blocked on file I/O that does not complete; returned only after the thaw")
			}
			if c := calls.Load(); c != n {
				t.Errorf("%d callbacks for %d transfers when Shutdown returned", c, n)
			}
			t.Logf("%d of %d writes reported canceled", canceled.Load(), n)
			thaw()
			closed := make(chan error, 1)
			go func() { closed <- e.Shutdown(context.Background()) }()
			select {
			case err := <-closed:
				if err != nil {
					t.Errorf("Shutdown after the thaw: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the engine did not finish closing after the thaw")
			}
			if c := calls.Load(); c != n {
				t.Errorf("%d callbacks for %d transfers after the thaw", c, n)
			}
		})
	}
}
