package ucx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/engine"
)

// notifyPayload is the byte j of notified put i (of all senders' puts).
func notifyPayload(i, j int) byte { return pattern(i*131+j) ^ byte(i>>3) }

// notifyStream submits n notified puts from g goroutines to peer p: put i
// writes size bytes at remote offset base+(i*size)%wrap, then a notification
// carrying i (4 bytes) follows it in the same batch. Each goroutine keeps
// up to depth batches in flight. Every transfer's callback is counted in
// calls (2i the put, 2i+1 the notification); the goroutines stop at the
// first error that errOK accepts (the peer is gone), any other is returned.
func notifyStream(ctx context.Context, eng *engine.Engine, p uint32, base, wrap uint64, size, g, n, depth int,
	calls []atomic.Int32, failed *atomic.Int64, errOK func(error) bool) (submitted atomic.Int64, err error) {
	var wg sync.WaitGroup
	var once sync.Once
	fail := func(e error) { once.Do(func() { err = e }) }
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			tokens := make(chan struct{}, depth)
			for range depth {
				tokens <- struct{}{}
			}
			cb := func(r engine.Result) {
				calls[r.User].Add(1)
				if r.Err != nil {
					failed.Add(1)
					if !errOK(r.Err) {
						fail(fmt.Errorf("transfer %d: %w", r.User, r.Err))
					}
				}
				if r.User%2 == 1 {
					tokens <- struct{}{} // never blocks: one token per batch taken
				}
			}
			data, msgs := make([]engine.Block, depth), make([]engine.Block, depth)
			for k := range depth {
				var e1, e2 error
				data[k], e1 = eng.Alloc(size)
				msgs[k], e2 = eng.Alloc(64)
				if e := errors.Join(e1, e2); e != nil {
					fail(e)
					return
				}
			}
			defer func() {
				for range depth { // every batch of this goroutine done
					<-tokens
				}
				for k := range depth {
					eng.Free(data[k])
					eng.Free(msgs[k])
				}
			}()
			var ids [2]engine.ID
			for i := w; i < n; i += g {
				select {
				case <-tokens:
				case <-ctx.Done():
					fail(ctx.Err())
					tokens <- struct{}{}
					return
				}
				// Notifications of one goroutine complete in order
				// (the peer acknowledges them in order): the slot's
				// previous batch is done.
				k := (i / g) % depth
				b := data[k].Bytes()
				for j := range b {
					b[j] = notifyPayload(i, j)
				}
				binary.LittleEndian.PutUint32(msgs[k].Bytes(), uint32(i))
				ts := []engine.Transfer{
					{Src: engine.Host(data[k]), Dst: engine.Remote(p, base+uint64(i*size)%wrap), Len: size, Callback: cb, User: uint64(2 * i)},
					{Src: engine.Host(msgs[k]), Dst: engine.Remote(p, Notify), Len: 4, Callback: cb, User: uint64(2*i + 1)},
				}
				if got, e := eng.SubmitBatchContext(ctx, ts, ids[:]); e != nil || got != 2 {
					tokens <- struct{}{} // the notification was not submitted: no callback returns it
					if e == nil || !errOK(e) {
						fail(fmt.Errorf("submit %d: %d of 2: %w", i, got, e))
					}
					return
				}
				submitted.Add(1)
			}
		}(w)
	}
	wg.Wait()
	return
}

