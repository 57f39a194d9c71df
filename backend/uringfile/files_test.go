package uringfile_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

const shardSize = 4096

// shard creates a file of shardSize bytes whose content names serial, and
// opens it for reading and writing.
func shard(t *testing.T, dir string, serial int) *os.File {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("shard-%06d", serial))
	if err := os.WriteFile(path, shardBytes(serial), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func shardBytes(serial int) []byte {
	b := make([]byte, shardSize)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], uint64(serial)<<20|uint64(i))
	}
	return b
}

// shardSerial is the serial a shard's content names (-1 when it names none).
func shardSerial(b []byte) int {
	first := binary.LittleEndian.Uint64(b)
	for i := 0; i < len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != first&^(1<<20-1)|uint64(i) {
			return -1
		}
	}
	return int(first >> 20)
}

func filesEngine(t *testing.T, be *uringfile.Backend, mode engine.Mode, depth, blocks int) (*engine.Engine, engine.Target, []engine.Block) {
	t.Helper()
	e, err := engine.Open(engine.Config{Backend: be, Mode: mode, QueueDepth: depth, Alignment: 4096, PoolSize: max(engine.MinPoolSize, int64(blocks*shardSize)),
		Backings: []hugepage.Backing{hugepage.Backing4K}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	bs := make([]engine.Block, blocks)
	for i := range bs {
		if bs[i], err = e.Alloc(shardSize); err != nil {
			t.Fatal(err)
		}
	}
	return e, e.Targets()[0], bs
}

// TestManyFiles: 2000 shard files (half added before the engine opens,
// half after) read through one engine in batches of 64, every byte
// checked, every callback once; then a write into every tenth shard lands
// in that file and no other.
func TestManyFiles(t *testing.T) {
	const n, batch = 2000, 64
	dir := t.TempDir()
	be, err := uringfile.NewEmpty(uringfile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint32, n)
	add := func(i int) {
		if ids[i], err = be.AddFile(shard(t, dir, i)); err != nil {
			t.Fatalf("AddFile(shard %d): %v", i, err)
		}
	}
	for i := range n / 2 {
		add(i)
	}
	e, tgt, blocks := filesEngine(t, be, engine.ModeReaper, 256, batch)
	for i := n / 2; i < n; i++ {
		add(i)
	}
	if got := be.Files(); got != n {
		t.Fatalf("Files() = %d, want %d", got, n)
	}
	var calls atomic.Int64
	cb := func(r engine.Result) {
		calls.Add(1)
		if r.Err != nil || r.N != shardSize {
			t.Errorf("transfer %d: %d bytes, %v", r.User, r.N, r.Err)
		}
	}
	ts := make([]engine.Transfer, batch)
	tids := make([]engine.ID, batch)
	ctx := context.Background()
	run := func(first int, write bool) {
		t.Helper()
		k := min(batch, n-first)
		for j := range k {
			i := first + j
			if write {
				copy(blocks[j].Bytes(), shardBytes(n+i))
				ts[j] = engine.Transfer{Src: engine.Host(blocks[j]), Dst: tgt.File(ids[i], 0), Len: shardSize, Callback: cb, User: uint64(i)}
			} else {
				clear(blocks[j].Bytes())
				ts[j] = engine.Transfer{Src: tgt.File(ids[i], 0), Dst: engine.Host(blocks[j]), Len: shardSize, Callback: cb, User: uint64(i)}
			}
		}
		if got, err := e.SubmitBatch(ts[:k], tids[:k]); err != nil || got != k {
			t.Fatalf("submitted %d of %d: %v", got, k, err)
		}
		for _, id := range tids[:k] {
			if err := e.Wait(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if !write {
			for j := range k {
				if got := shardSerial(blocks[j].Bytes()); got != first+j {
					t.Fatalf("read of shard %d (file %#x) returned shard %d's bytes", first+j, ids[first+j], got)
				}
			}
		}
	}
	for first := 0; first < n; first += batch {
		run(first, false)
	}
	if got := calls.Load(); got != n {
		t.Fatalf("%d callbacks for %d reads", got, n)
	}
	// Writes: every tenth shard gets new content, and only it.
	for first := 0; first < n; first += 10 * batch {
		for j := 0; j < batch && first+j*10 < n; j++ {
			i := first + j*10
			copy(blocks[j].Bytes(), shardBytes(n+i))
			ts[j] = engine.Transfer{Src: engine.Host(blocks[j]), Dst: tgt.File(ids[i], 0), Len: shardSize, Callback: cb, User: uint64(i)}
			if _, err := e.SubmitBatch(ts[j:j+1], tids[j:j+1]); err != nil {
				t.Fatal(err)
			}
			if err := e.Wait(ctx, tids[j]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range n {
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("shard-%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		want := i
		if i%10 == 0 {
			want = n + i
		}
		if s := shardSerial(got); s != want {
			t.Fatalf("shard %d holds shard %d's bytes, want %d's", i, s, want)
		}
	}
}

// TestRemovedFileRefused: a removed file's ID is refused at submit with an
// error naming it, before and after its slot holds another file; a stale
// RemoveFile is refused; the file table's limit is an error that says so;
// nothing is accepted once the backend is closed.
func TestRemovedFileRefused(t *testing.T) {
	dir := t.TempDir()
	be, err := uringfile.NewEmpty(uringfile.Config{MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	e, tgt, blocks := filesEngine(t, be, engine.ModePoll, 8, 1)
	a, err := be.AddFile(shard(t, dir, 1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := be.AddFile(shard(t, dir, 2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.AddFile(shard(t, dir, 3)); err == nil || !strings.Contains(err.Error(), "all 2 file slots are in use") {
		t.Fatalf("a third file in a table of 2: %v", err)
	}
	read := func(id uint32) error {
		_, err := e.Submit(engine.Transfer{Src: tgt.File(id, 0), Dst: engine.Host(blocks[0]), Len: shardSize})
		return err
	}
	if err := be.RemoveFile(a); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, engine.ErrBadTransfer) || !strings.Contains(err.Error(), fmt.Sprintf("file %#x", a)) || !strings.Contains(err.Error(), "removed") {
			t.Errorf("%s: %v, want ErrBadTransfer naming file %#x as removed", what, err, a)
		}
	}
	refused("read of a removed file", read(a))
	refused("second RemoveFile", be.RemoveFile(a))
	// The slot is reused (nothing was in flight on it): the stale ID
	// still names nothing.
	c, err := be.AddFile(shard(t, dir, 4))
	if err != nil {
		t.Fatal(err)
	}
	if c == a || c&0xffff != a&0xffff {
		t.Fatalf("the new file's ID %#x: want slot %d again with a new generation (old ID %#x)", c, a&0xffff, a)
	}
	refused("read of a removed file whose slot was reused", read(a))
	for id, serial := range map[uint32]int{b: 2, c: 4} {
		clear(blocks[0].Bytes())
		tid, err := e.Submit(engine.Transfer{Src: tgt.File(id, 0), Dst: engine.Host(blocks[0]), Len: shardSize})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(context.Background(), tid); err != nil {
			t.Fatal(err)
		}
		if got := shardSerial(blocks[0].Bytes()); got != serial {
			t.Fatalf("file %#x: read shard %d's bytes, want %d's", id, got, serial)
		}
	}
	if err := read(1 << 15); !errors.Is(err, engine.ErrBadTransfer) {
		t.Errorf("read of a slot outside the table: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := be.AddFile(shard(t, dir, 5)); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("AddFile after Close: %v", err)
	}
	if _, err := uringfile.NewEmpty(uringfile.Config{MaxFiles: uringfile.MaxFiles + 1}); !errors.Is(err, backend.ErrBadConfig) {
		t.Errorf("MaxFiles over the limit: %v", err)
	}
}

// TestAddRemoveWhileRunning: readers stream reads of random files while
// another goroutine removes files and adds others, in a table small enough
// that slots are reused all the time. A read completes with the bytes of
// the file its ID named at submit (never another file's), or is refused at
// submit (ErrBadTransfer), or completes with an error wrapping
// ErrCanceled (removed before the kernel took it); every callback runs
// once.
func TestAddRemoveWhileRunning(t *testing.T) {
	const slots, pool, readers, batch, cycles = 16, 48, 3, 16, 2000
	dir := t.TempDir()
	be, err := uringfile.NewEmpty(uringfile.Config{MaxFiles: slots})
	if err != nil {
		t.Fatal(err)
	}
	e, tgt, blocks := filesEngine(t, be, engine.ModeReaper, 64, readers*batch)
	files := make([]*os.File, pool) // serial = index
	for i := range files {
		files[i] = shard(t, dir, i)
	}
	var mu sync.Mutex
	serialOf := map[uint32]int{} // live IDs
	var live []uint32
	inTable := make([]bool, pool)
	add := func(serial int) bool {
		id, err := be.AddFile(files[serial])
		if err != nil {
			if !strings.Contains(err.Error(), "file slots are in use") {
				t.Errorf("AddFile(shard %d): %v", serial, err)
			}
			return false // removed slots still draining: another time
		}
		mu.Lock()
		serialOf[id], inTable[serial] = serial, true
		live = append(live, id)
		mu.Unlock()
		return true
	}
	for i := range slots / 2 {
		add(i)
	}
	var calls, refused, canceled, ok, removed, added atomic.Int64
	// Results come by callback (User: reader<<8 | index): an ID can go
	// stale under three readers before its reader waits for it.
	type reader struct {
		res  [batch]engine.Result
		seen [batch]atomic.Int32
		wg   sync.WaitGroup
	}
	rs := make([]reader, readers)
	cb := func(r engine.Result) {
		calls.Add(1)
		rd := &rs[r.User>>8]
		rd.res[r.User&0xff] = r
		rd.seen[r.User&0xff].Add(1)
		rd.wg.Done()
	}
	stop := make(chan struct{})
	var rw sync.WaitGroup
	for w := range readers {
		rw.Add(1)
		go func() {
			defer rw.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			rd := &rs[w]
			mine := blocks[w*batch : (w+1)*batch]
			want := make([]int, batch)
			ts := make([]engine.Transfer, batch)
			tids := make([]engine.ID, batch)
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := 0
				mu.Lock()
				for j := range batch {
					if len(live) == 0 {
						break
					}
					id := live[r.IntN(len(live))]
					want[j] = serialOf[id]
					clear(mine[j].Bytes())
					ts[j] = engine.Transfer{Src: tgt.File(id, 0), Dst: engine.Host(mine[j]), Len: shardSize, Callback: cb, User: uint64(w<<8 | j)}
					rd.seen[j].Store(0)
					k++
				}
				mu.Unlock()
				// One by one: a refused transfer does not stop the others.
				for j := range k {
					rd.wg.Add(1)
					if _, err := e.SubmitBatchContext(context.Background(), ts[j:j+1], tids[j:j+1]); err != nil {
						rd.wg.Done()
						if !errors.Is(err, engine.ErrBadTransfer) || !strings.Contains(err.Error(), "removed") {
							t.Errorf("submit: %v", err)
						}
						refused.Add(1)
						tids[j] = 0
					}
				}
				rd.wg.Wait()
				for j := range k {
					if tids[j] == 0 {
						continue
					}
					if n := rd.seen[j].Load(); n != 1 {
						t.Errorf("read %d: %d callbacks", j, n)
					}
					switch err := rd.res[j].Err; {
					case err == nil:
						if got := shardSerial(mine[j].Bytes()); got != want[j] {
							t.Errorf("a read of shard %d returned shard %d's bytes", want[j], got)
						}
						ok.Add(1)
					case errors.Is(err, engine.ErrCanceled) && strings.Contains(err.Error(), "removed"):
						canceled.Add(1)
					default:
						t.Errorf("read of shard %d: %v", want[j], err)
					}
				}
				if t.Failed() {
					return
				}
			}
		}()
	}
	// The mutator: cycles removals and additions while the readers run.
	r := rand.New(rand.NewPCG(1, 2))
	for range cycles {
		if t.Failed() {
			break
		}
		{
			mu.Lock()
			var id uint32
			have := len(live) > slots/4
			if have {
				k := r.IntN(len(live))
				id = live[k]
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				inTable[serialOf[id]] = false
				delete(serialOf, id)
			}
			serial := r.IntN(pool)
			for inTable[serial] {
				serial = (serial + 1) % pool
			}
			mu.Unlock()
			if have {
				if err := be.RemoveFile(id); err != nil {
					t.Errorf("RemoveFile(%#x): %v", id, err)
				}
				removed.Add(1)
			}
			if add(serial) {
				added.Add(1)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	close(stop)
	rw.Wait()
	if err := e.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	submitted := ok.Load() + canceled.Load()
	if got := calls.Load(); got != submitted {
		t.Errorf("%d callbacks for %d accepted reads", got, submitted)
	}
	t.Logf("%d reads with the right bytes, %d refused at submit, %d canceled (file removed first); %d files removed, %d added",
		ok.Load(), refused.Load(), canceled.Load(), removed.Load(), added.Load())
	if added.Load() <= slots || ok.Load() == 0 {
		t.Errorf("%d files added while running (%d reads completed): slots were not reused", added.Load(), ok.Load())
	}
}
