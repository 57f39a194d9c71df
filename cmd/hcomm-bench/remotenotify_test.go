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
