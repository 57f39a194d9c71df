package main

// The remote scenario: the engine over backend/ucx against ucx_perftest
// (UCX's own benchmark, the yardstick) and against the traditional path (a
// TCP socket write from a heap buffer, read into the peer's buffer), all
// between two processes of this machine, over UCX's tcp and shared-memory
// transports — or, with HCOMM_BENCH_RDMA_IP set, over RDMA verbs only
// (make bench-vm-rdma: soft-RoCE in the VM guest). See docs/remote.md and
// docs/benchmarks.md.
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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/internal/testutil"
)

const (
	remotePool  = 64 << 20
	remoteDepth = 256
)

// remoteTransports: the name in the tables, UCX_TLS for the engine's two
// processes, UCX_TLS for ucx_perftest — the same, so that both workers
// carry the same interfaces. The shared-memory run keeps tcp for the
// listener's connection (UCX 1.13 connects client-server endpoints over tcp
// only) and moves the data over sysv/posix (ucx.Config.SharedMemory);
// ucx_perftest connects by worker address and would not need tcp, but an
// active tcp interface is what the engine's worker pays for (docs/remote.md).
var remoteTransports = remoteTransportsFor(os.Getenv(remoteRDMAEnv))

// remoteRDMAEnv names the IP address of an RDMA interface (the RoCE
// netdev, IPoIB). Set, the remote scenario measures one transport, "rc":
// UCX_TLS=remoteRDMATLS for the engine's processes and ucx_perftest alike,
// the engine's peer listening on that address (UCX's rdmacm resolves it to
// the RDMA port; on 127.0.0.1 there is none) and ucx_perftest's client
// connecting to it; UCX_NET_DEVICES and the GID index come from the
// environment (docs/remote.md, "Two hosts over RoCE or InfiniBand"). make
// bench-vm-rdma sets it in the soft-RoCE guest.
const remoteRDMAEnv = "HCOMM_BENCH_RDMA_IP"

// remoteRDMATLS: RC for the data, UD for wire-up (rc_verbs alone fails:
// "no auxiliary transport"); UCX puts RMA on RC lanes only.
const remoteRDMATLS = "rc_verbs,ud_verbs"

func remoteTransportsFor(rdmaIP string) []struct{ name, engineTLS, perftestTLS string } {
	if rdmaIP != "" {
		return []struct{ name, engineTLS, perftestTLS string }{{"rc", remoteRDMATLS, remoteRDMATLS}}
	}
	return []struct{ name, engineTLS, perftestTLS string }{
		{"tcp", "tcp", "tcp"},
		{vethTLS, "tcp", "tcp"}, // tcp over a veth pair between namespaces: remoteveth.go
		{"shm", "shm,tcp", "shm,tcp"},
	}
}

// remoteHost is the address the engine's peer and ucx_perftest's server
// are reached at: the peer end of the veth pair (tcp_veth), the RDMA
// interface's (remoteRDMAEnv) or loopback's. The TCP socket's peer is on
// 127.0.0.1 but over the veth pair.
func remoteHost() string {
	if remoteNet != nil {
		return remoteNet.peerIP
	}
	if ip := os.Getenv(remoteRDMAEnv); ip != "" {
		return ip
	}
	return "127.0.0.1"
}

// remoteBudget bounds each transport's measurements (the whole scenario,
// both transports, stays under 5 minutes of a full hcomm-bench run; the
// child process's share of -timeout is the backstop): rows it does not
// reach say so. tcp gets the larger share: everything over it is 100× slower.
// rc, alone in its run, gets 8 minutes: under the guest's TCG every process
// start and UCX initialisation takes seconds, and a small transfer about a
// millisecond. Each has 30-60 s more than before the notification rows,
// which start two peer processes per repetition.
func remoteBudget(quick bool, tls string) time.Duration {
	d := 170 * time.Second
	switch tls {
	case "shm":
		d = 110 * time.Second
	case "rc":
		d = 480 * time.Second
	case vethTLS:
		d = 100 * time.Second // put bandwidth rows only
	}
	if quick {
		d /= 3
	}
	return d
}

// remoteSizes are the bandwidth rows' sizes; rc (soft-RoCE under TCG
// moves tens of MB/s) has quick's.
func remoteSizes(quick bool) []int {
	if quick {
		return []int{8, 64 << 10, 1 << 20}
	}
	return []int{8, 64 << 10, 1 << 20, 16 << 20}
}

// remoteCount is how many transfers one bandwidth measurement makes: a byte
// budget per transport (shared memory moves tens of GB/s: a measurement of
// a few milliseconds is one scheduling hiccup away from any figure — at
// 128 MiB a 64 KiB row took about 2 ms and its repetitions ranged over 4×
// — so 1 GiB, 15-40 ms; tcp moves one to a few GB/s with remoteTCPEnv:
// 256 MiB, 60-250 ms — at 64 MiB the 1 MiB batch-64 row was one batch, a
// single 20-30 ms burst, and its ratio the quiet runs' worst, 0.48-0.56×),
// at least lo and at most hi transfers, whole batches. ucx_perftest and
// the socket move the same counts. rc: 2 MiB, at most 1000 transfers
// (soft-RoCE in the TCG guest moved 5-10 MiB/s at 64 KiB and took 0.4-1 ms
// per 8 B transfer; 16 MiB and 2000 transfers per measurement left most
// rows of a 5-minute budget unmeasured; at most 100, an 8 B row was 100
// transfers — 8-100 ms, one scheduling hiccup of the guest from any ratio:
// its batch-16 row came out at half the batch-1 row's rate).
func remoteCount(quick bool, tls string, size, batch int) int {
	budget, lo, hi := 256<<20, 4, 4096
	switch tls {
	case "shm":
		budget, lo, hi = 1<<30, 16, 50000
	case "rc":
		budget, lo, hi = 2<<20, 4, 1000
	}
	full := budget
	if quick {
		budget, hi = budget/4, hi/4
	}
	n := budget / size
	n = max(lo, min(hi, n))
	if batch > 1 {
		n = max(n, batch)
		// At least minBatches batches when that fits the transport's
		// full budget: with -quick a tcp 1 MiB batch-64 row was one
		// batch (64 MiB), a burst whose start and drain were the whole
		// measurement: the engine alone, three alternated runs of 5
		// repetitions, moved 1112-2375 MiB/s (medians) in one batch
		// against 2230-2389 in four, and that row decided the goal.
		if k := minBatches * batch; k*size <= full {
			n = max(n, k)
		}
	}
	return (n + batch - 1) / batch * batch
}

