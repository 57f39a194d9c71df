package ucx

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// laneRe matches a transport lane of ucp_ep_print_info ("lane[1]:
// 1:tcp/lo.0 md[0] -> md[0]/tcp/sysdev[255] rma_bw#0 am ..."): the lane's
// number, transport, device, what the lane carries. UCX 1.13 does not
// name a lane's plain RMA use there: rmaLaneRe's lines do.
var laneRe = regexp.MustCompile(`lane\[(\d+)\]:\s+\d+:([a-z0-9_]+)/(\S+)\s.*->\s\S+\s(.*)$`)

// rmaLaneRe matches the protocol line of an RMA lane ("put[1]: 0..<short>..
// 81..<bcopy>..16384..<zcopy>..(inf)"): the lanes puts are posted on.
var rmaLaneRe = regexp.MustCompile(`\b(put|get)\[(\d+)\]:`)

// lanes parses EndpointInfo into (lane, transport, device, uses) per lane;
// "rma" is appended to the uses of a lane that carries puts or gets.
func lanes(info string) [][4]string {
	var out [][4]string
	rma := map[string]bool{}
	for _, l := range strings.Split(info, "\n") {
		if m := rmaLaneRe.FindStringSubmatch(l); m != nil {
			rma[m[2]] = true
		}
	}
	for _, l := range strings.Split(info, "\n") {
		if m := laneRe.FindStringSubmatch(l); m != nil {
			uses := m[4]
			if rma[m[1]] {
				uses += " rma"
			}
			out = append(out, [4]string{m[1], m[2], m[3], uses})
		}
	}
	return out
}

// TestTransport: under HCOMM_UCX_TLS (the VM's soft-RoCE run sets
// rc_verbs,ud_verbs and UCX_NET_DEVICES=rxe0:1) the endpoint to a peer
// carries its RMA and active messages over the transports asked for —
// logged — and the test FAILS when UCX fell back to another (tcp, shared
// memory) without saying so. A round trip then moves bytes over it.
// Without HCOMM_UCX_TLS it checks the same for UCX_TLS=tcp.
func TestTransport(t *testing.T) {
	want := os.Getenv(tlsEnv)
	tls := "env"
	if want == "" {
		want, tls = "tcp", "tcp"
	}
	addr, _ := startPeer(t, tls)
	r := newRig(t, tls, 8)
	p := connect(t, r.b, addr)
	info := r.b.EndpointInfo(p)
	ls := lanes(info)
	if len(ls) == 0 {
		t.Fatalf("no transport lane in the endpoint's description:\n%s", info)
	}
	asked := strings.Split(want, ",")
	rma := 0
	for _, l := range ls {
		t.Logf("UCX chose %s on %s for lane %s: %s (UCX_TLS=%s, UCX_NET_DEVICES=%q)", l[1], l[2], l[0], l[3], want, os.Getenv("UCX_NET_DEVICES"))
		ok := false
		for _, a := range asked {
			// UCX_TLS names a transport or a prefix alias (rc_v,
			// rc, ud, dc, rc_x…): rc_verbs matches rc_v and rc.
			a = strings.TrimSuffix(strings.TrimPrefix(a, "^"), "_v")
			if strings.HasPrefix(l[1], a) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("lane over %s/%s (%s): not among UCX_TLS=%s — UCX fell back", l[1], l[2], l[3], want)
		}
		if strings.HasSuffix(l[3], " rma") {
			rma++
		}
	}
	// Over tcp UCX has no RMA lane (puts are software RMA over the
	// rma_bw lanes, docs/remote.md); over RDMA a lane without one would
	// mean the same emulation.
	if !strings.Contains(want, "tcp") && rma == 0 {
		t.Errorf("no RMA lane: puts and gets would be software RMA (active messages)\n%s", info)
	}
	copy(r.mem, "over the transport asked for")
	xs := []xfer{{put: true, peer: p, local: 0, remote: 4096, n: 28}, {peer: p, local: 64, remote: 4096, n: 28}}
	r.mustOK(r.run(xs[:1]), xs[:1])
	r.mustOK(r.run(xs[1:]), xs[1:])
	if string(r.mem[64:92]) != "over the transport asked for" {
		t.Fatalf("round trip: %q", r.mem[64:92])
	}
	// Over an RDMA device the bytes are in its packet counters: 1 MiB put
	// and got back moves at least 2 MiB in packets of the path MTU (rxe:
	// sent_pkts counts every packet it sent, loopback included).
	if tls != "env" {
		return
	}
	ctr, _ := filepath.Glob("/sys/class/infiniband/*/ports/*/hw_counters/sent_pkts")
	if len(ctr) == 0 {
		t.Logf("no RDMA device counters (/sys/class/infiniband/*/ports/*/hw_counters): packets not counted")
		return
	}
	sent := func() (n uint64) {
		for _, c := range ctr {
			b, err := os.ReadFile(c)
			if err != nil {
				t.Fatal(err)
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			n += v
		}
		return n
	}
	const mib = 1 << 20
	for i := range r.mem[:mib] {
		r.mem[i] = byte(i*7 + 3)
	}
	before := sent()
	xs = []xfer{{put: true, peer: p, local: 0, remote: mib, n: mib}}
	r.mustOK(r.run(xs), xs)
	xs = []xfer{{peer: p, local: 2 * mib, remote: mib, n: mib}}
	r.mustOK(r.run(xs), xs)
	d := sent() - before
	if !bytes.Equal(r.mem[:mib], r.mem[2*mib:3*mib]) {
		t.Fatal("1 MiB round trip: the bytes differ")
	}
	t.Logf("1 MiB put and get: %d packets sent by %s", d, strings.Join(ctr, ", "))
	if d < 2*mib/4096 {
		t.Fatalf("1 MiB put and get sent %d packets over the RDMA devices: the data did not cross them", d)
	}
}