// TestNotify: 10^5 notified puts (128 B each, to distinct offsets) from 8
// goroutines through one engine over tcp to a peer backend in this
// process. The peer's application takes each notification once, in order
// (its sequence numbers count up, and each goroutine's puts come in the
// order it submitted them), and finds the put's bytes in its pool when it
// is notified; every transfer on the sender completes once, successfully.
func TestNotify(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	const size, senders = 128, 8
	for _, tls := range transports {
		t.Run(tls, func(t *testing.T) {
			reng, rb := newEngineConfig(t, tls, Config{Listen: listenAddr(tls)}, engine.Config{QueueDepth: 64})
			eng, sb := newEngine(t, tls, 256)
			window, err := reng.Alloc(n * size)
			if err != nil {
				t.Fatal(err)
			}
			base, ok := rb.Offset(window.Addr())
			if !ok {
				t.Fatal("the receiver's block is in no exported arena")
			}
			p := connect(t, sb, rb.Addr())
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()

			checked := make(chan error, 1)
			go func() {
				seen := make([]bool, n)
				last := make([]int, senders)
				for w := range last {
					last[w] = w - senders
				}
				mem := window.Bytes()
				for k := 0; k < n; k++ {
					nt, err := rb.WaitNotification(ctx)
					if err != nil {
						checked <- fmt.Errorf("after %d notifications: %w", k, err)
						return
					}
					if nt.Seq != uint64(k) || len(nt.Msg()) != 4 {
						checked <- fmt.Errorf("notification %d: seq %d, %d bytes", k, nt.Seq, len(nt.Msg()))
						return
					}
					i := int(binary.LittleEndian.Uint32(nt.Msg()))
					if i >= n || seen[i] {
						checked <- fmt.Errorf("notification %d: put %d (seen before: %v)", k, i, i < n && seen[i])
						return
					}
					seen[i] = true
					if w := i % senders; i != last[w]+senders {
						checked <- fmt.Errorf("notification %d: put %d of goroutine %d after %d", k, i, w, last[w])
						return
					} else {
						last[w] = i
					}
					for j, c := range mem[i*size : (i+1)*size] {
						if c != notifyPayload(i, j) {
							checked <- fmt.Errorf("notified of put %d, but its byte %d is %#x, want %#x", i, j, c, notifyPayload(i, j))
							return
						}
					}
				}
				checked <- nil
			}()

			calls := make([]atomic.Int32, 2*n)
			var failed atomic.Int64
			start := time.Now()
			sub, err := notifyStream(ctx, eng, p, base, uint64(n*size), size, senders, n, 8, calls, &failed, func(error) bool { return false })
			if err != nil {
				t.Fatal(err)
			}
			if err := eng.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-checked; err != nil {
				t.Fatal(err)
			}
			el := time.Since(start)
			if sub.Load() != int64(n) || failed.Load() != 0 {
				t.Fatalf("submitted %d of %d, %d failed", sub.Load(), n, failed.Load())
			}
			for i := range calls {
				if c := calls[i].Load(); c != 1 {
					t.Fatalf("transfer %d: %d callbacks", i, c)
				}
			}
			select {
			case nt := <-rb.Notifications():
				t.Fatalf("a notification too many: %+v", nt)
			default:
			}
			t.Logf("%s: %d notified puts in %v", tls, n, el)
		})
	}
}

