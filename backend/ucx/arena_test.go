package ucx

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/engine"
)

// TestArenaUpdates: arenas a backend maps after a peer connected reach
// the peer before MapArena returns, at offsets that never move (the end
// of the window; an unmapped arena leaves a hole), and arenas it unmaps
// leave the peer's window before UnmapArena returns, with none of the
// peer's transfers in flight to them: the peer's transfers racing the
// removal each complete once, successfully or refused (ErrRemoteBounds),
// and the memory is unmapped right after (a late write would fault);
// transfers staged before a removal and posted after it are refused.
// Two backends in this process, over tcp and shm.
func TestArenaUpdates(t *testing.T) {
	const size = 4 << 20
	for _, tls := range transports {
		t.Run(tls, func(t *testing.T) {
			a := newRigConfig(t, tls, 64, Config{Listen: listenAddr(tls)})
			r := newRig(t, tls, 64)
			p := connect(t, r.b, a.b.Addr())
			w0 := uint64(len(a.mem))
			if got := r.b.Peers()[p].Size; got != w0 {
				t.Fatalf("window %d bytes, want %d", got, w0)
			}
			mmap := func() []byte {
				m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			mem1 := mmap()
			if _, err := a.b.mapMem(1, mem1, false); err != nil {
				t.Fatal(err)
			}
			// No waiting: the peer knew before MapArena returned.
			if got := r.b.Peers()[p].Size; got != w0+size {
				t.Fatalf("window after MapArena: %d bytes, want %d", got, w0+size)
			}
			off1, ok := a.b.Offset(uintptr(unsafePointer(mem1)) + 100)
			if !ok || off1 != w0+100 {
				t.Fatalf("Offset in the new arena: %d, %v; want %d", off1, ok, w0+100)
			}
			copy(r.mem, "into the new arena")
			xs := []xfer{{put: true, peer: p, local: 0, remote: off1, n: 18}}
			r.mustOK(r.run(xs), xs)
			xs = []xfer{{peer: p, local: 64, remote: off1, n: 18}}
			r.mustOK(r.run(xs), xs)
			if !bytes.Equal(mem1[100:118], []byte("into the new arena")) || string(r.mem[64:82]) != "into the new arena" {
				t.Fatalf("round trip through the new arena: %q here, %q there", r.mem[64:82], mem1[100:118])
			}

			// Transfers to the arena outstanding while it is unmapped.
			var op backend.Op
			tags := 0
			for k := 0; k < 32; k++ {
				x := xfer{put: k%2 == 0, peer: p, local: uint64(k) << 16, remote: w0 + uint64(k)<<16, n: 64 << 10}
				op = backend.Op{}
				if err := r.prepare(x, &op); err != nil {
					t.Fatal(err)
				}
				if !r.post(uint64(k), &op, k == 31) {
					t.Fatal("Forward refused")
				}
				tags++
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := a.b.UnmapArena(1); err != nil {
					t.Error(err)
				}
				unix.Munmap(mem1) // gone: a write from the peer now would fault
			}()
			r.b.Flush()
			got := map[uint64]backend.Completion{}
			r.wait(got, tags)
			wg.Wait()
			refused := 0
			for tag, c := range got {
				if c.Status != backend.StatusOK {
					if err := r.b.Err(c.Status); !errors.Is(err, ErrRemoteBounds) {
						t.Fatalf("transfer %d racing the removal: %v, want success or ErrRemoteBounds", tag, err)
					}
					refused++
				}
			}
			t.Logf("%d transfers raced the removal, %d refused", tags, refused)
			if info := r.b.Peers()[p]; !info.Ready || info.Size != w0 {
				// The window ends with arena 0 again.
				t.Fatalf("peer after the removal: %+v", info)
			}
			op = backend.Op{}
			if err := r.prepare(xfer{put: true, peer: p, remote: off1, n: 8}, &op); !errors.Is(err, ErrRemoteBounds) {
				t.Fatalf("Prepare into the removed arena: %v, want ErrRemoteBounds", err)
			}
			// Arena 0 still works; a new arena goes after the hole.
			xs = []xfer{{put: true, peer: p, local: 0, remote: 0, n: 18}}
			r.mustOK(r.run(xs), xs)
			mem2 := mmap()
			if _, err := a.b.mapMem(1, mem2, false); err != nil {
				t.Fatal(err)
			}
			off2, _ := a.b.Offset(uintptr(unsafePointer(mem2)))
			if off2 != w0+size {
				t.Fatalf("the next arena at %d, want %d (after the hole)", off2, w0+size)
			}
			xs = []xfer{{put: true, peer: p, local: 0, remote: off2 + 8, n: 18}}
			r.mustOK(r.run(xs), xs)
			if !bytes.Equal(mem2[8:26], []byte("into the new arena")) {
				t.Fatalf("the arena mapped after the hole: %q", mem2[8:26])
			}
			op = backend.Op{}
			if err := r.prepare(xfer{put: true, peer: p, remote: off1, n: 8}, &op); !errors.Is(err, ErrRemoteBounds) {
				t.Fatalf("Prepare into the hole: %v, want ErrRemoteBounds", err)
			}
			// Staged before the removal, posted after it: refused.
			for k := 0; k < 8; k++ {
				op = backend.Op{}
				if err := r.prepare(xfer{put: true, peer: p, local: 0, remote: off2 + uint64(k)<<10, n: 1 << 10}, &op); err != nil {
					t.Fatal(err)
				}
				if !r.post(uint64(100+k), &op, k == 7) {
					t.Fatal("Forward refused")
				}
			}
			if err := a.b.UnmapArena(1); err != nil {
				t.Fatal(err)
			}
			unix.Munmap(mem2)
			r.b.Flush()
			got = map[uint64]backend.Completion{}
			r.wait(got, 8)
			for tag, c := range got {
				if err := r.b.Err(c.Status); c.Status == backend.StatusOK || !errors.Is(err, ErrRemoteBounds) {
					t.Fatalf("transfer %d staged before the removal, posted after: status %d (%v), want ErrRemoteBounds", tag, c.Status, err)
				}
			}
		})
	}
}

// TestEngineGrowth: an engine whose pool grows (PoolMax) while a peer is
// connected: the block that made it grow is in the peer's window when
// Alloc returns, the peer's put lands in it, and when the idle arena is
// given back (PoolIdle) the peer's window loses it while the peer stays
// connected.
func TestEngineGrowth(t *testing.T) {
	for _, tls := range transports {
		t.Run(tls, func(t *testing.T) {
			reng, rb := newEngineConfig(t, tls, Config{Listen: listenAddr(tls)},
				engine.Config{QueueDepth: 64, PoolMax: 64 << 20, PoolIdle: 50 * time.Millisecond})
			eng, sb := newEngine(t, tls, 64)
			p := connect(t, sb, rb.Addr())
			w0 := sb.Peers()[p].Size
			first, err := reng.Alloc(16 << 20) // the whole first arena
			if err != nil {
				t.Fatal(err)
			}
			defer reng.Free(first)
			grown, err := reng.Alloc(1 << 20) // a new arena
			if err != nil {
				t.Fatal(err)
			}
			off, ok := rb.Offset(grown.Addr())
			if !ok || off < w0 {
				t.Fatalf("the new block at %d, %v (window was %d bytes)", off, ok, w0)
			}
			if got := sb.Peers()[p].Size; got <= off {
				t.Fatalf("peer's window %d bytes when Alloc returned, the new block at %d", got, off)
			}
			src, _ := eng.Alloc(4096)
			copy(src.Bytes(), "into the grown pool")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			id, err := eng.Submit(engine.Transfer{Src: engine.Host(src), Dst: engine.Remote(p, off+64), Len: 19})
			if err == nil {
				err = eng.Wait(ctx, id)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(grown.Bytes()[64:83]); got != "into the grown pool" {
				t.Fatalf("the grown arena holds %q", got)
			}
			reng.Free(grown)
			for sb.Peers()[p].Size > off { // the idle arena goes back
				if ctx.Err() != nil {
					t.Fatalf("the idle arena was not given back: peer's window still %d bytes", sb.Peers()[p].Size)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if _, err := eng.Submit(engine.Transfer{Src: engine.Host(src), Dst: engine.Remote(p, off+64), Len: 19}); !errors.Is(err, ErrRemoteBounds) {
				t.Fatalf("a put into the arena given back: %v, want ErrRemoteBounds", err)
			}
			if info := sb.Peers()[p]; !info.Ready {
				t.Fatalf("peer after the arena went back: %+v", info)
			}
		})
	}
}
