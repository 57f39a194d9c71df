package main

// The remote scenario: the engine over backend/ucx against ucx_perftest
// (UCX's own benchmark, the yardstick) and against the traditional path (a
// TCP socket write from a heap buffer, read into the peer's buffer), all
// between two processes of this machine, over UCX's tcp and shared-memory
// transports. See docs/remote.md and docs/benchmarks.md.
//
// The peer is this binary again (-remote-peer passive|pong): an engine over
// a ucx backend that exports its pool, plus a TCP server for the
// traditional path. Bandwidth: N transfers of one size in batches of 1 or
// 64 (SubmitBatchContext keeps up to QueueDepth in flight), put or get,
// timed until Drain. Latency: ping-pong of 8 B puts between two engines in
// ModePoll (each side polls its memory for the other's put and answers),
// half the round trip — what ucx_perftest's ucp_put_lat reports.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/engine"
)

const (
	remotePool  = 64 << 20
	remoteDepth = 256
)

// remoteTransports: the name in the tables, UCX_TLS for the engine's two
// processes, UCX_TLS for ucx_perftest. The engine's shared-memory run keeps
// tcp for the listener's connection (UCX 1.13 connects client-server
// endpoints over tcp only) and moves the data over posix/sysv/cma
// (ucx.Config.SharedMemory); ucx_perftest exchanges worker addresses over
// its own socket and needs no tcp.
var remoteTransports = []struct{ name, engineTLS, perftestTLS string }{
	{"tcp", "tcp", "tcp"},
	{"shm", "shm,tcp", "shm"},
}

func remoteSizes(quick bool) []int {
	if quick {
		return []int{8, 64 << 10, 1 << 20}
	}
	return []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20}
}

func remoteCount(quick bool, size, batch int) int {
	budget, lo, hi := 64<<20, 8, 20000
	if quick {
		budget, lo, hi = 16<<20, 4, 4000
	}
	n := budget / size
	n = max(lo, min(hi, n))
	if batch > 1 {
		n = max(n, batch)
	}
	return (n + batch - 1) / batch * batch
}

// remoteRow is one line of the table: medians over the repetitions.
type remoteRow struct {
	tls, op       string
	size, batch   int
	unit          string // "MiB/s" or "µs"
	eng, pt, sock []float64
	ptErr, err    string
}

// runRemote measures the remote scenario and prints its table; it returns
// its rows and what it skipped or failed, for the summary.
func runRemote(o *options, w io.Writer) (rows []*remoteRow, skipped []string, failed bool) {
	if _, err := exec.LookPath("ucx_perftest"); err != nil {
		skipped = append(skipped, "remote: ucx_perftest not found (apt-get install ucx-utils): the yardstick column reads n/a")
	}
	for _, tr := range remoteTransports {
		o.logf("remote: %s", tr.name)
		rs, err := remoteTransport(o, tr.name, tr.engineTLS, tr.perftestTLS)
		if err != nil {
			failed = true
			skipped = append(skipped, fmt.Sprintf("remote/%s FAILED: %v", tr.name, err))
		}
		rows = append(rows, rs...)
	}
	if !o.json && !o.csv {
		printRemote(w, rows, o)
	}
	return rows, skipped, failed
}

