package main

import (
	"context"
	"testing"
	"time"
)

// TestNotifyLatOnce runs the notification rows' ping-pong with a notify
// peer process, both ways, over tcp and shared memory: every round's hop
// arrives (notified: the round's number in the notification; put+flag: in
// the flag), and the figures are positive.
func TestNotifyLatOnce(t *testing.T) {
	for _, tr := range remoteTransportsFor("") {
		if tr.name == vethTLS { // no notification rows over the veth pair
			continue
		}
		for _, notified := range []bool{true, false} {
			name := tr.name + "/put+flag"
			if notified {
				name = tr.name + "/notified"
			}
			t.Run(name, func(t *testing.T) {
				t.Setenv("UCX_TLS", tr.engineTLS)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				v, vt, err := engineNotifyLat(ctx, tr.engineTLS, tr.name == "shm", notified, 2*notifySlots+5)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%.1f µs a hop (typical %.1f)", v, vt)
				if v <= 0 || vt <= 0 {
					t.Errorf("figures out of range: %v, %v", v, vt)
				}
			})
		}
	}
}

// The notification rows become entries of their own, against ucx_perftest
// only (no socket column), beside the 8 B latency row's names, which the
// goals use.
func TestNotifyEntries(t *testing.T) {
	rows := []*remoteRow{
		{tls: "tcp", op: "put latency", size: 8, batch: 1, unit: "µs", eng: []float64{20}, engT: []float64{18}, pt: []float64{15}, ptT: []float64{14}, sock: []float64{9}, sockT: []float64{8}},
		{tls: "tcp", op: "notified put", size: notifySize, batch: 1, unit: "µs", noSock: true, eng: []float64{400}, engT: []float64{380}, pt: []float64{60}, ptT: []float64{55}},
		{tls: "tcp", op: "put+flag", size: notifySize, batch: 1, unit: "µs", noSock: true, eng: []float64{900}, engT: []float64{850}, pt: []float64{60}, ptT: []float64{55}},
	}
	got := map[string]float64{}
	for _, e := range remoteEntries(rows) {
		if e.Ratio == nil {
			t.Errorf("%s vs %s (%s): no ratio (%s)", e.Variant, e.BaselineVariant, e.Metric, e.Note)
			continue
		}
		got[e.Variant+" vs "+e.BaselineVariant+" "+e.Metric] = *e.Ratio
	}
	want := map[string]float64{
		"tcp/put-latency/8/engine vs tcp/put-latency/8/ucx_perftest latency":                                   20.0 / 15,
		"tcp/put-latency/8/engine vs tcp/put-latency/8/tcp-socket latency":                                     20.0 / 9,
		"tcp/put-latency/8/engine vs tcp/put-latency/8/ucx_perftest latency_typical":                           18.0 / 14,
		"tcp/put-latency/8/engine vs tcp/put-latency/8/tcp-socket latency_typical":                             18.0 / 8,
		"tcp/notified-put-latency/65536/engine vs tcp/notified-put-latency/65536/ucx_perftest latency":         400.0 / 60,
		"tcp/notified-put-latency/65536/engine vs tcp/notified-put-latency/65536/ucx_perftest latency_typical": 380.0 / 55,
		"tcp/put+flag-latency/65536/engine vs tcp/put+flag-latency/65536/ucx_perftest latency":                 900.0 / 60,
		"tcp/put+flag-latency/65536/engine vs tcp/put+flag-latency/65536/ucx_perftest latency_typical":         850.0 / 55,
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: %v (present %v), want %v", k, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d entries, want %d: %v", len(got), len(want), got)
	}
}
