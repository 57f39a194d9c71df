package ucx

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestConnectWaits: Connect waits for the handshake's end — with the
// progress goroutine and with CallerProgress — and still returns when its
// context ends or the backend closes while the peer never answers (a
// CallerProgress listener nobody progresses), then connects to a peer
// that does.
func TestConnectWaits(t *testing.T) {
	for _, tls := range transports {
		for _, caller := range []bool{false, true} {
			name := tls + "/goroutine"
			if caller {
				name = tls + "/caller-progress"
			}
			t.Run(name, func(t *testing.T) {
				env, shm := ucxTLS(tls)
				t.Setenv("UCX_TLS", env)
				silent, err := New(Config{Listen: listenAddr(tls), SharedMemory: shm, CallerProgress: true})
				if err != nil {
					t.Fatal(err)
				}
				defer silent.Close()
				answering, err := New(Config{Listen: listenAddr(tls), SharedMemory: shm})
				if err != nil {
					t.Fatal(err)
				}
				defer answering.Close()
				b, err := New(Config{SharedMemory: shm, CallerProgress: caller})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()

				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				start := time.Now()
				_, err = b.Connect(ctx, silent.Addr())
				cancel()
				if !errors.Is(err, ErrConnect) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Connect to a peer that never answers: %v, want ErrConnect and the context's error", err)
				}
				if el := time.Since(start); el > 5*time.Second {
					t.Fatalf("Connect returned %v after its context's 200 ms deadline", el)
				}

				p := connect(t, b, answering.Addr())
				if info := b.Peers()[p]; !info.Ready {
					t.Fatalf("peer after Connect: %+v", info)
				}

				done := make(chan error, 1)
				go func() {
					_, err := b.Connect(context.Background(), silent.Addr())
					done <- err
				}()
				time.Sleep(100 * time.Millisecond)
				b.Close()
				select {
				case err := <-done:
					if !errors.Is(err, ErrConnect) {
						t.Fatalf("Connect under way when the backend closed: %v, want ErrConnect", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Connect under way did not return when the backend closed")
				}
			})
		}
	}
}
