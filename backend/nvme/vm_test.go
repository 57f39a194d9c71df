package nvme_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/nvme"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/internal/vfiotest"
	"github.com/hcomm-go/hcomm/vfio"
)

// These tests run the engine over QEMU's NVMe controller through kernel
// VFIO and the vIOMMU, in the VM guest (make test-vm); on the host they
// skip ("no VFIO in this kernel").

func TestMain(m *testing.M) { os.Exit(testutil.RunCheckingFDs(m)) }

func openEngine(t *testing.T, cfg nvme.Config, depth int) (*engine.Engine, *nvme.Backend) {
	t.Helper()
	addr := vfiotest.FindDevice(t, 0x1b36, 0x0010)
	dev, err := vfio.OpenPCI(addr)
	if err != nil {
		t.Fatalf("open %s: %v", addr, err)
	}
	cfg.CloseDevice = true
	b, err := nvme.New(dev, cfg)
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Config{Backend: b, PoolSize: 16 << 20, QueueDepth: depth, Alignment: 4096})
	if err != nil {
		t.Fatalf("engine.Open over the NVMe backend: %v", err)
	}
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return eng, b
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// TestVMEngineRoundTrip: host blocks → namespace → other host blocks
// through the engine, one batch each way, byte for byte; MSI-X and polled.
func TestVMEngineRoundTrip(t *testing.T) {
	for _, polled := range []bool{false, true} {
		t.Run(map[bool]string{false: "MSI-X", true: "polled"}[polled], func(t *testing.T) {
			eng, b := openEngine(t, nvme.Config{Polled: polled}, 32)
			d := eng.Backend()
			t.Logf("backend %s on %s: max transfer %d, namespace %d MiB, align %d, features %v",
				d.Name, d.Device, d.MaxTransfer, d.DeviceMemory>>20, d.Align, d.Features)
			sizes := []int{512, 4096, 8192, 12288, 64 << 10, 128 << 10, 512 << 10}
			var src, dst []engine.Block
			var writes, reads []engine.Transfer
			off := uint64(8 << 20)
			for i, n := range sizes {
				s, err := eng.Alloc(n)
				if err != nil {
					t.Fatal(err)
				}
				dd, err := eng.Alloc(n)
				if err != nil {
					t.Fatal(err)
				}
				fill(s.Bytes(), uint64(i)+map[bool]uint64{true: 100}[polled])
				clear(dd.Bytes())
				src, dst = append(src, s), append(dst, dd)
				writes = append(writes, engine.Transfer{Src: engine.Host(s), Dst: engine.DeviceAt(off), Len: n})
				reads = append(reads, engine.Transfer{Src: engine.DeviceAt(off), Dst: engine.Host(dd), Len: n})
				off += uint64(n+4095) &^ 4095
			}
			before := eng.Stats()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, batch := range [][]engine.Transfer{writes, reads} {
				ids := make([]engine.ID, len(batch))
				k, err := eng.SubmitBatchContext(ctx, batch, ids)
				if err != nil || k != len(batch) {
					t.Fatalf("submit batch: %d of %d, %v", k, len(batch), err)
				}
				for i, id := range ids {
					if err := eng.Wait(ctx, id); err != nil {
						t.Fatalf("transfer %d (%d bytes): %v", i, batch[i].Len, err)
					}
				}
			}
			for i := range sizes {
				// Blocks are rounded up to the alignment; n bytes moved.
				if n := sizes[i]; !bytes.Equal(src[i].Bytes()[:n], dst[i].Bytes()[:n]) {
					t.Fatalf("%d bytes: host → namespace → host differs", sizes[i])
				}
			}
			st := eng.Stats()
			t.Logf("%d sizes 512 B..512 KiB: host → namespace → host equal; %d doorbells for %d transfers",
				len(sizes), st.Doorbells-before.Doorbells, 2*len(sizes))
			if st.Doorbells-before.Doorbells >= uint64(2*len(sizes)) {
				t.Errorf("%d doorbells for %d transfers in 2 batches: not one per batch", st.Doorbells-before.Doorbells, 2*len(sizes))
			}
			if c := b.Controller().Stray(); c != 0 {
				t.Fatalf("%d stray completions", c)
			}
		})
	}
}

// TestVMEngineRefuses: what the backend's Prepare refuses never reaches the
// controller.
func TestVMEngineRefuses(t *testing.T) {
	eng, _ := openEngine(t, nvme.Config{}, 8)
	blk, err := eng.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	size := eng.Backend().DeviceMemory
	for _, tc := range []struct {
		name string
		tr   engine.Transfer
		want error
	}{
		{"not whole blocks", engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(0), Len: 100}, engine.ErrAlignment},
		{"offset not whole blocks", engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(7), Len: 512}, engine.ErrAlignment},
		{"over MDTS", engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(0), Len: 1 << 20}, engine.ErrOutOfBounds},
		{"past the namespace", engine.Transfer{Src: engine.DeviceAt(size), Dst: engine.Host(blk), Len: 512}, engine.ErrOutOfBounds},
		{"host to host", engine.Transfer{Src: engine.Host(blk), Dst: engine.HostAt(blk, 4096), Len: 512}, engine.ErrBadTransfer},
	} {
		if _, err := eng.Submit(tc.tr); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}