func remoteTransport(o *options, name, engineTLS, perftestTLS string) ([]*remoteRow, error) {
	os.Setenv("UCX_TLS", engineTLS)
	defer os.Unsetenv("UCX_TLS")
	shm := name == "shm"
	peer, err := startRemotePeer("passive", engineTLS, shm)
	if err != nil {
		return nil, err
	}
	defer peer.stop()
	b, err := ucx.New(ucx.Config{SharedMemory: shm})
	if err != nil {
		return nil, err
	}
	eng, err := engine.Open(engine.Config{Backend: b, PoolSize: remotePool, QueueDepth: remoteDepth})
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	pidx, err := b.Connect(ctx, peer.ucxAddr)
	cancel()
	if err != nil {
		return nil, err
	}
	conn, err := net.Dial("tcp", peer.tcpAddr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	heap := make([]byte, 16<<20)

	var rows []*remoteRow
	for _, op := range []string{"put", "get"} {
		for _, size := range remoteSizes(o.quick) {
			for _, batch := range []int{1, 64} {
				rows = append(rows, &remoteRow{tls: name, op: op, size: size, batch: batch, unit: "MiB/s"})
			}
		}
	}
	blocks := map[int]engine.Block{}
	for _, size := range remoteSizes(o.quick) {
		blk, err := eng.Alloc(size)
		if err != nil {
			return nil, err
		}
		blocks[size] = blk
	}
	for rep := 0; rep < o.reps; rep++ {
		for _, r := range rows {
			n := remoteCount(o.quick, r.size, r.batch)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			v, err := engineBW(ctx, eng, pidx, blocks[r.size], r.op == "put", r.size, r.batch, n)
			cancel()
			if err != nil {
				r.err = err.Error()
				continue
			}
			r.eng = append(r.eng, v)
			if r.batch == 1 { // ucx_perftest has no batches: once per size
				test := "ucp_put_bw"
				if r.op == "get" {
					test = "ucp_get"
				}
				pv, err := perftest(perftestTLS, test, r.size, n)
				if err != nil {
					r.ptErr = err.Error()
				} else {
					r.pt = append(r.pt, pv)
				}
			}
			sv, err := socketBW(conn, heap, r.op == "put", r.size, r.batch, n)
			if err != nil {
				r.err = err.Error()
				continue
			}
			r.sock = append(r.sock, sv)
		}
	}
	for _, r := range rows { // the batch-64 rows share the batch-1 row's yardstick
		if r.batch != 1 {
			for _, q := range rows {
				if q.op == r.op && q.size == r.size && q.batch == 1 {
					r.pt, r.ptErr = q.pt, q.ptErr
				}
			}
		}
	}
	eng.Close()
	peer.stop()

	lat := &remoteRow{tls: name, op: "put latency", size: 8, batch: 1, unit: "µs"}
	iters := 20000
	if o.quick {
		iters = 2000
	}
	for rep := 0; rep < o.reps; rep++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		v, err := engineLat(ctx, engineTLS, shm, iters)
		cancel()
		if err != nil {
			lat.err = err.Error()
			break
		}
		lat.eng = append(lat.eng, v)
		pv, err := perftest(perftestTLS, "ucp_put_lat", 8, iters)
		if err != nil {
			lat.ptErr = err.Error()
		} else {
			lat.pt = append(lat.pt, pv)
		}
	}
	if sv, err := socketLat(iters, o.reps); err != nil {
		lat.err = err.Error()
	} else {
		lat.sock = sv
	}
	rows = append(rows, lat)
	return rows, nil
}

// engineBW moves n transfers of size bytes (batches of batch) between blk
// and offset 0 of the peer's pool, and returns MiB/s.
func engineBW(ctx context.Context, eng *engine.Engine, peer uint32, blk engine.Block, put bool, size, batch, n int) (float64, error) {
	ts := make([]engine.Transfer, batch)
	ids := make([]engine.ID, batch)
	var failed atomic.Int64
	var firstErr atomic.Value
	cb := func(r engine.Result) {
		if r.Err != nil && failed.Add(1) == 1 {
			firstErr.Store(r.Err)
		}
	}
	for i := range ts {
		ts[i] = engine.Transfer{Src: engine.Host(blk), Dst: engine.Remote(peer, 0), Len: size, Callback: cb}
		if !put {
			ts[i].Src, ts[i].Dst = ts[i].Dst, ts[i].Src
		}
	}
	start := time.Now()
	for done := 0; done < n; done += batch {
		for k := 0; k < batch; {
			m, err := eng.SubmitBatchContext(ctx, ts[k:], ids[k:])
			if err != nil {
				return 0, err
			}
			k += m
		}
	}
	if err := eng.Drain(ctx); err != nil {
		return 0, err
	}
	el := time.Since(start)
	if failed.Load() > 0 {
		return 0, fmt.Errorf("%d transfers failed: %v", failed.Load(), firstErr.Load())
	}
	return float64(n) * float64(size) / (1 << 20) / el.Seconds(), nil
}

