package ucx

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// TestPeerChurnReleases: a peer killed (SIGKILL) and another connected,
// again and again, as a service whose peers restart: what the backend
// keeps per gone peer — C heap (glibc's count of bytes in use: the C
// layer's and UCX's mallocs) and Go heap after a collection — stays under
// churnPerPeer bytes a peer over churnCycles cycles after a warm-up: a
// gone peer keeps its index and its failure, not its window, its remote
// keys or the requests that closed it.
func TestPeerChurnReleases(t *testing.T) {
	for _, tls := range transports {
		t.Run(tls, func(t *testing.T) {
			r := newRig(t, tls, 64)
			cycle := func() {
				pp := launchPeer(t, tls)
				p := connect(t, r.b, pp.Addr[0])
				// One get: the peer's key in use, RMA lanes up.
				xs := []xfer{{peer: p, local: 0, remote: 0, n: 4096}}
				r.mustOK(r.run(xs), xs)
				pp.Cmd.Process.Kill()
				pp.Cmd.Wait()
				for deadline := time.Now().Add(30 * time.Second); r.b.Peers()[p].Failed == nil; {
					if time.Now().After(deadline) {
						t.Fatalf("peer %d killed, not seen failed in 30 s", p)
					}
					time.Sleep(time.Millisecond)
				}
			}
			heaps := func() (c, g uint64) {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				r.b.mu.Lock()
				c = mallocInUse()
				r.b.mu.Unlock()
				return c, ms.HeapAlloc
			}
			for range churnWarmup {
				cycle()
			}
			c0, g0 := heaps()
			for range churnCycles {
				cycle()
			}
			c1, g1 := heaps()
			cp, gp := (int64(c1)-int64(c0))/churnCycles, (int64(g1)-int64(g0))/churnCycles
			r.b.mu.Lock()
			reaped, pending := r.b.be.nreaped, r.b.be.nreap
			r.b.mu.Unlock()
			t.Logf("%d peers killed after %d: C heap %+d B a peer, Go heap %+d B a peer; close and hello requests freed %d, peers with some pending %d",
				churnCycles, churnWarmup, cp, gp, reaped, pending)
			if cp > churnPerPeer || gp > churnPerPeer {
				t.Errorf("a gone peer keeps %d B of C heap and %d B of Go heap, want at most %d each", cp, gp, churnPerPeer)
			}
		})
	}
}

const (
	churnWarmup  = 10
	churnCycles  = 40
	churnPerPeer = 1024
)

// launchPeer starts a peer process as startPeer does, without a cleanup
// that keeps it (and its buffers) until the test ends: the caller kills it.
func launchPeer(t *testing.T, tls string) *testutil.PeerProc {
	t.Helper()
	env, shm := ucxTLS(tls)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"=1", "UCX_TLS="+env, fmt.Sprintf("HCOMM_UCX_SHM=%t", shm),
		peerListenEnv+"="+listenAddr(tls), "UCX_LOG_FILE=stderr")
	pp, err := testutil.LaunchPeer(cmd, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pp.Output())
	return pp
}