// minBatches is the fewest batches a batched bandwidth measurement makes
// (remoteCount), within the transport's byte budget.
const minBatches = 4

// remoteRow is one line of the table: medians over the repetitions. eng,
// pt and sock are each run's overall figure (bytes ÷ wall time, or wall
// time ÷ round trips); the *T fields are each run's typical figure, the
// median per-operation time (ucx_perftest's "typical" column, the engine's
// and the socket's median window or round trip), which a loaded machine's
// scheduling stalls move far less.
type remoteRow struct {
	tls, op          string
	size, batch      int
	unit             string // "MiB/s" or "µs"
	eng, pt, sock    []float64
	engT, ptT, sockT []float64
	ptErr, err       string
	noSock           bool   // no socket column (the notification rows)
	skip             string // why the row was not measured (tcp_veth without root)
}

// runRemote measures the remote scenario and prints its table; it returns
// its rows and what it skipped or failed, for the summary.
func runRemote(o *options, w io.Writer) (rows []*remoteRow, skipped []string, failed bool) {
	if _, err := exec.LookPath("ucx_perftest"); err != nil {
		skipped = append(skipped, "remote: ucx_perftest not found (apt-get install ucx-utils): the yardstick column reads n/a")
	}
	for _, tr := range remoteTransports {
		o.logf("remote: %s", tr.name)
		tdl := time.Now().Add(remoteBudget(o.quick, tr.name))
		var rs []*remoteRow
		var err error
		if tr.name == vethTLS {
			var skip string
			rs, skip, err = remoteVeth(o, tr.engineTLS, tr.perftestTLS, tdl)
			if skip != "" {
				skipped = append(skipped, fmt.Sprintf("remote/%s: not measured: %s", tr.name, skip))
			}
		} else {
			rs, err = remoteTransport(o, tr.name, tr.engineTLS, tr.perftestTLS, tdl)
		}
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

// measureCtx is the context of one measurement: at most 30 s, and at most
// 10 s past the deadline (a measurement starts only before it).
func measureCtx(deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), measureEnd(deadline))
}

func measureEnd(deadline time.Time) time.Time {
	return minTime(deadline.Add(10*time.Second), time.Now().Add(30*time.Second))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

const outOfTime = "not measured: the scenario's time budget ran out"

// remotePeerIPEnv tells a peer process in the veth pair's namespace the
// address of its end, where it listens for UCX and the socket.
const remotePeerIPEnv = "HCOMM_BENCH_PEER_IP"

// remoteVeth measures the tcp_veth transport: it creates the veth pair
// and the namespace (remoteveth.go), confines this process's UCX to its
// end for the measurements, and removes both after them. Without root
// (or without ip) it measures nothing and returns why (skip): every row
// says so, none is faked.
func remoteVeth(o *options, engineTLS, perftestTLS string, deadline time.Time) (rows []*remoteRow, skip string, err error) {
	v, err := setupVeth(o)
	if err != nil {
		if vethStatus() != nil { // no privilege: a skip, not a failure
			skip = err.Error()
			err = nil
		}
		for _, size := range remoteSizes(o.quick) {
			if size < 64<<10 {
				continue
			}
			for _, batch := range []int{1, 64} {
				r := &remoteRow{tls: vethTLS, op: "put", size: size, batch: batch, unit: "MiB/s", skip: skip}
				if err != nil {
					r.err = "veth: " + err.Error()
				}
				rows = append(rows, r)
			}
		}
		return rows, skip, err
	}
	defer func() {
		if cerr := v.close(); cerr != nil && err == nil {
			err = fmt.Errorf("removing the veth pair: %w", cerr)
		}
	}()
	vethDescription = v.describe()
	remoteNet = v
	defer func() { remoteNet = nil }()
	old, had := os.LookupEnv("UCX_NET_DEVICES")
	os.Setenv("UCX_NET_DEVICES", v.here)
	defer func() {
		if had {
			os.Setenv("UCX_NET_DEVICES", old)
		} else {
			os.Unsetenv("UCX_NET_DEVICES")
		}
	}()
	rows, err = remoteTransport(o, vethTLS, engineTLS, perftestTLS, deadline)
	return rows, "", err
}

// vethDescription names the veth pair in the table's heading.
var vethDescription string

// tx reads the veth pair's send counter (0 without the pair).
func (rr *remoteRun) tx() (uint64, error) {
	if remoteNet == nil {
		return 0, nil
	}
	return remoteNet.txBytes()
}

// crossed checks, over the veth pair, that n puts of r's size left through
// its end since tx0 (a get's bytes come back: not checked).
func (rr *remoteRun) crossed(what string, r *remoteRow, tx0 uint64, n int) error {
	if remoteNet == nil || r.op != "put" {
		return nil
	}
	return remoteNet.crossed(what, tx0, int64(n)*int64(r.size))
}

// remoteTCPEnv is UCX's tcp tuning for the tcp transport's run, set for
// the engine, its peers and ucx_perftest alike (through this process's
// environment, which they inherit; a variable the user set is kept). UCX
// 1.13's default 8 KiB send segments held its tcp put to 115-160 MiB/s at
// 1 MiB here (ucx_perftest as much as the engine); 256 KiB segments both
// ways gave ucx_perftest 2400-4700 MiB/s at 64 KiB-16 MiB, about the
// socket's (docs/remote.md). 8 B latency does not change.
var remoteTCPEnv = []string{"UCX_TCP_TX_SEG_SIZE=256K", "UCX_TCP_RX_SEG_SIZE=256K"}

// setEnv sets each NAME=VALUE of kvs that is not set yet and returns a
// function that unsets them again.
func setEnv(kvs []string) func() {
	var set []string
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
			set = append(set, k)
		}
	}
	return func() {
		for _, k := range set {
			os.Unsetenv(k)
		}
	}
}

