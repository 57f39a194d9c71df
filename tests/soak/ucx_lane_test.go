//go:build cgo

package soak_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
)

// The UCX lane: one engine on the UCX backend (tcp) whose peer is another
// process — this test binary again, ucxPeerEnv set — that a controller
// kills (SIGKILL) at random moments and starts again; the engine connects
// to each new one (a new peer index). Two submitters put random bytes at
// random sizes and offsets into their own region of the peer's pool and
// get them back into cleared memory (CRC-32C). Checked: every callback once;
// every failure is ucx.ErrPeerGone on a peer that was killed (a transfer to
// a live peer never fails), every kill made its peer fail (the count of
// failed peers equals the count of kills), no UCX endpoint left but the
// live peer's, and the leak checks of TestSoak (goroutines, fds, mappings)
// once the engine is closed.

const ucxPeerEnv = "HCOMM_SOAK_UCX_PEER"

const (
	ucxRegion  = 1 << 20 // each submitter's region of the peer's pool
	ucxMaxSize = 64 << 10
	ucxSubs    = 2
	ucxPool    = ucxSubs * ucxRegion
)

func init() {
	if os.Getenv(ucxPeerEnv) == "1" {
		os.Exit(ucxPeer())
	}
	sideLanes = append(sideLanes, struct {
		kind string
		mk   func(t *testing.T, seed uint64) (sideLane, error)
	}{"ucx", newUCXLane})
}

// ucxTLS is UCX_TLS for the lane and its peers: the environment's, or tcp.
func ucxTLS() string {
	if v := os.Getenv("UCX_TLS"); v != "" {
		return v
	}
	return "tcp"
}

// ucxPeer is the peer process: a UCX backend with a listener and an engine
// whose pool is the window the lane's transfers reach. It prints its
// address and serves until its standard input closes (or it is killed).
func ucxPeer() int {
	b, err := ucx.New(ucx.Config{Listen: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ucx soak peer:", err)
		return 1
	}
	eng, err := engine.Open(engine.Config{Backend: b, PoolSize: ucxPool, Backings: []hugepage.Backing{hugepage.Backing4K}, Logger: quiet()})
	if err != nil {
		b.Close()
		fmt.Fprintln(os.Stderr, "ucx soak peer:", err)
		return 1
	}
	defer eng.Close()
	if err := testutil.Announce(os.Stdout, b.Addr()); err != nil {
		return 1
	}
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// ucxIncarnation is one peer process and the index the engine knows it by.
type ucxIncarnation struct {
	proc *testutil.PeerProc
	idx  uint32
	out  sync.WaitGroup // its output drained
}

type ucxLane struct {
	t    *testing.T
	seed uint64
	b    *ucx.Backend
	eng  *engine.Engine
	cur  atomic.Pointer[ucxIncarnation]

	mu       sync.Mutex
	killed   map[uint32]bool // peer indices killed
	kills    int
	failures []string

	transfers, verified, bytes, failed, refused atomic.Uint64
	// Callbacks: transfers submitted (staged), first callbacks, and
	// callbacks after a transfer's first (dups; dupPeer the first such
	// transfer's peer). Counted as they come: the lane keeps no record
	// per transfer, whose memory would grow with the run.
	staged, called, dups atomic.Uint64
	dupPeer              atomic.Int64
}

// ucxRec is one transfer's callback count.
type ucxRec struct {
	calls atomic.Int32
	peer  uint32
}

// checkCallbacks fails the lane for a transfer called back twice or never
// (under mu).
func (l *ucxLane) checkCallbacks() {
	if d := l.dups.Load(); d != 0 {
		l.failures = append(l.failures, fmt.Sprintf("%d callbacks after a transfer's first (the first to peer %d)", d, l.dupPeer.Load()))
	}
	if s, c := l.staged.Load(), l.called.Load(); s != c {
		l.failures = append(l.failures, fmt.Sprintf("%d transfers submitted, %d called back", s, c))
	}
}

func (l *ucxLane) failf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, fmt.Sprintf(format, args...))
	}
}

// newUCXLane runs before TestSoak's leak snapshots: one backend opened and
// closed leaves UCX's process-wide state (its async thread and the fds it
// keeps) in place, so that the snapshots count only the lane's own.
func newUCXLane(t *testing.T, seed uint64) (sideLane, error) {
	if os.Getenv("UCX_TLS") == "" {
		t.Setenv("UCX_TLS", ucxTLS())
	}
	b, err := ucx.New(ucx.Config{Logger: quiet()})
	if err != nil {
		return nil, fmt.Errorf("ucx: %w", err)
	}
	b.Close()
	return &ucxLane{t: t, seed: seed, killed: map[uint32]bool{}}, nil
}