// engineLat: ping-pong of 8 B puts between this process's engine and a
// pong peer's, both in ModePoll without progress goroutines; returns half
// the round trip in µs.
func engineLat(ctx context.Context, tls string, shm bool, iters int) (float64, error) {
	peer, err := startRemotePeer("pong", tls, shm)
	if err != nil {
		return 0, err
	}
	defer peer.stop()
	b, err := ucx.New(ucx.Config{SharedMemory: shm, CallerProgress: true})
	if err != nil {
		return 0, err
	}
	eng, err := engine.Open(engine.Config{Backend: b, PoolSize: 1 << 20, QueueDepth: 64, Mode: engine.ModePoll})
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	ping, _ := eng.Alloc(64)
	pong, _ := eng.Alloc(64)
	pongOff, ok := b.Offset(pong.Addr())
	if !ok {
		return 0, errors.New("pong block outside the exported window")
	}
	// The peer polls (and so accepts the connection) once it has the
	// command: send it first.
	if err := peer.cmd(fmt.Sprintf("pong %d %d", pongOff, iters)); err != nil {
		return 0, err
	}
	p, err := b.Connect(ctx, peer.ucxAddr)
	if err != nil {
		return 0, err
	}
	seen := (*atomic.Uint64)(unsafe.Pointer(&pong.Bytes()[0]))
	out := (*uint64)(unsafe.Pointer(&ping.Bytes()[0]))
	tr := engine.Transfer{Src: engine.Host(ping), Dst: engine.Remote(p, peer.pingOff), Len: 8}
	var start time.Time
	for i := 1; i <= iters+100; i++ { // 100 warm-up round trips
		if i == 101 {
			start = time.Now()
		}
		*out = uint64(i)
		if _, err := eng.Submit(tr); err != nil {
			return 0, err
		}
		for spins := 0; seen.Load() != uint64(i); spins++ {
			eng.Poll()
			if spins&0xfffff == 0xfffff && ctx.Err() != nil {
				return 0, ctx.Err()
			}
		}
	}
	el := time.Since(start)
	return float64(el.Nanoseconds()) / float64(iters) / 2 / 1000, nil
}

// socketBW: the traditional path. put: a header, then batch writes of size
// bytes from a heap buffer that the peer reads into its buffer, then one
// acknowledgement byte; get: a header, then the peer writes batch × size
// bytes that this side reads into its heap buffer. Returns MiB/s.
func socketBW(c net.Conn, heap []byte, put bool, size, batch, n int) (float64, error) {
	var hdr [9]byte
	hdr[0] = 2
	if put {
		hdr[0] = 1
	}
	binary.LittleEndian.PutUint32(hdr[1:], uint32(size))
	binary.LittleEndian.PutUint32(hdr[5:], uint32(batch))
	buf := heap[:size]
	start := time.Now()
	for done := 0; done < n; done += batch {
		if _, err := c.Write(hdr[:]); err != nil {
			return 0, err
		}
		for k := 0; k < batch; k++ {
			var err error
			if put {
				_, err = c.Write(buf)
			} else {
				_, err = io.ReadFull(c, buf)
			}
			if err != nil {
				return 0, err
			}
		}
		if put {
			if _, err := io.ReadFull(c, hdr[:1]); err != nil {
				return 0, err
			}
		}
	}
	return float64(n) * float64(size) / (1 << 20) / time.Since(start).Seconds(), nil
}

// socketLat: ping-pong of 8 B over a TCP socket (write, the peer reads and
// writes back); half the round trip in µs, one value per repetition.
func socketLat(iters, reps int) ([]float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var b [8]byte
		for {
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return
			}
			if _, err := c.Write(b[:]); err != nil {
				return
			}
		}
	}()
	// The echo runs in this process on its own goroutine: as for the
	// engine, the two ends are separate threads polling nothing.
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []float64
	var b [8]byte
	for r := 0; r < reps; r++ {
		start := time.Now()
		for i := 0; i < iters; i++ {
			if _, err := c.Write(b[:]); err != nil {
				return nil, err
			}
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return nil, err
			}
		}
		out = append(out, float64(time.Since(start).Nanoseconds())/float64(iters)/2/1000)
	}
	return out, nil
}