// TestNotifyPeerKilled: kill -9 of the receiving peer while 8 goroutines
// stream notified puts to it: every transfer's callback runs once, those
// caught in flight with ErrPeerGone (never another error), and some did
// fail — notifications the peer never acknowledged.
func TestNotifyPeerKilled(t *testing.T) {
	for _, tls := range transports {
		t.Run(tls, func(t *testing.T) {
			addr, cmd := startPeer(t, tls)
			eng, b := newEngine(t, tls, 256)
			p := connect(t, b, addr)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const n = 1 << 20 // never reached: the peer dies first
			calls := make([]atomic.Int32, 2*n)
			var failed atomic.Int64
			var done atomic.Int64
			go func() {
				for done.Load() == 0 {
					ok := 0
					for i := 1; i < 4000; i += 2 {
						if calls[i].Load() > 0 {
							ok++
						}
					}
					if ok >= 1000 {
						cmd.Process.Kill()
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			gone := func(err error) bool { return errors.Is(err, ErrPeerGone) }
			sub, err := notifyStream(ctx, eng, p, 0, peerArena, 1024, 8, n, 8, calls, &failed, gone)
			done.Store(1)
			if err != nil {
				t.Fatal(err)
			}
			if err := eng.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if sub.Load() >= n {
				t.Fatal("the peer was never killed")
			}
			notified, nfailed := 0, 0
			for i := range calls {
				c := calls[i].Load()
				if c > 1 {
					t.Fatalf("transfer %d: %d callbacks", i, c)
				}
				if i%2 == 1 && c == 1 {
					notified++
				}
			}
			nfailed = int(failed.Load())
			if nfailed == 0 {
				t.Fatal("no transfer failed after kill -9 mid-stream")
			}
			if !errors.Is(b.Peers()[p].Failed, ErrPeerGone) {
				t.Fatalf("peer not marked gone: %+v", b.Peers()[p])
			}
			t.Logf("%s: %d batches submitted, %d notifications completed, %d transfers failed", tls, sub.Load(), notified, nfailed)
		})
	}
}

// TestNotifyWakes: a notification that reaches this side while its worker
// is not armed — between the progress goroutine's last look at the worker
// and its arming of it before it sleeps — still wakes it. The receiver
// (CallerProgress: the test plays its progress goroutine) is armed and
// rested; a first notification raises the armed worker's event, which the
// next arm takes (the worker is then not armed); a second one is sent and
// given time to land; then the worker is armed as before a sleep: the arm
// must say that events wait, or leave an event fd readable — otherwise a
// sleeper sleeps on a notification that is already there until some later
// event. Over RDMA verbs on rxe (the soft-RoCE guest) neither happened
// before hc_arm looked at the workers once more after arming them:
// ibv_req_notify_cq signals only completions added after it.
func TestNotifyWakes(t *testing.T) {
	for _, tls := range transports {
		t.Run(tls, func(t *testing.T) {
			env, shm := ucxTLS(tls)
			t.Setenv("UCX_TLS", env)
			rb, err := New(Config{Listen: listenAddr(tls), CallerProgress: true, SharedMemory: shm})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rb.Close() })
			eng, sb := newEngine(t, tls, 16)
			// settling progresses the receiver until stop is called.
			settling := func() (stop func()) {
				quit, done := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(done)
					for {
						select {
						case <-quit:
							return
						default:
						}
						rb.settle()
						time.Sleep(time.Millisecond)
					}
				}()
				return func() { close(quit); <-done }
			}
			stop := settling() // the handshake needs the receiver's progress
			p := connect(t, sb, rb.Addr())
			deadline := time.Now().Add(20 * time.Second)
			for ps := rb.Peers(); len(ps) == 0 || !ps[0].Ready; ps = rb.Peers() {
				if time.Now().After(deadline) {
					t.Fatal("the receiver's peer never became ready")
				}
				time.Sleep(time.Millisecond)
			}
			stop()
			msgs, err := eng.Alloc(128)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// send sends notification k and leaves it time to land.
			send := func(k int) engine.ID {
				t.Helper()
				m := engine.HostAt(msgs, 8*(k%16))
				binary.LittleEndian.PutUint64(msgs.Bytes()[8*(k%16):], uint64(k))
				id, err := eng.Submit(engine.Transfer{Src: m, Dst: engine.Remote(p, Notify), Len: 8})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second) // it reaches the receiver, which does not look
				return id
			}
			// take progresses the receiver until notification k is
			// delivered and the sender has its acknowledgement.
			take := func(k int, id engine.ID) {
				t.Helper()
				stop := settling()
				defer stop()
				select {
				case n := <-rb.Notifications():
					if got := binary.LittleEndian.Uint64(n.Msg()); got != uint64(k) {
						t.Fatalf("notification %d carries %d, want %d", n.Seq, got, k)
					}
				case <-ctx.Done():
					t.Fatalf("notification %d never arrived", k)
				}
				if err := eng.Wait(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 3 {
				// Armed, nothing pending.
				for k := 0; ; k++ {
					rb.settle()
					busy, _, err := rb.armLook()
					if err != nil {
						t.Fatal(err)
					}
					if !busy {
						break
					}
					if k == 100 {
						t.Fatal("the receiver's worker reports events after 100 rounds of progress")
					}
				}
				// The first notification raises the armed worker's
				// event; the arm after it takes that event and does not
				// arm the worker.
				id := send(2 * i)
				take(2*i, id)
				if _, _, err := rb.armLook(); err != nil {
					t.Fatal(err)
				}
				rb.settle()
				id = send(2*i + 1)
				busy, ready, err := rb.armLook()
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("round %d: arm says events wait: %t; an event fd readable: %t", i, busy, ready)
				if !busy && !ready {
					t.Errorf("round %d: a notification that landed while the receiver's worker was not armed: the arm found no events and no event fd is readable — a progress goroutine would sleep on it", i)
				}
				take(2*i+1, id)
			}
		})
	}
}
