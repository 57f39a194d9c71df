package ucx

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// laneRe matches a transport lane of ucp_ep_print_info ("lane[1]:
// 1:tcp/lo.0 md[0] -> md[0]/tcp/sysdev[255] rma_bw#0 am ..."): the
// transport, the device, what the lane carries.
var laneRe = regexp.MustCompile(`lane\[\d+\]:\s+\d+:([a-z0-9_]+)/(\S+)\s.*->\s\S+\s(.*)$`)

// rmaRe matches a lane that carries RMA itself (not only rma_bw).
var rmaRe = regexp.MustCompile(`\brma#`)

// lanes parses EndpointInfo into (transport, device, uses) per lane.
func lanes(info string) [][3]string {
	var out [][3]string
	for _, l := range strings.Split(info, "\n") {
		if m := laneRe.FindStringSubmatch(l); m != nil {
			out = append(out, [3]string{m[1], m[2], m[3]})
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
		t.Logf("UCX chose %s on %s for: %s (UCX_TLS=%s, UCX_NET_DEVICES=%q)", l[0], l[1], l[2], want, os.Getenv("UCX_NET_DEVICES"))
		ok := false
		for _, a := range asked {
			// UCX_TLS names a transport or a prefix alias (rc_v,
			// rc, ud, dc, rc_x…): rc_verbs matches rc_v and rc.
			a = strings.TrimSuffix(strings.TrimPrefix(a, "^"), "_v")
			if strings.HasPrefix(l[0], a) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("lane over %s/%s (%s): not among UCX_TLS=%s — UCX fell back", l[0], l[1], l[2], want)
		}
		if rmaRe.MatchString(l[2]) {
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
}
