package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// TestVethRun: the tcp_veth transport's set-up, one short measurement and
// the teardown, for real. The namespace and the pair exist while it runs
// and are gone after close; the passive peer runs in the namespace and
// listens on the pair's address there; the engine's endpoint runs over this
// end of the pair, and the bytes of its puts leave through it (the
// counters); after close neither the link nor the namespace is left.
func TestVethRun(t *testing.T) {
	testutil.RequirePrivileged(t, "create a network namespace and a veth pair")
	if err := vethStatus(); err != nil {
		testutil.MissingPrivilege(t, err.Error())
	}
	o := &options{quick: true, reps: 5}
	v, err := setupVeth(o)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			v.close()
		}
	}()
	if out, err := v.inNS("ip", "-o", "addr", "show", "dev", v.peer).CombinedOutput(); err != nil || !strings.Contains(string(out), v.peerIP+"/30") {
		t.Fatalf("ip addr in %s: %v: %s", v.ns, err, out)
	}
	remoteNet = v
	defer func() { remoteNet = nil }()
	t.Setenv("UCX_NET_DEVICES", v.here)
	t.Setenv("UCX_TLS", "tcp")
	rr := &remoteRun{o: o, name: vethTLS, engineTLS: "tcp", perftestTLS: "tcp"}
	if err := rr.open(); err != nil { // checks the endpoint's device
		rr.close()
		t.Fatal(err)
	}
	if !strings.HasPrefix(rr.peer.ucxAddr, v.peerIP+":") || !strings.HasPrefix(rr.peer.tcpAddr, v.peerIP+":") {
		rr.close()
		t.Fatalf("peer listens on %s and %s, want %s", rr.peer.ucxAddr, rr.peer.tcpAddr, v.peerIP)
	}
	r := &remoteRow{tls: vethTLS, op: "put", size: 64 << 10, batch: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rr.peer.cmd("spin"); err != nil {
		rr.close()
		t.Fatal(err)
	}
	tx0, err := rr.tx()
	if err != nil {
		rr.close()
		t.Fatal(err)
	}
	const n = 64
	mibs, _, err := engineBW(ctx, rr.eng, rr.pidx, rr.blocks[r.size], true, r.size, 1, n)
	if err == nil {
		err = rr.crossed("the engine", r, tx0, n)
	}
	rr.close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d × 64 KiB over %s: %.0f MiB/s", n, v.describe(), mibs)
	if err := v.close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat("/sys/class/net/" + v.here); err == nil {
		t.Errorf("link %s still exists after close", v.here)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), v.ns) {
		t.Errorf("namespace %s still exists after close", v.ns)
	}
}

// The tcp_veth goal is judged on its own rows, and rows skipped for want of
// privilege say why instead of a figure.
func TestVethGoal(t *testing.T) {
	spec := func() goalSpec {
		for _, g := range goalTable() {
			if g.ID == "remote."+vethTLS+".put_bandwidth_vs_ucx_perftest" {
				return g
			}
		}
		t.Fatal("no tcp_veth goal")
		return goalSpec{}
	}()
	for _, g := range goalTable() {
		if strings.HasPrefix(g.ID, "remote."+vethTLS+".") && g.ID != spec.ID {
			t.Errorf("goal %s: tcp_veth measures put bandwidth only", g.ID)
		}
	}
	rows := []*remoteRow{
		{tls: vethTLS, op: "put", size: 64 << 10, batch: 1, unit: "MiB/s", eng: []float64{900, 1000}, pt: []float64{1000, 1000}, sock: []float64{1, 1}},
		{tls: vethTLS, op: "put", size: 1 << 20, batch: 64, unit: "MiB/s", eng: []float64{950, 950}, pt: []float64{1000, 1000}, sock: []float64{1, 1}},
		{tls: "tcp", op: "put", size: 64 << 10, batch: 1, unit: "MiB/s", eng: []float64{100, 100}, pt: []float64{1000, 1000}, sock: []float64{1, 1}},
	}
	g := judge(spec, entries(remoteEntries(rows)))
	if g.Value == nil || *g.Value != 0.95 || g.Verdict != "met" {
		t.Errorf("measured: %+v, want met at 0.95 (the worst tcp_veth row, loopback's ignored)", g)
	}
	skip := "needs root (ip netns add, ip link add … type veth)"
	rows = []*remoteRow{{tls: vethTLS, op: "put", size: 64 << 10, batch: 1, unit: "MiB/s", skip: skip}}
	g = judge(spec, entries(remoteEntries(rows)))
	if g.Value != nil || g.Verdict != "not measured" || !strings.Contains(g.Detail, skip) {
		t.Errorf("skipped: %+v, want not measured with the reason", g)
	}
}
