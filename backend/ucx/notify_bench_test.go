package ucx

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/engine"
)

// BenchmarkNotifyLatency: one hop of a 64 KiB put the target learns about,
// half a ping-pong between two engines in this process (each answers the
// other's hop with its own), three ways:
//
//   - notified: the put and a notification in one batch; the target
//     waits in WaitNotification.
//   - put+flag: what a user would do without notifications — the put,
//     Wait for its completion, then an 8-byte put of the round's number
//     to a flag the target polls in its pool.
//   - ucx_perftest_am: ucx_perftest's ucp_am_lat with 64 KiB messages
//     (its typical figure: the median round trip ÷ 2), same UCX_TLS.
//
// Each reports µs/hop; compare them within one run (benchstat).
func BenchmarkNotifyLatency(b *testing.B) {
	for _, tls := range transports {
		b.Run(tls, func(b *testing.B) {
			b.Run("notified", func(b *testing.B) { benchHop(b, tls, true) })
			b.Run("put+flag", func(b *testing.B) { benchHop(b, tls, false) })
			b.Run("ucx_perftest_am", func(b *testing.B) {
				env, _ := ucxTLS(tls)
				us, err := perftestLat(env, testIP(tls), "ucp_am_lat", 64<<10, max(b.N, 100))
				if err != nil {
					b.Skip(err)
				}
				b.ReportMetric(us, "µs/hop")
			})
		})
	}
}

const hopSize = 64 << 10

// hopSide is one engine of the ping-pong: its data block, its message
// block, its flag (the first 8 bytes of its pool's flag block) and the
// other side's offsets.
type hopSide struct {
	eng        *engine.Engine
	b          *Backend
	peer       uint32 // the other side's index here
	data, msg  engine.Block
	flag       engine.Block
	dataOff    uint64 // the other side's data and flag blocks, in its window
	flagOff    uint64
	ownFlagPtr *uint64
}

func benchHop(b *testing.B, tls string, notified bool) {
	env, shm := ucxTLS(tls)
	b.Setenv("UCX_TLS", env)
	open := func(listen string) *hopSide {
		be, err := New(Config{Listen: listen, SharedMemory: shm})
		if err != nil {
			b.Fatal(err)
		}
		eng, err := engine.Open(engine.Config{Backend: be, PoolSize: 4 << 20, QueueDepth: 64})
		if err != nil {
			be.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { eng.Close() })
		s := &hopSide{eng: eng, b: be}
		if s.data, err = eng.Alloc(hopSize); err == nil {
			if s.msg, err = eng.Alloc(64); err == nil {
				s.flag, err = eng.Alloc(64)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		s.ownFlagPtr = (*uint64)(unsafe.Pointer(&s.flag.Bytes()[0]))
		return s
	}
	x, y := open(listenAddr(tls)), open("")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := y.b.Connect(ctx, x.b.Addr())
	if err != nil {
		b.Fatal(err)
	}
	y.peer, x.peer = p, 0 // x accepted y as its peer 0
	for ps := x.b.Peers(); len(ps) == 0 || !ps[0].Ready; ps = x.b.Peers() {
		if ctx.Err() != nil {
			b.Fatal("the accepted peer never became ready")
		}
		time.Sleep(time.Millisecond)
	}
	for _, s := range [][2]*hopSide{{x, y}, {y, x}} {
		s[0].dataOff, _ = s[1].b.Offset(s[1].data.Addr())
		s[0].flagOff, _ = s[1].b.Offset(s[1].flag.Addr())
	}
	var ids [2]engine.ID
	// send makes one hop from s to the other side (round i).
	send := func(s *hopSide, i uint64) error {
		if notified {
			ts := []engine.Transfer{
				{Src: engine.Host(s.data), Dst: engine.Remote(s.peer, s.dataOff), Len: hopSize},
				{Src: engine.Host(s.msg), Dst: engine.Remote(s.peer, Notify), Len: 8},
			}
			_, err := s.eng.SubmitBatchContext(ctx, ts, ids[:])
			return err
		}
		id, err := s.eng.SubmitContext(ctx, engine.Transfer{Src: engine.Host(s.data), Dst: engine.Remote(s.peer, s.dataOff), Len: hopSize})
		if err == nil {
			err = s.eng.Wait(ctx, id)
		}
		if err != nil {
			return err
		}
		*(*uint64)(unsafe.Pointer(&s.msg.Bytes()[0])) = i
		_, err = s.eng.SubmitContext(ctx, engine.Transfer{Src: engine.Host(s.msg), Dst: engine.Remote(s.peer, s.flagOff), Len: 8})
		return err
	}
	// recv waits for round i's hop to s.
	recv := func(s *hopSide, i uint64) error {
		if notified {
			_, err := s.b.WaitNotification(ctx)
			return err
		}
		for atomic.LoadUint64(s.ownFlagPtr) != i {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Over tcp the put lands only when this side's progress
			// goroutine serves it: a spin that never yields holds a P
			// until the runtime preempts it (10 ms a hop, measured).
			runtime.Gosched()
		}
		return nil
	}
	echo := make(chan error, 1)
	rounds := uint64(b.N) + 100
	go func() { // y answers every hop
		for i := uint64(1); i <= rounds; i++ {
			if err := recv(y, i); err != nil {
				echo <- err
				return
			}
			if err := send(y, i); err != nil {
				echo <- err
				return
			}
		}
		echo <- nil
	}()
	var start time.Time
	for i := uint64(1); i <= rounds; i++ {
		if i == 101 { // 100 warm-up round trips
			b.ResetTimer()
			start = time.Now()
		}
		if err := send(x, i); err != nil {
			b.Fatal(err)
		}
		if err := recv(x, i); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	if err := <-echo; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(el.Microseconds())/float64(2*b.N), "µs/hop")
}

// perftestLat runs ucx_perftest's test (a *_lat one) between a server and a
// client on ip with n iterations and returns its typical latency
// (µs, one way: ucx_perftest halves the round trip).
func perftestLat(tls, ip, test string, size, n int) (float64, error) {
	if _, err := exec.LookPath("ucx_perftest"); err != nil {
		return 0, fmt.Errorf("ucx_perftest not installed (ucx-utils): %w", err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	args := []string{"-t", test, "-s", strconv.Itoa(size), "-n", strconv.Itoa(n), "-p", port, "-f", "-v"}
	env := append(os.Environ(), "UCX_TLS="+tls)
	srv := exec.Command("ucx_perftest", args...)
	srv.Env = env
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() {
		time.AfterFunc(5*time.Second, func() { srv.Process.Kill() })
		srv.Wait()
	}()
	var out []byte
	for try := 0; try < 50; try++ { // until the server listens
		time.Sleep(20 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cli := exec.CommandContext(ctx, "ucx_perftest", append([]string{ip}, args...)...)
		cli.Env = env
		out, err = cli.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "connect") {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("ucx_perftest %s: %v: %s", test, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Split(lines[len(lines)-1], ",")
	if len(f) < 4 {
		return 0, fmt.Errorf("ucx_perftest %s: unexpected output %q", test, out)
	}
	return strconv.ParseFloat(f[1], 64) // iterations, typical_lat, avg_lat, overall_lat, ...
}