func (l *ucxLane) name() string { return "ucx/" + ucxTLS() }

// start launches a peer process and connects to it.
func (l *ucxLane) start(ctx context.Context) (*ucxIncarnation, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ucxPeerEnv+"=1", "UCX_TLS="+ucxTLS())
	pp, err := testutil.LaunchPeer(cmd, 30*time.Second)
	if err != nil {
		return nil, err
	}
	in := &ucxIncarnation{proc: pp}
	in.out.Add(1)
	go func() {
		defer in.out.Done()
		io.Copy(io.Discard, pp.Output())
	}()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if in.idx, err = l.b.Connect(cctx, pp.Addr[0]); err != nil {
		l.kill(in)
		return nil, err
	}
	return in, nil
}

// kill kills a peer process and waits for it.
func (l *ucxLane) kill(in *ucxIncarnation) {
	in.proc.Cmd.Process.Kill()
	in.proc.Cmd.Wait()
	in.out.Wait()
}

func (l *ucxLane) run(end time.Time) {
	b, err := ucx.New(ucx.Config{Timeout: 10 * time.Second, Logger: quiet()})
	if err != nil {
		l.failf("ucx.New: %v", err)
		return
	}
	eng, err := engine.Open(engine.Config{Backend: b, PoolSize: 1 << 20, QueueDepth: 16, Backings: []hugepage.Backing{hugepage.Backing4K}, Logger: quiet()})
	if err != nil {
		b.Close()
		l.failf("engine.Open: %v", err)
		return
	}
	l.b, l.eng = b, eng
	ctx := context.Background()
	in, err := l.start(ctx)
	if err != nil {
		eng.Close()
		l.failf("first peer: %v", err)
		return
	}
	l.cur.Store(in)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for s := range ucxSubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.submitter(s, rand.New(rand.NewPCG(l.seed, uint64(s+1))), stop)
		}()
	}
	// The controller: each peer lives 200–1500 ms, then is killed and
	// another started.
	rng := rand.New(rand.NewPCG(l.seed, 0))
	for time.Now().Before(end) {
		life := time.Duration(200+rng.IntN(1300)) * time.Millisecond
		time.Sleep(min(life, time.Until(end)+time.Millisecond))
		if !time.Now().Before(end) {
			break
		}
		old := l.cur.Load()
		l.mu.Lock()
		l.killed[old.idx] = true
		l.kills++
		l.mu.Unlock()
		l.kill(old)
		next, err := l.start(ctx)
		if err != nil {
			l.failf("restart after kill %d: %v", l.kills, err)
			break
		}
		l.cur.Store(next)
	}
	close(stop)
	wg.Wait()
	if err := eng.Drain(ctx); err != nil {
		l.failf("drain: %v", err)
	}
	l.check()
	last := l.cur.Load()
	if err := eng.Close(); err != nil {
		l.failf("close: %v", err)
	}
	l.mu.Lock()
	l.checkCallbacks() // after Close: none came late
	l.mu.Unlock()
	if err := last.proc.Stop(10 * time.Second); err != nil {
		l.failf("last peer: %v", err)
	}
	last.out.Wait()
}

