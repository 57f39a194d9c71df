package ucx

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// netPair is a network namespace this test made and a veth pair joining it
// to the test's own namespace, with a /30 of 198.18.0.0/15 (RFC 2544's
// range for testing network devices, routed nowhere) that exists only on
// that pair.
type netPair struct {
	ns         string // the peer's namespace (ip netns)
	here, peer string // the veth ends: in this namespace, in ns
	hereIP     string // this end's address
	peerIP     string // the peer end's address
}

// ipCmd runs ip with args and fails the test with its output.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newNetPair creates the namespace and the veth pair, and removes both
// when the test ends, whatever its outcome. Names and the /30 derive from
// the process id, so that concurrent runs do not collide; leftovers of an
// earlier run with the same id (killed before its cleanup) are removed
// first.
func newNetPair(t *testing.T) *netPair {
	t.Helper()
	testutil.RequirePrivileged(t, "create a network namespace and a veth pair (ip netns, ip link)")
	if _, err := exec.LookPath("ip"); err != nil {
		testutil.MissingPrivilege(t, "iproute2's ip command: "+err.Error())
	}
	pid := os.Getpid()
	n := &netPair{
		ns:   fmt.Sprintf("hcucx%d", pid),
		here: fmt.Sprintf("hcu%da", pid%10_000_000),
		peer: fmt.Sprintf("hcu%db", pid%10_000_000),
	}
	// 198.18.0.0/15 has 2^15 /30s: hosts .1 and .2 of one of them.
	sub := uint32(198)<<24 | 18<<16 | uint32(pid%(1<<15))<<2
	ip := func(a uint32) string { return fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&255, a>>8&255, a&255) }
	n.hereIP, n.peerIP = ip(sub+1), ip(sub+2)
	exec.Command("ip", "link", "del", n.here).Run()
	exec.Command("ip", "netns", "del", n.ns).Run()
	t.Cleanup(func() {
		// Deleting one end deletes the pair; the namespace goes after
		// its last process (the peers are waited for by StartPeer's
		// cleanups, which run before this one: registered later).
		for _, c := range [][]string{{"link", "del", n.here}, {"netns", "del", n.ns}} {
			if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find") {
				t.Errorf("cleanup: ip %s: %v: %s", strings.Join(c, " "), err, out)
			}
		}
		if _, err := os.Stat("/sys/class/net/" + n.here); err == nil {
			t.Errorf("cleanup: link %s still exists", n.here)
		}
		if _, err := os.Stat("/run/netns/" + n.ns); err == nil {
			t.Errorf("cleanup: namespace %s still exists", n.ns)
		}
	})
	if out, err := exec.Command("ip", "netns", "add", n.ns).CombinedOutput(); err != nil {
		// Root without CAP_SYS_ADMIN/CAP_NET_ADMIN (a container): a
		// missing privilege, not a failure of the code under test.
		testutil.MissingPrivilege(t, fmt.Sprintf("ip netns add: %v: %s", err, out))
	}
	ipCmd(t, "link", "add", n.here, "type", "veth", "peer", "name", n.peer, "netns", n.ns)
	ipCmd(t, "addr", "add", n.hereIP+"/30", "dev", n.here)
	ipCmd(t, "link", "set", n.here, "up")
	ipCmd(t, "-n", n.ns, "addr", "add", n.peerIP+"/30", "dev", n.peer)
	ipCmd(t, "-n", n.ns, "link", "set", n.peer, "up")
	ipCmd(t, "-n", n.ns, "link", "set", "lo", "up")
	return n
}

// bytes is how many bytes the veth end in this namespace sent and received.
func (n *netPair) bytes(t *testing.T) (tx, rx uint64) {
	t.Helper()
	read := func(name string) uint64 {
		b, err := os.ReadFile("/sys/class/net/" + n.here + "/statistics/" + name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return read("tx_bytes"), read("rx_bytes")
}

// startPeer starts a tcp peer process inside the namespace, listening on
// its end of the pair, its UCX confined to that end (UCX_NET_DEVICES).
func (n *netPair) startPeer(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.ns, self, "-test.run=^$") // ip execs the binary: kill -9 reaches it
	cmd.Env = append(os.Environ(), peerEnv+"=1", "UCX_TLS=tcp", "HCOMM_UCX_SHM=false",
		"UCX_NET_DEVICES="+n.peer, peerListenEnv+"="+n.peerIP+":0", "UCX_LOG_FILE=stderr") // as startPeer
	addr := testutil.StartPeer(t, cmd, testutil.Peer{Start: 20 * time.Second, Stop: 10 * time.Second})
	if !strings.HasPrefix(addr, n.peerIP+":") {
		t.Fatalf("peer in %s listens on %s, want %s", n.ns, addr, n.peerIP)
	}
	return addr, cmd
}

// TestNetNamespace: two network stacks on one machine. The peer runs in a
// network namespace the test creates, reached over a veth pair whose /30
// exists nowhere else; both sides' UCX use only the pair's ends
// (UCX_NET_DEVICES). Round trips, then kill -9 of the peer mid-stream
// (every transfer once, those in flight failed), a new peer in the same
// namespace and a round trip to it — over tcp between the two stacks. The
// pair's counters show the bytes crossed it. The namespace and the links
// are removed at the end, also when the test fails.
func TestNetNamespace(t *testing.T) {
	if os.Getenv(tlsEnv) != "" {
		t.Skipf("%s is set: the namespace test runs over tcp, without it (make test as root)", tlsEnv)
	}
	n := newNetPair(t)
	t.Setenv("UCX_NET_DEVICES", n.here)
	r := newRig(t, "tcp", 64)
	addr, _ := n.startPeer(t)
	p := connect(t, r.b, addr)
	if info := r.b.EndpointInfo(p); !strings.Contains(info, n.here) {
		t.Fatalf("endpoint to the peer does not run over %s:\n%s", n.here, info)
	}
	tx0, rx0 := n.bytes(t)
	// 16 puts of 256 KiB and the gets back, byte for byte.
	const sz = 256 << 10
	var puts, gets []xfer
	for i := uint64(0); i < 16; i++ {
		for j := uint64(0); j < sz; j++ {
			r.mem[i*sz+j] = byte(i*131 + j*7)
		}
		puts = append(puts, xfer{put: true, peer: p, local: i * sz, remote: i * sz, n: sz})
		gets = append(gets, xfer{peer: p, local: 16*sz + i*sz, remote: i * sz, n: sz})
	}
	r.mustOK(r.run(puts), puts)
	r.mustOK(r.run(gets), gets)
	for i := uint64(0); i < 16*sz; i++ {
		if r.mem[16*sz+i] != r.mem[i] {
			t.Fatalf("byte %d came back %#x, want %#x", i, r.mem[16*sz+i], r.mem[i])
		}
	}
	tx, rx := n.bytes(t)
	if tx-tx0 < 16*sz || rx-rx0 < 16*sz {
		t.Fatalf("%s moved %d bytes out and %d in for 4 MiB each way: the transfers took another path", n.here, tx-tx0, rx-rx0)
	}
	t.Logf("%s: %d bytes out, %d in for 16 × 256 KiB each way", n.here, tx-tx0, rx-rx0)
	r.b.Disconnect(p)
	peerKilled(t, r, func() (string, *exec.Cmd) { return n.startPeer(t) })
}