// remoteTransport measures one UCX transport: the bandwidth rows (puts
// first, every repetition of a row before the next), then the 8 B latency
// row and the notification rows (remotenotify.go) with what is left of the
// budget.
func remoteTransport(o *options, name, engineTLS, perftestTLS string, deadline time.Time) ([]*remoteRow, error) {
	os.Setenv("UCX_TLS", engineTLS)
	defer os.Unsetenv("UCX_TLS")
	if name == "tcp" || name == vethTLS {
		defer setEnv(remoteTCPEnv)()
	}
	rr := &remoteRun{o: o, name: name, engineTLS: engineTLS, perftestTLS: perftestTLS, shm: name == "shm"}
	bwEnd := time.Now().Add(time.Until(deadline) * 3 / 4)
	if name == vethTLS {
		bwEnd = deadline // its only rows
	}
	rows, err := rr.bandwidth(bwEnd)
	rr.close()
	if err != nil || name == vethTLS {
		return rows, err
	}
	rows = append(rows, remoteLatency(o, name, engineTLS, perftestTLS, deadline))
	return append(rows, remoteNotify(o, name, engineTLS, perftestTLS, deadline)...), nil
}

// remoteRun is one transport's bandwidth measurements: the engine over
// backend/ucx connected to a passive peer, and a TCP connection to the
// peer's socket.
type remoteRun struct {
	o               *options
	name, engineTLS string
	perftestTLS     string
	shm             bool
	peer            *remotePeer
	eng             *engine.Engine
	pidx            uint32
	conn            net.Conn
	heap            []byte
	blocks          map[int]engine.Block
}