// check counts failed peers and endpoints (before Close).
func (l *ucxLane) check() {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A kill is seen when UCX notices the closed connection (at once over
	// tcp, in the progress goroutine): the last one may still be on its way.
	peers := l.b.Peers()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); peers = l.b.Peers() {
		seen := 0
		for _, p := range peers {
			if p.Failed != nil {
				seen++
			}
		}
		if seen >= l.kills {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	failedPeers := 0
	for _, p := range peers {
		switch {
		case p.Failed != nil && !l.killed[p.Index]:
			l.failures = append(l.failures, fmt.Sprintf("peer %d failed, never killed: %v", p.Index, p.Failed))
		case p.Failed == nil && l.killed[p.Index]:
			l.failures = append(l.failures, fmt.Sprintf("peer %d killed, not failed", p.Index))
		}
		if p.Failed != nil {
			failedPeers++
		}
	}
	if failedPeers != l.kills {
		l.failures = append(l.failures, fmt.Sprintf("%d kills, %d peers failed", l.kills, failedPeers))
	}
	// The live peer's control endpoint, nothing of the killed ones (their
	// closes complete in the progress goroutine: give them a moment).
	n := 0
	for try := 0; try < 500; try++ {
		if n = l.b.Endpoints(); n == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n != 1 {
		l.failures = append(l.failures, fmt.Sprintf("%d UCX endpoints held, want 1 (the live peer's) after %d kills", n, l.kills))
	}
}

// submitter puts random bytes into its region of the current peer's pool
// and gets them back, until stop.
func (l *ucxLane) submitter(s int, rng *rand.Rand, stop chan struct{}) {
	src, err := l.eng.Alloc(ucxMaxSize)
	if err != nil {
		l.failf("submitter %d: alloc: %v", s, err)
		return
	}
	defer func() { _ = l.eng.Free(src) }()
	dst, err := l.eng.Alloc(ucxMaxSize)
	if err != nil {
		l.failf("submitter %d: alloc: %v", s, err)
		return
	}
	defer func() { _ = l.eng.Free(dst) }()
	done := make(chan engine.Result, 1)
	cb := func(r *ucxRec) func(engine.Result) {
		return func(res engine.Result) {
			if r.calls.Add(1) == 1 {
				l.called.Add(1)
				done <- res
				return
			}
			if l.dups.Add(1) == 1 {
				l.dupPeer.Store(int64(r.peer))
			}
		}
	}
	// xfer runs one transfer to peer idx and waits for its callback.
	xfer := func(idx uint32, t engine.Transfer) error {
		r := &ucxRec{peer: idx}
		t.Callback = cb(r)
		l.transfers.Add(1)
		if _, err := l.eng.Submit(t); err != nil {
			l.refused.Add(1)
			return err
		}
		l.staged.Add(1)
		select {
		case res := <-done:
			if res.Err != nil {
				l.failed.Add(1)
			}
			return res.Err
		case <-time.After(time.Minute):
			return fmt.Errorf("no callback in a minute")
		}
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		in := l.cur.Load()
		n := 1 + rng.IntN(ucxMaxSize)
		off := uint64(s*ucxRegion + rng.IntN(ucxRegion-n+1))
		b := src.Bytes()[:n]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := crc32.Checksum(b, castagnoli)
		clear(dst.Bytes()[:n])
		err := xfer(in.idx, engine.Transfer{Src: engine.Host(src), Dst: engine.Remote(in.idx, off), Len: n})
		if err == nil {
			err = xfer(in.idx, engine.Transfer{Src: engine.Remote(in.idx, off), Dst: engine.Host(dst), Len: n})
		}
		if err != nil {
			l.mu.Lock()
			killed := l.killed[in.idx]
			l.mu.Unlock()
			// A transfer fails only once its peer was killed (the kill is
			// recorded before it happens), with ErrPeerGone.
			if !killed || !errors.Is(err, ucx.ErrPeerGone) {
				l.failf("submitter %d: %d bytes at %#x of peer %d (killed %v): %v", s, n, off, in.idx, killed, err)
			}
			if !killed {
				return
			}
			for l.cur.Load() == in { // until the controller connected the next
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
			continue
		}
		if got := crc32.Checksum(dst.Bytes()[:n], castagnoli); got != want {
			l.failf("submitter %d: %d bytes at %#x of peer %d: CRC %#x, put %#x", s, n, off, in.idx, got, want)
			return
		}
		l.verified.Add(1)
		l.bytes.Add(uint64(n))
	}
}

func (l *ucxLane) report() []string {
	l.t.Logf("%-20s engines %4d  transfers %8d  verified %8d (%s)  peers killed %4d  failed %5d  refused %5d",
		l.name(), 1, l.transfers.Load(), l.verified.Load(), mib(l.bytes.Load()), l.kills, l.failed.Load(), l.refused.Load())
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.failures))
	for i, f := range l.failures {
		out[i] = l.name() + ": " + f
	}
	return out
}

func (l *ucxLane) diag() string {
	l.mu.Lock()
	kills := l.kills
	l.mu.Unlock()
	peers := 0
	if b := l.b; b != nil {
		peers = len(b.Peers())
	}
	return fmt.Sprintf("%s: %d kills, %d peers listed, %d transfers", l.name(), kills, peers, l.transfers.Load())
}