// TestVMEngineCloseInFlight: Close with transfers in flight completes each
// exactly once (done, or canceled by the controller reset).
func TestVMEngineCloseInFlight(t *testing.T) {
	eng, _ := openEngine(t, nvme.Config{}, 64)
	const n = 64
	const size = 256 << 10
	counts := make([]int, n)
	done := make(chan struct{}, n)
	blk, err := eng.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	ok, canceled := 0, 0
	results := make(chan error, n)
	for i := range n {
		_, err := eng.Submit(engine.Transfer{Src: engine.Host(blk), Dst: engine.DeviceAt(uint64(i) * size), Len: size, User: uint64(i),
			Callback: func(r engine.Result) {
				counts[r.User]++
				results <- r.Err
				done <- struct{}{}
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for range n {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("not every callback ran")
		}
	}
	close(results)
	for err := range results {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, engine.ErrCanceled):
			canceled++
		default:
			t.Errorf("transfer: %v", err)
		}
	}
	for i, c := range counts {
		if c != 1 {
			t.Fatalf("transfer %d: %d callbacks", i, c)
		}
	}
	t.Logf("Close with %d writes of 256 KiB in flight: %d completed, %d canceled, each exactly once", n, ok, canceled)
}

// TestVMStallRecovery drives the backend as the engine does, and stalls it
// the way a lost doorbell would: commands written into the submission ring
// but never rung stay outstanding past the timeout. Check then resets the
// controller, every one of them completes exactly once with a timeout, and
// the queue works again.
func TestVMStallRecovery(t *testing.T) {
	addr := vfiotest.FindDevice(t, 0x1b36, 0x0010)
	dev, err := vfio.OpenPCI(addr)
	if err != nil {
		t.Fatalf("open %s: %v", addr, err)
	}
	b, err := nvme.New(dev, nvme.Config{Timeout: 5 * time.Millisecond, CloseDevice: true})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	var ctr backend.Counters
	if err := b.Attach(backend.Env{QueueDepth: 16, Alignment: 4096, Counters: &ctr, Logger: slog.Default()}); err != nil {
		b.Close()
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	a, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	base, err := b.MapArena(0, a)
	if err != nil {
		t.Fatal(err)
	}
	defer b.UnmapArena(0)
	host := backend.Endpoint{Kind: engine.LocHost, Addr: base, Arena: 0}
	forward := func(tag uint64, last bool) {
		op := new(backend.Op)
		err := b.Prepare(host, backend.Endpoint{Kind: engine.LocDevice, Off: tag * 4096}, 4096, op)
		if err != nil {
			t.Fatal(err)
		}
		op.Len = 4096
		if !b.Forward(tag, op, last) {
			t.Fatalf("forward %d refused", tag)
		}
	}
	const n = 8
	for i := range n {
		forward(uint64(i), i == n-1)
	}
	// No Flush: the controller never sees them.
	out := make([]backend.Completion, 16)
	if k := b.Reap(out); k != 0 {
		t.Fatalf("%d completions for commands never rung", k)
	}
	time.Sleep(20 * time.Millisecond)
	b.Check()
	if ctr.Recoveries != 1 {
		t.Fatalf("Check after the timeout: %d recoveries, want 1", ctr.Recoveries)
	}
	seen := make([]int, n)
	for got := 0; got < n; {
		k := b.Reap(out)
		if k == 0 {
			t.Fatalf("%d of %d stalled commands completed after the reset", got, n)
		}
		for _, c := range out[:k] {
			seen[c.Tag]++
			if c.Status != backend.StatusTimeout {
				t.Errorf("tag %d: status %#x, want a timeout", c.Tag, uint32(c.Status))
			}
		}
		got += k
	}
	for tag, c := range seen {
		if c != 1 {
			t.Fatalf("tag %d completed %d times", tag, c)
		}
	}
	if b.Outstanding() != 0 || b.Reap(out) != 0 {
		t.Fatalf("%d outstanding after every stalled command completed", b.Outstanding())
	}
	// The queue works after the reset: forward, one doorbell, reap.
	forward(100, true)
	b.Flush()
	deadline := time.Now().Add(30 * time.Second)
	for b.Reap(out[:1]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no completion after the reset")
		}
		time.Sleep(time.Millisecond)
	}
	if out[0].Tag != 100 || out[0].Status != backend.StatusOK || out[0].N != 4096 {
		t.Fatalf("after the reset: %+v", out[0])
	}
	t.Logf("%d commands never rung: after the %v timeout Check reset the controller, each completed once as a timeout; the queue works after (doorbells %d, recoveries %d)",
		n, 5*time.Millisecond, ctr.Doorbells, ctr.Recoveries)
}

// TestVMDeferredDoorbell: callbacks that submit the next write of their
// chain, 32 chains, as an application pipeline does. With the doorbell
// deferred (DeferDoorbell 4) Flushes at 32 in flight leave it to the next Reap,
// and every write still completes exactly once with its bytes on the
// namespace (read back and compared); with DeferDoorbell -1 every Flush
// rings.
func TestVMDeferredDoorbell(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deferAt int
		spin    time.Duration
	}{
		{"deferred", nvme.DefaultDeferDoorbell, 0},
		{"deferred, reaper spin off", nvme.DefaultDeferDoorbell, -1},
		{"ring at every Flush", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				chains = 32
				rounds = 24
				bs     = 4096
			)
			addr := vfiotest.FindDevice(t, 0x1b36, 0x0010)
			dev, err := vfio.OpenPCI(addr)
			if err != nil {
				t.Fatalf("open %s: %v", addr, err)
			}
			b, err := nvme.New(dev, nvme.Config{CloseDevice: true, DeferDoorbell: tc.deferAt})
			if err != nil {
				dev.Close()
				t.Fatal(err)
			}
			// Room beside the 32 in flight: a callback runs before its
			// transfer's queue slot is released.
			eng, err := engine.Open(engine.Config{Backend: b, PoolSize: 4 << 20, QueueDepth: 4 * chains, Alignment: bs, Spin: tc.spin})
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			defer func() {
				if !closed {
					eng.Close()
				}
			}()
			blocks := make([]engine.Block, chains)
			for i := range blocks {
				if blocks[i], err = eng.Alloc(bs); err != nil {
					t.Fatal(err)
				}
				fill(blocks[i].Bytes(), uint64(1000+i))
			}
			// Chain c's round r writes its block at ((r*chains)+c)*bs.
			counts := make([]int, chains*rounds)
			errs := make(chan error, chains*rounds)
			retry := make(chan engine.Transfer, chains)
			done := make(chan struct{}, chains)
			var cb func(engine.Result)
			write := func(k uint64) engine.Transfer {
				return engine.Transfer{Src: engine.Host(blocks[k%chains]), Dst: engine.DeviceAt(k * bs), Len: bs, User: k, Callback: cb}
			}
			cb = func(r engine.Result) {
				counts[r.User]++
				if r.Err != nil {
					errs <- r.Err
				}
				next := r.User + chains
				if next >= chains*rounds {
					done <- struct{}{}
					return
				}
				if _, err := eng.Submit(write(next)); errors.Is(err, engine.ErrQueueFull) {
					retry <- write(next)
				} else if err != nil {
					errs <- err
					done <- struct{}{}
				}
			}
			before := eng.Stats()
			for c := range uint64(chains) {
				if _, err := eng.Submit(write(c)); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			for left := chains; left > 0; {
				select {
				case tr := <-retry:
					if _, err := eng.SubmitContext(ctx, tr); err != nil {
						t.Fatal(err)
					}
				case <-done:
					left--
				case err := <-errs:
					t.Fatal(err)
				case <-ctx.Done():
					t.Fatalf("%d of %d chains not done", left, chains)
				}
			}
			st := eng.Stats()
			// Read every write back, 32 at a time, and compare.
			back := make([]engine.Block, chains)
			for i := range back {
				if back[i], err = eng.Alloc(bs); err != nil {
					t.Fatal(err)
				}
			}
			ids := make([]engine.ID, chains)
			for r := range uint64(rounds) {
				batch := make([]engine.Transfer, chains)
				for c := range uint64(chains) {
					batch[c] = engine.Transfer{Src: engine.DeviceAt((r*chains + c) * bs), Dst: engine.Host(back[c]), Len: bs}
				}
				if k, err := eng.SubmitBatchContext(ctx, batch, ids); err != nil || k != chains {
					t.Fatalf("read back: %d of %d, %v", k, chains, err)
				}
				for c, id := range ids {
					if err := eng.Wait(ctx, id); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(back[c].Bytes(), blocks[c].Bytes()) {
						t.Fatalf("write %d (chain %d, round %d): the namespace holds other bytes", r*chains+uint64(c), c, r)
					}
				}
			}
			closed = true
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
			for k, c := range counts {
				if c != 1 {
					t.Fatalf("write %d: %d callbacks", k, c)
				}
			}
			n, bells, deferred := uint64(chains*rounds), st.Doorbells-before.Doorbells, b.Deferred()
			t.Logf("%d writes from callbacks, %d chains: %d SQ doorbells; Flushes deferred to Reap over the test: %d", n, chains, bells, deferred)
			if tc.deferAt < 0 {
				if deferred != 0 {
					t.Fatalf("DeferDoorbell -1: %d Flushes deferred", deferred)
				}
				return
			}
			// 32 chains keep 4 or more at the controller at some Flush.
			if deferred == 0 {
				t.Fatalf("deferred doorbell: %d doorbells for %d writes, no Flush deferred", bells, n)
			}
		})
	}
}