func (rr *remoteRun) open() error {
	var err error
	if rr.peer, err = startRemotePeer("passive", rr.engineTLS, rr.shm); err != nil {
		return err
	}
	b, err := ucx.New(ucx.Config{SharedMemory: rr.shm})
	if err != nil {
		return err
	}
	if rr.eng, err = engine.Open(engine.Config{Backend: b, PoolSize: remotePool, QueueDepth: remoteDepth}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	rr.pidx, err = b.Connect(ctx, rr.peer.ucxAddr)
	cancel()
	if err != nil {
		return err
	}
	if remoteNet != nil {
		if info := b.EndpointInfo(rr.pidx); !strings.Contains(info, remoteNet.here) {
			return fmt.Errorf("the endpoint to the peer does not run over %s:\n%s", remoteNet.here, info)
		}
	}
	if rr.conn, err = net.Dial("tcp", rr.peer.tcpAddr); err != nil {
		return err
	}
	rr.heap = make([]byte, 16<<20)
	rr.blocks = map[int]engine.Block{}
	for _, size := range rr.sizes() {
		if rr.blocks[size], err = rr.eng.Alloc(size); err != nil {
			return err
		}
	}
	return nil
}

func (rr *remoteRun) sizes() []int {
	ss := remoteSizes(rr.o.quick || rr.name == "rc")
	if rr.name == vethTLS { // the goal's sizes
		return slices.DeleteFunc(ss, func(s int) bool { return s < 64<<10 })
	}
	return ss
}

// ops are the bandwidth rows' operations: tcp_veth measures what its goal
// judges, puts.
func (rr *remoteRun) ops() []string {
	if rr.name == vethTLS {
		return []string{"put"}
	}
	return []string{"put", "get"}
}

// batches are the bandwidth rows' batch sizes: 1 and 64; rc's second is 16
// (a 1 MiB batch of 64 is 64 MiB, 10 s in the TCG guest).
func (rr *remoteRun) batches() []int {
	if rr.name == "rc" {
		return []int{1, 16}
	}
	return []int{1, 64}
}

func (rr *remoteRun) close() {
	if rr.conn != nil {
		rr.conn.Close()
	}
	if rr.eng != nil {
		rr.eng.Close()
	}
	if rr.peer != nil {
		rr.peer.stop()
	}
}

// bandwidth measures every bandwidth row until bwDeadline. Every
// repetition of a row comes before the next row: when the budget runs out,
// the rows measured have all their repetitions (puts first: the goals are
// on puts).
func (rr *remoteRun) bandwidth(bwDeadline time.Time) ([]*remoteRow, error) {
	if err := rr.open(); err != nil {
		return nil, err
	}
	var rows []*remoteRow
	for _, op := range rr.ops() {
		for _, size := range rr.sizes() {
			for _, batch := range rr.batches() {
				rows = append(rows, &remoteRow{tls: rr.name, op: op, size: size, batch: batch, unit: "MiB/s"})
			}
		}
	}
	for _, r := range rows {
		for rep := 0; rep < rr.o.reps; rep++ {
			if time.Now().After(bwDeadline) {
				if r.err == "" && len(r.eng) < rr.o.reps {
					r.err = fmt.Sprintf("%s (%d of %d repetitions)", outOfTime, len(r.eng), rr.o.reps)
				}
				continue
			}
			if err := rr.repetition(r, bwDeadline); err != nil {
				return rows, err
			}
		}
	}
	for _, r := range rows { // the batched rows share the batch-1 row's yardstick
		if r.batch != 1 && !rr.pairEvery(r) {
			for _, q := range rows {
				if q.op == r.op && q.size == r.size && q.batch == 1 {
					r.pt, r.ptT, r.ptErr = q.pt, q.ptT, q.ptErr
				}
			}
		}
	}
	return rows, nil
}

// pairEvery says whether ucx_perftest runs beside the engine in every
// repetition of r, a batched put row's too, with the row's transfer count
// and alternating which goes first: over tcp, where its figure moves by 2×
// between runs seconds apart (the machine's vCPU placement changes under
// both programs alike: the engine's 64 KiB puts over the veth pair moved
// 1669-3109 MiB/s and ucx_perftest's 1600-3468 in the same five
// repetitions), a batched row compared with the batch-1 row's ucx_perftest
// runs compared measurements made in different minutes of that placement,
// and a fixed order put one program first after every switch. Each
// repetition's ratio is then of two adjacent measurements.
// Puts only (the goals'; a get row's would cost the budget as much again).
func (rr *remoteRun) pairEvery(r *remoteRow) bool {
	return (rr.name == "tcp" || rr.name == vethTLS) && r.op == "put"
}

// repetition measures r once: the engine, ucx_perftest (it has no batches:
// in the batch-1 rows only, or in every row with pairEvery, first in every
// second repetition) and the socket. A measurement's failure is the row's;
// an error returned is the peer's, and ends the transport's run.
func (rr *remoteRun) repetition(r *remoteRow, bwDeadline time.Time) error {
	n := remoteCount(rr.o.quick, rr.name, r.size, r.batch)
	// ucx_perftest first in every second repetition (pairEvery), while
	// the engine's passive peer is idle: spinning, it takes a CPU from
	// ucx_perftest's two processes (a first version of this order ran
	// ucx_perftest after the "spin" below, and its tcp puts moved
	// 170-1170 MiB/s there against 1700-3600 in the same runs' other
	// repetitions).
	ptFirst := rr.pairEvery(r) && len(r.eng)%2 == 1
	if ptFirst {
		rr.perftestBW(r, n, bwDeadline)
	}
	ctx, cancel := measureCtx(bwDeadline)
	// The tcp target must progress (see remotePeerMain); over shared
	// memory and RDMA the initiator (its copy, its device) moves the bytes.
	spin := rr.name == "tcp" || rr.name == vethTLS
	if spin {
		if err := rr.peer.cmd("spin"); err != nil {
			cancel()
			return err
		}
	}
	tx0, err := rr.tx()
	if err != nil {
		cancel()
		return err
	}
	v, vt, err := engineBW(ctx, rr.eng, rr.pidx, rr.blocks[r.size], r.op == "put", r.size, r.batch, n)
	cancel()
	if spin {
		if err := rr.peer.cmd("idle"); err != nil {
			return err
		}
	}
	if err == nil {
		err = rr.crossed("the engine", r, tx0, n)
	}
	if err != nil {
		r.err = err.Error()
		return nil
	}
	r.eng = append(r.eng, v)
	r.engT = append(r.engT, vt)
	if !ptFirst && (r.batch == 1 || rr.pairEvery(r)) {
		rr.perftestBW(r, n, bwDeadline)
	}
	rr.conn.SetDeadline(measureEnd(bwDeadline))
	// The socket moves ~1 GB/s at best here: tcp's count (rc's in the
	// guest, as slow as rc).
	sockTLS := "tcp"
	if rr.name == "rc" {
		sockTLS = "rc"
	}
	if tx0, err = rr.tx(); err != nil {
		return err
	}
	sn := remoteCount(rr.o.quick, sockTLS, r.size, r.batch)
	sv, svt, err := socketBW(rr.conn, rr.heap, r.op == "put", r.size, r.batch, sn)
	if err == nil {
		err = rr.crossed("the socket", r, tx0, sn)
	}
	if err != nil {
		r.err = "socket: " + err.Error()
		// The stream is out of step: a new connection.
		rr.conn.Close()
		rr.conn, err = net.Dial("tcp", rr.peer.tcpAddr)
		return err
	}
	r.sock = append(r.sock, sv)
	r.sockT = append(r.sockT, svt)
	return nil
}

// perftestBW measures r's yardstick once: ucx_perftest's put or get
// bandwidth at r's size.
func (rr *remoteRun) perftestBW(r *remoteRow, n int, bwDeadline time.Time) {
	test := "ucp_put_bw"
	if r.op == "get" {
		test = "ucp_get"
	}
	pn := n
	if rr.name == "tcp" && r.size < 64<<10 {
		pn = min(n, 100) // its small tcp gets take ms each here
	}
	tx0, err := rr.tx()
	if err != nil {
		r.ptErr = err.Error()
		return
	}
	pv, pvt, err := perftest(rr.perftestTLS, test, r.size, pn, remoteWarmup(pn), bwDeadline)
	if err == nil {
		err = rr.crossed("ucx_perftest", r, tx0, pn)
	}
	if err != nil {
		r.ptErr = err.Error()
		return
	}
	r.pt = append(r.pt, pv)
	// Over tcp a put or get is queued, not done, when ucx_perftest times
	// it: its typical figure is the posting cost, no bandwidth; over RDMA
	// too (completions are signalled once per 64 posts: 8 B puts showed a
	// typical 3.81 MiB/s against 0.020 overall). Over shared memory it is
	// the memcpy.
	if rr.shm {
		r.ptT = append(r.ptT, pvt)
	}
}

// remoteLatency is the 8 B put latency row: the engine's ping-pong, then
// ucx_perftest's, then the socket's, per repetition until deadline. All
// three run between two processes: the socket's echo is a peer process of
// its own (started once for the row), as the engine's pong peer and
// ucx_perftest's server are.
func remoteLatency(o *options, name, engineTLS, perftestTLS string, deadline time.Time) *remoteRow {
	shm := name == "shm"
	lat := &remoteRow{tls: name, op: "put latency", size: 8, batch: 1, unit: "µs"}
	iters := 10000 // shared memory: µs per round trip
	if !shm {
		iters = 1000 // tcp: tens of µs, ms at a high load
	}
	if o.quick {
		iters /= 5
	}
	// The socket's echo: a peer process idle but for its TCP server (pong
	// mode polls nothing until told to).
	echo, err := startRemotePeer("pong", engineTLS, shm)
	if err != nil {
		lat.err = err.Error()
		return lat
	}
	defer echo.stop()
	for rep := 0; rep < o.reps; rep++ {
		if time.Now().After(deadline) {
			lat.err = fmt.Sprintf("%s (%d of %d repetitions)", outOfTime, len(lat.eng), o.reps)
			break
		}
		ctx, cancel := measureCtx(deadline)
		v, vt, err := engineLat(ctx, engineTLS, shm, iters)
		cancel()
		if err != nil {
			lat.err = err.Error()
			break
		}
		lat.eng = append(lat.eng, v)
		lat.engT = append(lat.engT, vt)
		pv, pvt, err := perftest(perftestTLS, "ucp_put_lat", 8, iters, remoteLatWarmup(iters, shm), deadline)
		if err != nil {
			lat.ptErr = err.Error()
		} else {
			lat.pt = append(lat.pt, pv)
			lat.ptT = append(lat.ptT, pvt)
		}
		if sv, svt, err := socketLat(echo.tcpAddr, iters, measureEnd(deadline)); err != nil {
			lat.err = "socket: " + err.Error()
		} else {
			lat.sock = append(lat.sock, sv)
			lat.sockT = append(lat.sockT, svt)
		}
	}
	return lat
}

// remoteWarmup is how many untimed iterations come before n timed ones:
// ucx_perftest's -w, and as many for the engine (transfers, or round trips).
func remoteWarmup(n int) int { return min(n, 1000) }

// remoteLatWarmup is how many untimed round trips come before a latency
// row's n timed ones, for the engine's ping-pong and ucx_perftest's
// ucp_put_lat (-w) alike. Over shared memory 1000 round trips last under a
// millisecond, and the engine's two processes come out of a wait (the
// peer's start, the handshake) into the timed loop: each Go runtime's
// monitor (sysmon), woken from its idle sleep, then polls every 20 µs for
// 50 rounds before it backs off to every 10 ms (runtime/proc.go), and with
// both CPUs of a 2-CPU machine spinning every such wake-up takes a CPU
// from one side of the ping-pong — under the spinners the 50 rounds
// stretch over ~10 ms, i.e. over the whole timed loop of a 10 000 round
// trip row (bpftrace: 48-50 of them inside it; overall 1.31-1.74× against
// 1.22-1.34× with this warm-up, docs/remote.md "Latency"). 100 000 round
// trips (~30-70 ms) outlast that ladder; ucx_perftest gets as many. Over
// tcp 1000 round trips already take ~40 ms.
func remoteLatWarmup(n int, shm bool) int {
	if shm {
		return 100_000
	}
	return remoteWarmup(n)
}

// engineBW moves n transfers of size bytes (batches of batch) between blk
// and offset 0 of the peer's pool, and returns MiB/s overall and typical:
// the median window of at least a queue's worth of *completions* (timed in
// the callbacks; over tcp a batch submitted while others are in flight is
// posted with them and shares their flush, so completions come in bursts
// of up to QueueDepth, and submission can run ahead of the wire by a
// queue's worth: neither a shorter window nor one timed at submission is
// the transfers' service time).
func engineBW(ctx context.Context, eng *engine.Engine, peer uint32, blk engine.Block, put bool, size, batch, n int) (float64, float64, error) {
	ts := make([]engine.Transfer, batch)
	ids := make([]engine.ID, batch)
	window := max(64, batch, remoteDepth)
	marks := make([]int64, n/window+1) // ns since base at each window's last completion
	var failed, done atomic.Int64
	var firstErr atomic.Value
	base := time.Now()
	cb := func(r engine.Result) {
		if r.Err != nil && failed.Add(1) == 1 {
			firstErr.Store(r.Err)
		}
		if c := done.Add(1); c%int64(window) == 0 && c/int64(window) <= int64(len(marks)) {
			marks[c/int64(window)-1] = int64(time.Since(base))
		}
	}
	for i := range ts {
		ts[i] = engine.Transfer{Src: engine.Host(blk), Dst: engine.Remote(peer, 0), Len: size, Callback: cb}
		if !put {
			ts[i].Src, ts[i].Dst = ts[i].Dst, ts[i].Src
		}
	}
	// Untimed warm-up transfers, as many as ucx_perftest's (-w), then
	// the timed ones.
	if err := submitRounds(ctx, eng, ts, ids, remoteWarmup(n), batch); err != nil {
		return 0, 0, err
	}
	// Drain ran every warm-up callback: the marks start over.
	done.Store(0)
	start := time.Now()
	t0 := int64(start.Sub(base))
	if err := submitRounds(ctx, eng, ts, ids, n, batch); err != nil {
		return 0, 0, err
	}
	el := time.Since(start)
	if failed.Load() > 0 {
		return 0, 0, fmt.Errorf("%d transfers failed: %v", failed.Load(), firstErr.Load())
	}
	overall := float64(n) * float64(size) / (1 << 20) / el.Seconds()
	typical := overall
	if k := int(done.Load()) / window; k >= 3 {
		wins := make([]float64, k)
		for i := range wins {
			prev := t0
			if i > 0 {
				prev = marks[i-1]
			}
			wins[i] = float64(marks[i]-prev) / 1e9 / float64(window)
		}
		typical = float64(size) / (1 << 20) / figures.Median(wins)
	}
	return overall, typical, nil
}

// engineLat: ping-pong of 8 B puts between this process's engine and a
// pong peer's, both in ModePoll without progress goroutines; returns half
// the round trip in µs, the mean and the median (ucx_perftest's overall
// and typical).
func engineLat(ctx context.Context, tls string, shm bool, iters int) (float64, float64, error) {
	peer, err := startRemotePeer("pong", tls, shm)
	if err != nil {
		return 0, 0, err
	}
	defer peer.stop()
	b, err := ucx.New(ucx.Config{SharedMemory: shm, CallerProgress: true})
	if err != nil {
		return 0, 0, err
	}
	eng, err := engine.Open(engine.Config{Backend: b, PoolSize: 1 << 20, QueueDepth: 64, Mode: engine.ModePoll})
	if err != nil {
		return 0, 0, err
	}
	defer eng.Close()
	ping, _ := eng.Alloc(64)
	pong, _ := eng.Alloc(64)
	pongOff, ok := b.Offset(pong.Addr())
	if !ok {
		return 0, 0, errors.New("pong block outside the exported window")
	}
	// The peer polls (and so accepts the connection) once it has the
	// command: send it first.
	warm := remoteLatWarmup(iters, shm)
	if err := peer.cmd(fmt.Sprintf("pong %d %d", pongOff, iters+warm)); err != nil {
		return 0, 0, err
	}
	p, err := b.Connect(ctx, peer.ucxAddr)
	if err != nil {
		return 0, 0, err
	}
	seen := (*atomic.Uint64)(unsafe.Pointer(&pong.Bytes()[0]))
	out := (*uint64)(unsafe.Pointer(&ping.Bytes()[0]))
	tr := engine.Transfer{Src: engine.Host(ping), Dst: engine.Remote(p, peer.pingOff), Len: 8}
	// Warm-up round trips first, as many as ucx_perftest's (-w, see
	// remoteLatWarmup). The clock is read once per round trip, right
	// after the ping's Submit: while the ping travels and the peer
	// answers, off the measured path (time.Now costs ~75 ns here, two
	// kvm-clock reads; time.Since of a monotonic time one, ~28 ns —
	// before the read was on the path, ahead of each Submit, and added
	// ~40 ns to every reported half round trip over shared memory, where
	// ucx_perftest's per-iteration clock is a 12 ns rdtsc). Each sample
	// is then the time from one ping's post to the next one's: one round
	// trip. The overall figure runs from just before the first timed
	// Submit to the last pong seen.
	base := time.Now()
	var start, t0, now time.Duration
	rtts := make([]float64, 0, iters)
	for i := 1; i <= iters+warm; i++ {
		if i == warm+1 {
			start = time.Since(base)
		}
		*out = uint64(i)
		if _, err := eng.Submit(tr); err != nil {
			return 0, 0, err
		}
		now = time.Since(base)
		if i > warm+1 {
			rtts = append(rtts, float64(now-t0))
		}
		t0 = now
		// Poll at least once per round trip: over shared memory the pong
		// can be back before the first look, and every put's completion
		// must be reaped (64 unreaped puts fill the queue).
		for spins := 0; ; spins++ {
			eng.Poll()
			if seen.Load() == uint64(i) {
				break
			}
			if spins&0xfffff == 0xfffff && ctx.Err() != nil {
				return 0, 0, ctx.Err()
			}
		}
	}
	el := time.Since(base) - start
	return float64(el.Nanoseconds()) / float64(iters) / 2 / 1000, figures.Median(rtts) / 2 / 1000, nil
}

// socketBW: the traditional path. put: a header, then batch writes of size
// bytes from a heap buffer that the peer reads into its buffer, then one
// acknowledgement byte; get: a header, then the peer writes batch × size
// bytes that this side reads into its heap buffer. Returns MiB/s, overall
// and typical (the median header-to-acknowledgement batch, per byte).
func socketBW(c net.Conn, heap []byte, put bool, size, batch, n int) (float64, float64, error) {
	var hdr [9]byte
	hdr[0] = 2
	if put {
		hdr[0] = 1
	}
	binary.LittleEndian.PutUint32(hdr[1:], uint32(size))
	binary.LittleEndian.PutUint32(hdr[5:], uint32(batch))
	buf := heap[:size]
	var per []float64
	start := time.Now()
	for done := 0; done < n; done += batch {
		t0 := time.Now()
		if _, err := c.Write(hdr[:]); err != nil {
			return 0, 0, err
		}
		for k := 0; k < batch; k++ {
			var err error
			if put {
				_, err = c.Write(buf)
			} else {
				_, err = io.ReadFull(c, buf)
			}
			if err != nil {
				return 0, 0, err
			}
		}
		if put {
			if _, err := io.ReadFull(c, hdr[:1]); err != nil {
				return 0, 0, err
			}
		}
		per = append(per, time.Since(t0).Seconds()/float64(batch))
	}
	overall := float64(n) * float64(size) / (1 << 20) / time.Since(start).Seconds()
	return overall, float64(size) / (1 << 20) / figures.Median(per), nil
}

// socketLat: ping-pong of 8 B over a TCP socket to the peer process's
// echo at addr (this side writes 8 bytes from a heap buffer and reads the
// peer's 8 back); half the round trip in µs, mean and median. The echo is
// another process, as the engine's and ucx_perftest's pong are: an echo
// goroutine of this process (until this change) answered in 9.1-9.9 µs a
// half round trip against 14.5-15.6 µs from a second process (the same
// program both ways, 3 alternated runs of 5 × 2000 round trips): one Go
// runtime hands the woken reader to a thread already running, two
// processes each wake through epoll and a futex.
func socketLat(addr string, iters int, deadline time.Time) (float64, float64, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	var hdr [9]byte
	hdr[0] = 3 // echo
	binary.LittleEndian.PutUint32(hdr[1:], 8)
	binary.LittleEndian.PutUint32(hdr[5:], uint32(iters))
	if _, err := c.Write(hdr[:]); err != nil {
		return 0, 0, err
	}
	var b [8]byte
	rtts := make([]float64, iters)
	start := time.Now()
	for i := 0; i < iters; i++ {
		t0 := time.Now()
		if _, err := c.Write(b[:]); err != nil {
			return 0, 0, err
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return 0, 0, err
		}
		rtts[i] = float64(time.Since(t0).Nanoseconds())
	}
	return float64(time.Since(start).Nanoseconds()) / float64(iters) / 2 / 1000, figures.Median(rtts) / 2 / 1000, nil
}

// perftest runs ucx_perftest's server and client on remoteHost() (n timed
// iterations after warm untimed ones) and returns
// bandwidth (MiB/s: ucx_perftest's MB are 2^20 bytes) or, for
// ucp_put_lat, latency (µs): overall, and typical (its median per-operation
// latency; for bandwidth size ÷ that). It gives up at deadline (or after
// 30 s).
func perftest(tls, test string, size, n, warm int, deadline time.Time) (float64, float64, error) {
	if _, err := exec.LookPath("ucx_perftest"); err != nil {
		return 0, 0, errors.New("ucx_perftest not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	args := []string{"-t", test, "-s", strconv.Itoa(size), "-n", strconv.Itoa(n), "-w", strconv.Itoa(warm), "-p", port, "-f", "-v"}
	env := append(os.Environ(), "UCX_TLS="+tls)
	srv := exec.Command("ucx_perftest", args...)
	if remoteNet != nil { // the server in the pair's namespace, on its end
		srv = remoteNet.inNS("ucx_perftest", args...)
		env = append(env, "UCX_NET_DEVICES="+remoteNet.peer)
	}
	srv.Env = env
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return 0, 0, err
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
		ctx, cancel := measureCtx(deadline)
		cli := exec.CommandContext(ctx, "ucx_perftest", append([]string{remoteHost()}, args...)...)
		cli.Env = os.Environ()
		cli.Env = append(cli.Env, "UCX_TLS="+tls)
		out, err = cli.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "connect") {
			break
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("ucx_perftest %s %s: %v: %s", test, tls, err, lastLine(string(out)+srvOut.String()))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Split(lines[len(lines)-1], ",")
	if len(f) < 8 {
		return 0, 0, fmt.Errorf("ucx_perftest %s: unexpected output %q", test, lastLine(string(out)))
	}
	// iterations, typical_lat, avg_lat, overall_lat, avg_bw, overall_bw, ...
	typ, err1 := strconv.ParseFloat(f[1], 64)
	col := 5 // overall_bw
	if strings.HasSuffix(test, "_lat") {
		col = 3 // overall_lat
	}
	v, err2 := strconv.ParseFloat(f[col], 64)
	if err1 != nil || err2 != nil || typ <= 0 {
		return 0, 0, fmt.Errorf("ucx_perftest %s: unexpected output %q", test, lastLine(string(out)))
	}
	if !strings.HasSuffix(test, "_lat") {
		typ = float64(size) / typ * 1e6 / (1 << 20) // bytes per µs → MiB/s
	}
	return v, typ, nil
}

func lastLine(s string) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(ls[len(ls)-1])
}

// remotePeer is the peer process (the protocol of testutil.LaunchPeer: its
// ADDR line names its UCX address, its TCP socket's, the offset of its
// ping block — the notify peer's flag — and that of its 64 KiB data block,
// the notified puts' destination).
type remotePeer struct {
	p                *testutil.PeerProc
	ucxAddr, tcpAddr string
	pingOff, dataOff uint64
}

func startRemotePeer(mode, tls string, shm bool) (*remotePeer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("remote peer: %w", err)
	}
	c := exec.Command(self, "-remote-peer="+mode)
	if remoteNet != nil { // in the pair's namespace, on its end
		c = remoteNet.inNS(self, "-remote-peer="+mode)
	}
	// UCX logs to standard output by default, where the peer announces its
	// address: its log goes to standard error instead. Over rdmacm a
	// listener on a free port logs an ERROR line when the port rdmacm
	// picked is taken for tcp (then takes another): on standard output
	// that line was read as the peer's announcement, and the measurement
	// failed (the soft-RoCE guest, one notified repetition in a run).
	c.Env = append(os.Environ(), "UCX_TLS="+tls, fmt.Sprintf("HCOMM_BENCH_SHM=%t", shm), "UCX_LOG_FILE=stderr")
	if remoteNet != nil {
		c.Env = append(c.Env, "UCX_NET_DEVICES="+remoteNet.peer, remotePeerIPEnv+"="+remoteNet.peerIP)
	}
	p, err := testutil.LaunchPeer(c, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("remote peer: %w", err)
	}
	rp := &remotePeer{p: p}
	if len(p.Addr) != 4 {
		rp.stop()
		return nil, fmt.Errorf("remote peer: ADDR %q, want the UCX address, the socket's, the ping and the data offsets", p.Addr)
	}
	rp.ucxAddr, rp.tcpAddr = p.Addr[0], p.Addr[1]
	if rp.pingOff, err = strconv.ParseUint(p.Addr[2], 10, 64); err == nil {
		rp.dataOff, err = strconv.ParseUint(p.Addr[3], 10, 64)
	}
	if err != nil {
		rp.stop()
		return nil, fmt.Errorf("remote peer: offsets: %w", err)
	}
	return rp, nil
}

// cmd sends a command and waits for the peer's "OK".
func (rp *remotePeer) cmd(c string) error { return rp.p.Command(c, 30*time.Second) }

func (rp *remotePeer) stop() {
	if rp.p == nil {
		return
	}
	_ = rp.p.Stop(5 * time.Second) // its failures surface as the measurements' errors
	rp.p = nil
}

// remotePeerMain is the peer process (-remote-peer): passive (its progress
// goroutine polls the worker, as ucx_perftest's responder does), pong
// (ModePoll; answers each ping with a put back) or notify (the default
// mode with the backend's progress goroutine; answers each 64 KiB hop with
// its own: answerNotify).
func remotePeerMain(mode string) int {
	shm := os.Getenv("HCOMM_BENCH_SHM") == "true"
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// The peer progresses its worker itself (CallerProgress, ModePoll).
	// Over tcp the target must progress for every put and get: while the
	// engine's bandwidth is measured ("spin") the passive peer polls like
	// ucx_perftest's responder; otherwise ("idle", the start) it polls
	// every millisecond, to accept the connection and notice failures, and
	// leaves the CPUs to ucx_perftest and the socket, which run meanwhile
	// (a peer spinning throughout took one of this machine's two CPUs from
	// them). Shared memory needs no target progress: never "spin".
	notify := mode == "notify"
	// In the veth pair's namespace (tcp_veth) the peer listens, for UCX
	// and the socket, on its end of the pair.
	host, sockHost := remoteHost(), "127.0.0.1"
	if ip := os.Getenv(remotePeerIPEnv); ip != "" {
		host, sockHost = ip, ip
	}
	b, err := ucx.New(ucx.Config{Listen: net.JoinHostPort(host, "0"), SharedMemory: shm, CallerProgress: !notify, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote peer:", err)
		return 1
	}
	cfg := engine.Config{Backend: b, PoolSize: remotePool, QueueDepth: 64, Mode: engine.ModePoll}
	switch mode {
	case "pong":
		cfg.PoolSize = 1 << 20
	case "notify":
		cfg.PoolSize, cfg.Mode = notifyPoolLen, engine.ModeReaper
	}
	eng, err := engine.Open(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote peer:", err)
		return 1
	}
	defer eng.Close()
	var spinning, stop atomic.Bool
	if mode == "passive" {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for !stop.Load() {
				eng.Poll()
				if !spinning.Load() {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		defer func() { stop.Store(true); <-done }()
	}
	ping, _ := eng.Alloc(64)
	pong, _ := eng.Alloc(64)
	pingOff, _ := b.Offset(ping.Addr())
	// The notify peer's hop: ping is its flag.
	h, err := newNotifyHop(eng, b, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote peer:", err)
		return 1
	}
	h.flag = ping
	dataOff, _ := b.Offset(h.data.Addr())
	l, err := net.Listen("tcp", net.JoinHostPort(sockHost, "0"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote peer:", err)
		return 1
	}
	defer l.Close()
	go serveSocket(l)
	if err := testutil.Announce(os.Stdout, b.Addr(), l.Addr(), pingOff, dataOff); err != nil {
		return 1
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 1 && (f[0] == "spin" || f[0] == "idle") && mode == "passive" {
			spinning.Store(f[0] == "spin")
			fmt.Println("OK")
		}
		if len(f) == 5 && f[0] == "notify" && notify {
			fmt.Println("OK")
			if err := answerNotify(eng, b, h, f[1:]); err != nil {
				fmt.Fprintln(os.Stderr, "remote peer:", err)
				return 1
			}
		}
		if len(f) == 3 && f[0] == "pong" && mode == "pong" {
			off, _ := strconv.ParseUint(f[1], 10, 64)
			iters, _ := strconv.Atoi(f[2])
			fmt.Println("OK")
			if err := answerPings(eng, ping, pong, off, iters); err != nil {
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
		for eng.Poll(); seen.Load() != uint64(i); {
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

// serveSocket is the traditional path's peer: see socketBW and socketLat.
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
					if hdr[0] == 3 { // echo (socketLat)
						if _, err = io.ReadFull(c, buf[:size]); err == nil {
							_, err = c.Write(buf[:size])
						}
					} else if hdr[0] == 1 {
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

func printRemote(w io.Writer, rows []*remoteRow, o *options) {
	on := "127.0.0.1"
	if h := remoteHost(); h != on {
		on = fmt.Sprintf("%s (UCX_TLS=%s; the TCP socket on 127.0.0.1)", h, remoteRDMATLS)
	}
	if vethDescription != "" && slices.ContainsFunc(rows, func(r *remoteRow) bool { return r.tls == vethTLS }) {
		v := vethTLS + ": " + vethDescription + "; the peer, ucx_perftest's server and the socket's reader in that namespace"
		if slices.ContainsFunc(rows, func(r *remoteRow) bool { return r.tls != vethTLS }) {
			on += " (" + v + ")"
		} else {
			on = v
		}
	}
	fmt.Fprintf(w, "\n== remote: engine (backend/ucx) vs ucx_perftest vs TCP socket, two processes on %s (medians of %d; MiB/s higher is better, µs lower is better)\n", on, o.reps)
	fmt.Fprintf(w, "   each cell: overall (typical) — overall is bytes ÷ wall time or wall time ÷ round trips; typical is the median per-operation figure (ucx_perftest's \"typical\"), what scheduling stalls on a loaded machine move least\n")
	fmt.Fprintf(w, "%-8s %-12s %7s %5s %22s %22s %22s %13s %13s\n", "tls", "op", "size", "batch", "engine", "ucx_perftest", "tcp socket", "eng/ucx", "eng/sock")
	cell := func(v, t []float64) string {
		if len(v) == 0 {
			return "n/a"
		}
		if len(t) == 0 {
			return num(figures.Median(v)) + " (—)"
		}
		return fmt.Sprintf("%s (%s)", num(figures.Median(v)), num(figures.Median(t)))
	}
	ratio := func(a, b []float64) string {
		if len(a) == 0 || len(b) == 0 || figures.Median(b) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", figures.Median(a)/figures.Median(b))
	}
	for _, r := range rows {
		es := cell(r.eng, r.engT)
		if r.err != "" && len(r.eng) == 0 {
			es = "FAILED"
		}
		if r.skip != "" {
			fmt.Fprintf(w, "%-8s %-12s %7s %5d not measured: %s\n", r.tls, r.op, figures.Size(r.size), r.batch, r.skip)
			continue
		}
		fmt.Fprintf(w, "%-8s %-12s %7s %5d %22s %22s %22s %13s %13s  %s\n", r.tls, r.op, figures.Size(r.size), r.batch, es,
			cell(r.pt, r.ptT), cell(r.sock, r.sockT),
			ratio(r.eng, r.pt)+" ("+ratio(r.engT, r.ptT)+")", ratio(r.eng, r.sock)+" ("+ratio(r.engT, r.sockT)+")", r.unit)
		if r.err != "" {
			fmt.Fprintf(w, "       error: %s\n", r.err)
		}
		if r.ptErr != "" && r.batch == 1 {
			fmt.Fprintf(w, "       ucx_perftest: %s\n", firstLine(r.ptErr))
		}
	}
	for _, r := range rows {
		if r.op != "notified put" || len(r.eng) == 0 {
			continue
		}
		for _, q := range rows {
			if q.tls == r.tls && q.op == "put+flag" && len(q.eng) > 0 {
				fmt.Fprintf(w, "%-4s notified put ÷ put+flag (64 KiB hop): %.2f (%.2f)\n", r.tls, figures.Median(r.eng)/figures.Median(q.eng), figures.Median(r.engT)/figures.Median(q.engT))
			}
		}
	}
	fmt.Fprintln(w, "ratios are engine ÷ baseline, overall (typical): for MiB/s above 1 is better, for µs below 1 is better")
	fmt.Fprintln(w, "notified put: a 64 KiB put and a notification in one batch, the peer waiting in WaitNotification; put+flag: the put, Wait, then an 8-byte put to a flag the peer polls; ucx_perftest beside both: ucp_am_lat, 64 KiB")
}

// submitRounds submits the batch ts (len batch) again and again until n
// transfers have gone, then drains the engine.
func submitRounds(ctx context.Context, eng *engine.Engine, ts []engine.Transfer, ids []engine.ID, n, batch int) error {
	for sent := 0; sent < n; sent += batch {
		for k := 0; k < batch; {
			m, err := eng.SubmitBatchContext(ctx, ts[k:], ids[k:])
			if err != nil {
				return err
			}
			k += m
		}
	}
	return eng.Drain(ctx)
}