// perftest runs ucx_perftest's server and client on 127.0.0.1 and returns
// overall bandwidth (MiB/s: ucx_perftest's MB are 2^20 bytes) or, for
// ucp_put_lat, overall latency (µs).
func perftest(tls, test string, size, n int) (float64, error) {
	if _, err := exec.LookPath("ucx_perftest"); err != nil {
		return 0, errors.New("ucx_perftest not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	args := []string{"-t", test, "-s", strconv.Itoa(size), "-n", strconv.Itoa(n), "-w", strconv.Itoa(min(n, 1000)), "-p", port, "-f", "-v"}
	env := append(os.Environ(), "UCX_TLS="+tls)
	srv := exec.Command("ucx_perftest", args...)
	srv.Env = env
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() {
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			srv.Process.Kill()
			<-done
		}
	}()
	var out []byte
	for try := 0; try < 50; try++ { // until the server listens
		time.Sleep(20 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cli := exec.CommandContext(ctx, "ucx_perftest", append([]string{"127.0.0.1"}, args...)...)
		cli.Env = env
		out, err = cli.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "connect") {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("ucx_perftest %s %s: %v: %s", test, tls, err, lastLine(string(out)+srvOut.String()))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Split(lines[len(lines)-1], ",")
	if len(f) < 8 {
		return 0, fmt.Errorf("ucx_perftest %s: unexpected output %q", test, lastLine(string(out)))
	}
	col := 5 // overall_bw
	if strings.HasSuffix(test, "_lat") {
		col = 3 // overall_lat
	}
	return strconv.ParseFloat(f[col], 64)
}

func lastLine(s string) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(ls[len(ls)-1])
}

// remotePeer is the peer process.
type remotePeer struct {
	p                *exec.Cmd
	in               io.WriteCloser
	out              *bufio.Reader
	ucxAddr, tcpAddr string
	pingOff          uint64
}

func startRemotePeer(mode, tls string, shm bool) (*remotePeer, error) {
	p := exec.Command(os.Args[0], "-remote-peer="+mode)
	p.Env = append(os.Environ(), "UCX_TLS="+tls, fmt.Sprintf("HCOMM_BENCH_SHM=%t", shm))
	p.Stderr = os.Stderr
	in, err := p.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := p.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	rp := &remotePeer{p: p, in: in, out: bufio.NewReader(out)}
	line, err := rp.out.ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 4 || f[0] != "ADDR" {
		rp.stop()
		return nil, fmt.Errorf("remote peer: said %q: %v", line, err)
	}
	rp.ucxAddr, rp.tcpAddr = f[1], f[2]
	rp.pingOff, _ = strconv.ParseUint(f[3], 10, 64)
	return rp, nil
}

// cmd sends a command and waits for the peer's "OK".
func (rp *remotePeer) cmd(c string) error {
	if _, err := fmt.Fprintln(rp.in, c); err != nil {
		return err
	}
	line, err := rp.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "OK" {
		return fmt.Errorf("remote peer: %s: %q %v", c, line, err)
	}
	return nil
}

func (rp *remotePeer) stop() {
	if rp.p == nil {
		return
	}
	rp.in.Close()
	done := make(chan struct{})
	go func() { rp.p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		rp.p.Process.Kill()
		<-done
	}
	rp.p = nil
}

// remotePeerMain is the peer process (-remote-peer): passive (its progress
// goroutine polls the worker, as ucx_perftest's responder does) or pong
// (ModePoll; answers each ping with a put back).
func remotePeerMain(mode string) int {
	shm := os.Getenv("HCOMM_BENCH_SHM") == "true"
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// Over tcp the target must progress for every put and get: poll like
	// ucx_perftest's responder. Shared memory needs no target progress.
	spin := time.Duration(-1)
	if shm {
		spin = 0
	}
	b, err := ucx.New(ucx.Config{Listen: "127.0.0.1:0", Spin: spin, SharedMemory: shm, CallerProgress: mode == "pong", Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote peer:", err)
		return 1
	}
	cfg := engine.Config{Backend: b, PoolSize: remotePool, QueueDepth: 64}
	if mode == "pong" {
		cfg.PoolSize, cfg.Mode = 1<<20, engine.ModePoll
	}
	eng, err := engine.Open(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote peer:", err)
		return 1
	}
	defer eng.Close()
	ping, _ := eng.Alloc(64)
	pong, _ := eng.Alloc(64)
	pingOff, _ := b.Offset(ping.Addr())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote peer:", err)
		return 1
	}
	defer l.Close()
	go serveSocket(l)
	fmt.Printf("ADDR %s %s %d\n", b.Addr(), l.Addr(), pingOff)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 3 && f[0] == "pong" && mode == "pong" {
			off, _ := strconv.ParseUint(f[1], 10, 64)
			iters, _ := strconv.Atoi(f[2])
			fmt.Println("OK")
			if err := answerPings(eng, ping, pong, off, iters+100); err != nil {
				fmt.Fprintln(os.Stderr, "remote peer:", err)
				return 1
			}
		}
	}
	return 0
}

// answerPings waits (polling the engine) for each ping's sequence number in
// ping and puts it back from pong into the initiator's window at off.
func answerPings(eng *engine.Engine, ping, pong engine.Block, off uint64, n int) error {
	for deadline := time.Now().Add(time.Minute); eng.Poll() >= 0; {
		// The initiator is peer 0 of this backend (it connected).
		if _, err := eng.Submit(engine.Transfer{Src: engine.Host(pong), Dst: engine.Remote(0, off), Len: 8}); err == nil || !errors.Is(err, ucx.ErrNoPeer) {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the initiator's handshake did not finish")
		}
	}
	seen := (*atomic.Uint64)(unsafe.Pointer(&ping.Bytes()[0]))
	out := (*uint64)(unsafe.Pointer(&pong.Bytes()[0]))
	tr := engine.Transfer{Src: engine.Host(pong), Dst: engine.Remote(0, off), Len: 8}
	for i := 1; i <= n; i++ {
		for spins := 0; seen.Load() != uint64(i); spins++ {
			eng.Poll()
		}
		*out = uint64(i)
		if _, err := eng.Submit(tr); err != nil {
			return err
		}
	}
	for k := 0; k < 1000; k++ {
		eng.Poll()
	}
	return nil
}

// serveSocket is the traditional path's peer: see socketBW.
func serveSocket(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func(c net.Conn) {
			defer c.Close()
			buf := make([]byte, 16<<20)
			var hdr [9]byte
			for {
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				size := int(binary.LittleEndian.Uint32(hdr[1:]))
				batch := int(binary.LittleEndian.Uint32(hdr[5:]))
				if size > len(buf) {
					return
				}
				for k := 0; k < batch; k++ {
					var err error
					if hdr[0] == 1 {
						_, err = io.ReadFull(c, buf[:size])
					} else {
						_, err = c.Write(buf[:size])
					}
					if err != nil {
						return
					}
				}
				if hdr[0] == 1 {
					if _, err := c.Write(hdr[:1]); err != nil {
						return
					}
				}
			}
		}(c)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func printRemote(w io.Writer, rows []*remoteRow, o *options) {
	fmt.Fprintf(w, "\n== remote: engine (backend/ucx) vs ucx_perftest vs TCP socket, two processes on 127.0.0.1 (medians of %d; MiB/s higher is better, µs lower is better)\n", o.reps)
	fmt.Fprintf(w, "%-4s %-12s %9s %5s %12s %12s %12s %9s %9s\n", "tls", "op", "size", "batch", "engine", "ucx_perftest", "tcp socket", "eng/ucx", "eng/sock")
	for _, r := range rows {
		e, p, s := median(r.eng), median(r.pt), median(r.sock)
		ps, rp, rs := "n/a", "—", "—"
		if len(r.pt) > 0 {
			ps = num(p)
			if p > 0 {
				rp = fmt.Sprintf("%.2f", e/p)
			}
		}
		if len(r.sock) > 0 && s > 0 {
			rs = fmt.Sprintf("%.2f", e/s)
		}
		es := num(e)
		if r.err != "" {
			es = "FAILED"
		}
		fmt.Fprintf(w, "%-4s %-12s %9s %5d %12s %12s %12s %9s %9s  %s\n", r.tls, r.op, sizeName(r.size), r.batch, es, ps, num(s), rp, rs, r.unit)
		if r.err != "" {
			fmt.Fprintf(w, "       error: %s\n", r.err)
		}
		if r.ptErr != "" && r.batch == 1 {
			fmt.Fprintf(w, "       ucx_perftest: %s\n", firstLine(r.ptErr))
		}
	}
	fmt.Fprintln(w, "ratios are engine ÷ baseline: for MiB/s above 1 is better, for µs below 1 is better")
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
