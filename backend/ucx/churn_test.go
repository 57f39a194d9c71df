package ucx

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// TestPeerChurnReleases: a peer killed (SIGKILL) and another connected,
// again and again, as a service whose peers restart: what the backend
// keeps per gone peer — C heap (glibc's count of bytes in use: the C
// layer's and UCX's mallocs) and Go heap after a collection — stays under
// churnPerPeer bytes a peer over churnCycles cycles after a warm-up (the
// C heap not over ud_verbs, below): a gone peer keeps its index and its
// failure, not its window, its remote keys or the requests that closed it.
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
			if gp > churnPerPeer {
				t.Errorf("a gone peer keeps %d B of Go heap, want at most %d", gp, churnPerPeer)
			}
			// Over ud_verbs the C heap is UCX's too: UCX keeps a closed
			// UD endpoint for UCX_UD_LINGER_TIMEOUT (300 s by default) to
			// answer its peer's retransmissions, and with rc_verbs,ud_verbs
			// the C heap measured 2660 B a gone peer over these cycles. The
			// C bound holds where UCX frees an endpoint when it closes.
			if udTLS() {
				t.Logf("C heap not bounded over ud_verbs (UCX_TLS=%s): UCX lingers closed UD endpoints", os.Getenv(tlsEnv))
			} else if cp > churnPerPeer {
				t.Errorf("a gone peer keeps %d B of C heap, want at most %d", cp, churnPerPeer)
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

// udTLS says that HCOMM_UCX_TLS names a UD transport.
func udTLS() bool {
	for _, a := range strings.Split(os.Getenv(tlsEnv), ",") {
		if strings.HasPrefix(a, "ud") {
			return true
		}
	}
	return false
}
