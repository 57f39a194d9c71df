package ucx

/*
#cgo LDFLAGS: -lucp -lucs -lucm
#include <stdlib.h>
#include <sys/socket.h>
#include "hc.h"
*/
import "C"

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
)

// Config configures a Backend. The zero value has no listener (the backend
// only connects out) and default polling.
type Config struct {
	// Listen is the TCP address peers connect to ("10.0.0.5:13337",
	// "127.0.0.1:0" for a free port, "[::1]:0"); "" for no listener. The IP
	// must be numeric: the listener binds exactly that interface.
	Listen string
	// Spin is how long the progress goroutine keeps polling the worker
	// after it last saw an event before it sleeps on the worker's event fd
	// (default 0: it sleeps at once). It spins only while this side has no
	// transfers of its own in flight (then the engine polls). Negative:
	// never sleep (a dedicated passive peer serving tcp puts and gets at
	// full speed, one CPU busy).
	Spin time.Duration
	// CallerProgress: no progress goroutine. Only the engine's Reap moves
	// the worker — use it with engine.ModePoll and call Poll continually
	// (a tcp peer's puts into this side's pool need this side to progress
	// too). ReadyFD is then -1. For latency-bound loops that poll anyway:
	// no second thread contends for the worker.
	CallerProgress bool
	// SharedMemory makes put/get between processes of one host use UCX's
	// shared-memory transports (posix, sysv, cma in UCX_TLS, e.g.
	// UCX_TLS=shm,tcp). UCX 1.13 never gives shared-memory lanes to the
	// listener's connection, nor RMA lanes to a worker-address endpoint
	// with peer error handling; so each peer gets a second, data endpoint
	// from its worker address without peer error handling, while the
	// listener's connection (peer error handling) watches for failure: when
	// it fails, the data endpoint is force-closed and what was in flight on
	// it fails once. Default false: transfers run on the listener's
	// connection itself (UCX_TLS=tcp, or RDMA transports between hosts).
	SharedMemory bool
	// Timeout is how long a batch of transfers to one peer may stay
	// outstanding before the peer is declared gone: the batch's transfers
	// (and every other transfer outstanding to that peer) fail once with an
	// error wrapping ErrPeerGone and backend.ErrTimeout, and the peer is
	// disconnected. It catches what UCX's peer error handling does not see:
	// a peer that stopped (SIGSTOP, a hung host) with its connection still
	// open, or a shared-memory message queue that a killed process left
	// half written. Default (0) 30 s; negative: never.
	Timeout time.Duration
	// Logger receives connection events (default: the engine's, or
	// slog.Default before Attach).
	Logger *slog.Logger
	// NotifyQueue is the capacity of the Notifications channel (default
	// DefaultNotifyQueue). Notifications beyond it wait in the backend,
	// unacknowledged: their senders' transfers stay outstanding.
	NotifyQueue int
	// RegisterGap is the largest gap between two regions of one
	// RegisterRegions call that a covering registration bridges: regions
	// that lie close together in one mapping are registered as one range,
	// gaps included, within the policy docs/remote.md describes
	// ("Covering registrations"). Default (0) DefaultRegisterGap, at most
	// MaxRegisterGap; negative: never (one registration per run of
	// touching regions).
	RegisterGap int
}

// DefaultRegisterGap is Config.RegisterGap's default; MaxRegisterGap its
// largest value.
const (
	DefaultRegisterGap = 64 << 10
	MaxRegisterGap     = 1 << 30
)

// DefaultTimeout is Config.Timeout's default.
const DefaultTimeout = 30 * time.Second

// PeerInfo describes one peer, for Peers.
type PeerInfo struct {
	Index  uint32 // the index Remote locations name
	Addr   string // the address Connect dialled ("" for accepted peers)
	Ready  bool   // the handshake finished and the peer is alive
	Size   uint64 // bytes of the window the peer exported
	Failed error  // why the peer is gone, once it is
}

const (
	stateConnecting int32 = C.HC_CONNECTING
	stateReady      int32 = C.HC_READY
	stateFailed     int32 = C.HC_FAILED
	stateClosed     int32 = C.HC_CLOSED
)

// window is a peer's exported window as this side knows it: its arenas in
// increasing offsets (holes where arenas were removed). Immutable once
// published: an arena update publishes a new one (copy on write).
type window struct {
	n     int
	size  uint64 // the end of the last arena
	start [backend.MaxArenas]uint64
	len   [backend.MaxArenas]uint64
	// direct[i] is the peer's arena i mapped into this process (shared
	// memory, ucp_rkey_ptr), or nil: a transfer to it is a copy by the
	// submitter (Execute).
	direct [backend.MaxArenas][]byte
}

// goneWindow is every gone peer's window: no arena.
var goneWindow window

// find is the arena holding [off, off+n), or -1; straddle says the range
// starts in an arena and runs past it.
func (w *window) find(off uint64, n uint32) (i int, straddle bool) {
	end := off + uint64(n)
	for i := 0; i < w.n; i++ {
		if off < w.start[i]+w.len[i] {
			if off < w.start[i] {
				return -1, false // in a hole
			}
			if end > w.start[i]+w.len[i] || end < off {
				return -1, true
			}
			return i, false
		}
	}
	return -1, false
}

// peer is the Go side of a C hc_peer. Its window is published (win) before
// state is stored stateReady, and replaced when the peer adds or removes
// an arena (under mu); Prepare and Execute load it without locks.
type peer struct {
	idx    uint32
	addr   string
	state  atomic.Int32
	status int32 // the failure, before state leaves ready
	win    atomic.Pointer[window]
	// users counts direct copies in progress (Execute); fenced, set
	// before the mappings go (fence), makes new ones fail. A removed
	// arena's mapping is waited out the same way (syncWindow).
	users  atomic.Int32
	fenced atomic.Bool
	// settled is closed (and dropped) when the handshake ends, ready or
	// failed (syncPeer, under mu): Connect waits on it.
	settled chan struct{}
}

// Backend is a backend.Backend whose targets are other processes' pools,
// reached through UCX (see doc.go). Create it with New, give it to
// engine.Config.Backend, then Connect to peers.
type Backend struct {
	// mu serializes every call into UCX: the worker is created with
	// UCS_THREAD_MODE_SERIALIZED, and the engine's owner, Connect and the
	// progress goroutine all reach it.
	mu  sync.Mutex
	be  *C.hc_be
	cfg Config
	log *slog.Logger

	addr       string
	dataWorker bool                    // a second worker carries the data (SharedMemory)
	peers      atomic.Pointer[[]*peer] // copy-on-write, appended under mu

	// Under mu.
	// regAddrs, regLens: RegisterRegions' and UnregisterRegions' spans
	// for C, reused (a registration the cache answers allocates nothing).
	regAddrs, regLens []uint64
	// uncached: RegisterUncached's registrations not yet released
	// (destroy releases them).
	uncached   map[*C.hc_reg]struct{}
	timeout    time.Duration // Config.Timeout with its default; <= 0: none
	lastExpire time.Time     // the watchdog's last look (expire)
	lastCtl    time.Time     // the control worker's last progress
	closed     bool
	signaled   bool // wakeFD written since the last Reap
	idle       bool // the progress goroutine sleeps with no timeout (Flush wakes it)
	// delivered: deliver put notifications into the channel since the
	// progress goroutine last looked (it yields before it sleeps).
	delivered bool
	exported  [backend.MaxArenas]bool
	// local[s] is arena s's memory (MapArena; read by Execute).
	local [backend.MaxArenas][]byte
	// inflight: published (Flush), not reaped. Written by the owner,
	// read by the progress goroutine and the watchdog.
	inflight atomic.Int64

	// Owner-only (engine's owner flag): staging.
	reaps    uint32 // Reap calls (CallerProgress: when to read the clock)
	checked  bool   // CallerProgress: Check ran since the last Reap
	attached bool
	depth    int
	staged   int
	urgent   bool   // a notification is staged: Flush posts the batch itself
	pub      uint32 // sq_pub: the end of what Flush published
	env      backend.Env
	sq       []C.hc_sqe
	cq       []C.hc_cqe

	// polling is 1 while the progress goroutine will progress the
	// workers again within 50 µs: Flush may leave a batch to it.
	polling atomic.Int32
	// batchWaits counts WaitCompletions calls (tests).
	batchWaits atomic.Int64

	notes   chan Notification // received notifications (Notifications)
	closing chan struct{}     // closed by Close

	wakeFD int // eventfd the engine sleeps on (ReadyFD)
	stopFD int // eventfd that stops the progress goroutine
	done   chan struct{}
}

var _ backend.Backend = (*Backend)(nil)

func ucsString(st C.int) string {
	switch st {
	case C.HC_ST_PEER_GONE:
		return "peer gone"
	case C.HC_ST_BOUNDS:
		return "remote range outside the peer's export"
	case C.HC_ST_CANCELED_STAGED:
		return "canceled before posting"
	case C.HC_ST_NO_SLOT:
		return "no request slot left"
	case C.HC_ST_PROTOCOL:
		return "malformed handshake or notification"
	}
	return C.GoString(C.ucs_status_string(C.ucs_status_t(st)))
}

func ucxErr(call string, st C.int) error {
	return fmt.Errorf("ucx: %s: %s: %w", call, ucsString(st), ErrUCX)
}

// New creates a UCP context and worker (UCX reads UCX_TLS,
// UCX_NET_DEVICES and its other variables from the environment now), starts
// the listener if cfg.Listen is set, and starts the progress goroutine.
func New(cfg Config) (*Backend, error) {
	b := &Backend{cfg: cfg, log: cfg.Logger, wakeFD: -1, stopFD: -1, timeout: cfg.Timeout}
	if b.timeout == 0 {
		b.timeout = DefaultTimeout
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	if cfg.NotifyQueue < 0 {
		return nil, fmt.Errorf("ucx: NotifyQueue %d: want >= 0: %w", cfg.NotifyQueue, backend.ErrBadConfig)
	}
	gap := cfg.RegisterGap
	switch {
	case gap == 0:
		gap = DefaultRegisterGap
	case gap < 0:
		gap = 0
	case gap > MaxRegisterGap:
		return nil, fmt.Errorf("ucx: RegisterGap %d: want at most MaxRegisterGap (%d): %w", gap, MaxRegisterGap, backend.ErrBadConfig)
	}
	q := cfg.NotifyQueue
	if q == 0 {
		q = DefaultNotifyQueue
	}
	b.notes, b.closing = make(chan Notification, q), make(chan struct{})
	empty := []*peer{}
	b.peers.Store(&empty)
	var cerr *C.char
	var shm C.int
	if cfg.SharedMemory {
		shm = 1
	}
	if st := C.hc_open(&b.be, shm, &cerr); st != 0 {
		return nil, ucxErr(C.GoString(cerr), st)
	}
	b.dataWorker = b.be.dworker != b.be.worker
	b.be.reg_gap = C.uint64_t(gap)
	var err error
	if b.wakeFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err == nil {
		b.stopFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	}
	if err != nil {
		b.destroy()
		return nil, fmt.Errorf("ucx: eventfd: %w", err)
	}
	if cfg.Listen != "" {
		fam, ip, port, err := parseAddr(cfg.Listen)
		if err != nil {
			b.destroy()
			return nil, err
		}
		var bound C.uint16_t
		if st := C.hc_listen(b.be, fam, (*C.uint8_t)(unsafe.Pointer(&ip[0])), C.uint16_t(port), &bound); st != 0 {
			b.destroy()
			return nil, fmt.Errorf("ucx: listen on %s: %s: %w", cfg.Listen, ucsString(st), ErrUCX)
		}
		h, _, _ := net.SplitHostPort(cfg.Listen)
		b.addr = net.JoinHostPort(h, strconv.Itoa(int(bound)))
	}
	b.done = make(chan struct{})
	if cfg.CallerProgress {
		close(b.done)
	} else {
		go b.progressLoop()
	}
	return b, nil
}

// parseAddr turns "ip:port" into what hc's sockaddr helper takes. ip is
// 16 bytes (only the first 4 are used for IPv4) so that it is never empty.
func parseAddr(addr string) (C.int, [16]byte, uint16, error) {
	var ip16 [16]byte
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, ip16, 0, fmt.Errorf("ucx: address %q: %w: %v", addr, ErrBadAddress, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return 0, ip16, 0, fmt.Errorf("ucx: address %q: port: %w", addr, ErrBadAddress)
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return 0, ip16, 0, fmt.Errorf("ucx: address %q: not a numeric IP: %w", addr, ErrBadAddress)
	}
	if v4 := ip.To4(); v4 != nil {
		copy(ip16[:], v4)
		return C.AF_INET, ip16, uint16(port), nil
	}
	copy(ip16[:], ip.To16())
	return C.AF_INET6, ip16, uint16(port), nil
}

// Addr is the listener's address ("ip:port", the port filled in), or "".
func (b *Backend) Addr() string { return b.addr }

// ThreadMode is the thread mode UCX gave the worker ("serialized" is what
// this package asks for).
func (b *Backend) ThreadMode() string {
	switch b.be.thread_mode {
	case C.UCS_THREAD_MODE_SINGLE:
		return "single"
	case C.UCS_THREAD_MODE_SERIALIZED:
		return "serialized"
	case C.UCS_THREAD_MODE_MULTI:
		return "multi"
	}
	return "unknown"
}

// Connect connects to the peer listening at addr ("ip:port"), exchanges the
// exported windows (each side's mapped arenas: base addresses and remote
// keys), and returns the peer's index for engine.Remote. A peer index is
// never reused: after a peer failed, Connect again gives a new one.
// Connect waits for the handshake's end, not on a timer: with the progress
// goroutine on the peer's settled channel, with CallerProgress on the
// workers' event fds while it progresses them itself.
func (b *Backend) Connect(ctx context.Context, addr string) (uint32, error) {
	fam, ip, port, err := parseAddr(addr)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errBackendClosed
	}
	var idx C.uint32_t
	st := C.hc_connect(b.be, fam, (*C.uint8_t)(unsafe.Pointer(&ip[0])), C.uint16_t(port), &idx)
	if int(b.be.npeers) == len(*b.peers.Load()) { // no peer was created
		b.mu.Unlock()
		return 0, fmt.Errorf("ucx: connect %s: %s: %w", addr, ucsString(st), ErrConnect)
	}
	p := b.addPeer(uint32(idx), addr)
	settled := p.settled // nil once the handshake ended (addPeer synced it)
	b.mu.Unlock()
	b.wakeProgress()
	for {
		switch p.state.Load() {
		case stateReady:
			return p.idx, nil
		case stateFailed, stateClosed:
			if p.status == C.HC_ST_PROTOCOL {
				return 0, fmt.Errorf("ucx: connect %s: %s: %w: %w", addr, ucsString(C.int(p.status)), ErrConnect, ErrProtocol)
			}
			return 0, fmt.Errorf("ucx: connect %s: %s: %w", addr, ucsString(C.int(p.status)), ErrConnect)
		}
		if ctx.Err() != nil {
			b.Disconnect(p.idx)
			return 0, fmt.Errorf("ucx: connect %s: %w: %w", addr, ErrConnect, ctx.Err())
		}
		if b.cfg.CallerProgress {
			b.connectProgress(ctx)
			continue
		}
		// The progress goroutine runs the handshake; syncPeer closes
		// settled when it ends, either way.
		select {
		case <-ctx.Done():
		case <-settled:
		}
	}
}

// connectWait bounds one sleep of Connect under CallerProgress on the
// workers' event fds: how late a canceled context without a deadline is
// noticed, and a progress of the workers however quiet their fds stay.
const connectWait = 10 * time.Millisecond

// connectProgress is one round of Connect under CallerProgress, where
// nobody else need progress the workers: progress them (the handshake's
// messages), then arm them and sleep on their event fds until the next
// event, the context's deadline or connectWait. An event that arrives
// after the arm makes an fd readable, whoever progresses it meanwhile (a
// Poll of the engine on another goroutine), and hc_arm looks once more
// after arming: nothing that arrived before the sleep is slept on.
func (b *Backend) connectProgress(ctx context.Context) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.progress(true, C.HC_ROUNDS)
	if !b.handshaking() {
		b.mu.Unlock()
		return
	}
	st := C.hc_arm(b.be)
	fds := []unix.PollFd{{Fd: int32(b.be.efd), Events: unix.POLLIN}, {Fd: int32(b.be.defd), Events: unix.POLLIN}}
	if b.be.defd == b.be.efd {
		fds = fds[:1]
	}
	b.mu.Unlock()
	if st == C.UCS_ERR_BUSY {
		return
	}
	wait := connectWait
	if dl, ok := ctx.Deadline(); ok {
		wait = max(min(wait, time.Until(dl)), 0)
	}
	ts := unix.NsecToTimespec(wait.Nanoseconds())
	_, _ = unix.Ppoll(fds, &ts, nil)
}

// Disconnect closes the connection to peer: transfers outstanding to it
// complete with ErrPeerGone, once.
func (b *Backend) Disconnect(idx uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := *b.peers.Load()
	if b.closed || int(idx) >= len(ps) {
		return
	}
	b.fence(ps[idx])
	C.hc_peer_close(b.be, C.uint32_t(idx), C.HC_ST_PEER_GONE)
	b.syncPeer(ps[idx])
}

// fence stops direct copies to p (Execute) and waits for those in progress
// to finish, before hc_peer_close unmaps the peer's memory (under mu).
// Execute counts itself in users before it looks at fenced, and fence sets
// fenced before it looks at users (sequentially consistent atomics): a copy
// either sees the fence and does not start, or is waited for.
func (b *Backend) fence(p *peer) {
	p.fenced.Store(true)
	for p.users.Load() != 0 {
		runtime.Gosched() // a copy of at most 4 GiB, usually microseconds
	}
}

// fenceAll fences every peer (Cancel, Close: C closes them all).
func (b *Backend) fenceAll() {
	for _, p := range *b.peers.Load() {
		b.fence(p)
	}
}

// Peers lists every peer this backend ever had, by index.
func (b *Backend) Peers() []PeerInfo {
	ps := *b.peers.Load()
	out := make([]PeerInfo, len(ps))
	for i, p := range ps {
		st := p.state.Load()
		out[i] = PeerInfo{Index: p.idx, Addr: p.addr, Ready: st == stateReady}
		if st == stateReady {
			out[i].Size = p.win.Load().size
		}
		if st >= stateFailed {
			out[i].Failed = fmt.Errorf("ucx: peer %d: %s: %w", p.idx, ucsString(C.int(p.status)), ErrPeerGone)
		}
	}
	return out
}

// settle ends p's handshake for Connect, once its state left connecting
// (under mu).
func (p *peer) settle() {
	if p.settled != nil {
		close(p.settled)
		p.settled = nil
	}
}

// addPeer publishes a new peer (under mu).
func (b *Backend) addPeer(idx uint32, addr string) *peer {
	p := &peer{idx: idx, addr: addr, settled: make(chan struct{})}
	old := *b.peers.Load()
	ps := make([]*peer, len(old), len(old)+1)
	copy(ps, old)
	ps = append(ps, p)
	b.peers.Store(&ps)
	b.syncPeer(p)
	return p
}

// cpeer is C's view of peer idx (under mu).
func (b *Backend) cpeer(idx uint32) *C.hc_peer {
	return unsafe.Slice(b.be.peers, b.be.npeers)[idx]
}

// syncPeer brings p's Go state in line with its C state (under mu).
func (b *Backend) syncPeer(p *peer) {
	cp := b.cpeer(p.idx)
	cs := int32(cp.state)
	if cs == stateFailed {
		// Close the endpoint now (not in UCX's callback): UCX completes
		// what is still in flight to it with an error.
		b.fence(p)
		C.hc_peer_close(b.be, C.uint32_t(p.idx), C.HC_ST_PEER_GONE)
		cs = stateClosed
	}
	old := p.state.Load()
	if cs == old {
		return
	}
	if old == stateConnecting {
		// After the switch below stored the new state: a Connect woken
		// by the close finds it.
		defer p.settle()
	}
	switch {
	case cs == stateReady && old == stateConnecting:
		w := b.loadWindow(cp)
		p.win.Store(w)
		p.state.Store(stateReady)
		b.log.Info("ucx: peer ready", "peer", p.idx, "addr", p.addr, "arenas", w.n, "bytes", w.size)
	case cs >= stateFailed:
		p.status = int32(cp.fail_status)
		p.state.Store(cs)
		// Nothing reaches a gone peer's window again (Prepare checks
		// the state; direct copies are fenced): its memory goes, so
		// that a peer gone keeps only its index and its failure.
		p.win.Store(&goneWindow)
		lvl := slog.LevelWarn
		if p.status == C.UCS_ERR_CANCELED || p.status == C.HC_ST_PEER_GONE {
			lvl = slog.LevelInfo // closed on purpose: Close, Disconnect, unmap
		}
		b.log.Log(context.Background(), lvl, "ucx: peer gone", "peer", p.idx, "addr", p.addr, "status", ucsString(C.int(p.status)))
	}
}

// handle acts on what hc_progress reported (under mu).
func (b *Backend) handle(ev C.uint32_t) {
	if ev&C.HC_EV_CONNREQ != 0 {
		for {
			var idx C.uint32_t
			n := b.be.npeers
			st := C.hc_accept(b.be, &idx)
			if st == 1 {
				break
			}
			if b.be.npeers != n {
				b.addPeer(uint32(idx), "")
			}
		}
	}
	if ev&(C.HC_EV_HELLO|C.HC_EV_FAIL|C.HC_EV_ARENA) != 0 {
		for _, p := range *b.peers.Load() {
			cp := b.cpeer(p.idx)
			if cp.state == C.HC_CONNECTING && cp.hello != nil {
				C.hc_import(b.be, C.uint32_t(p.idx))
			}
			b.syncPeer(p)
			if cp.upd_head != nil && p.state.Load() == stateReady {
				if C.hc_arena_apply(b.be, C.uint32_t(p.idx)) > 0 {
					b.syncWindow(p)
					C.hc_arena_ack(b.be, C.uint32_t(p.idx)) // after the window is published
				}
				b.syncPeer(p) // a malformed update failed it
			}
		}
	}
}

// loadWindow reads a peer's window from C (under mu).
func (b *Backend) loadWindow(cp *C.hc_peer) *window {
	w := &window{n: int(cp.narenas)}
	for i := 0; i < w.n; i++ {
		w.start[i] = uint64(cp.w.start[i])
		w.len[i] = uint64(cp.w.len[i])
		w.size = w.start[i] + w.len[i]
		if cp.w.direct[i] != nil {
			w.direct[i] = unsafe.Slice((*byte)(cp.w.direct[i]), w.len[i])
		}
	}
	return w
}

// syncWindow publishes peer p's window after arena updates (under mu), and
// waits out the direct copies that may still use the old one: a removed
// arena's mapping goes once the removal's flush completed (after this
// returns, in a later progress). Execute counts itself in users before it
// loads the window (sequentially consistent atomics, as fence): a copy
// either sees the new window or is waited for.
func (b *Backend) syncWindow(p *peer) {
	w := b.loadWindow(b.cpeer(p.idx))
	p.win.Store(w)
	for p.users.Load() != 0 {
		runtime.Gosched()
	}
	b.log.Info("ucx: peer's window changed", "peer", p.idx, "arenas", w.n, "bytes", w.size)
}

// progress drives the data worker (and the control worker with ctl) and
// acts on their events (under mu).
func (b *Backend) progress(ctl bool, rounds C.int) C.uint32_t {
	var c C.int
	if ctl {
		c = 1
		b.lastCtl = time.Now()
	}
	return b.progressed(C.hc_progress(b.be, c, rounds))
}

// pollRounds is how many ucp_worker_progress calls a Reap or Flush makes
// while they report events: with CallerProgress one, as ucx_perftest's
// loop makes one per look at its memory — the caller polls again, and over
// tcp the call after the last event is an epoll_wait that finds nothing
// (about a microsecond here), which a ping-pong's answer would wait behind
// (docs/remote.md, "Latency"); otherwise HC_ROUNDS (the progress goroutine
// or a waiter sleeps after it).
func (b *Backend) pollRounds() C.int {
	if b.cfg.CallerProgress {
		return 1
	}
	return C.HC_ROUNDS
}

// progressed acts on what a progress call reported (under mu): connection
// events, and the engine's wake-up when completions wait in the ring (not
// with CallerProgress: nobody sleeps on ReadyFD, and the write would be a
// system call per poll).
func (b *Backend) progressed(ev C.uint32_t) C.uint32_t {
	if ev&^C.HC_EV_PROGRESS != 0 {
		b.handle(ev)
	}
	if ev&C.HC_EV_NOTIFY != 0 || b.notifyWaiting() {
		b.deliver()
	}
	if b.be.cq_head != b.be.cq_tail && !b.signaled && !b.cfg.CallerProgress {
		b.signaled = true
		var one = [8]byte{1}
		unix.Write(b.wakeFD, one[:])
	}
	return ev
}

// expire runs the watchdog (Config.Timeout) at most every 100 ms: peers
// with a batch outstanding for longer than the timeout fail, and their
// transfers complete with ErrPeerGone and backend.ErrTimeout (under mu).
func (b *Backend) expire(now time.Time) {
	if b.timeout <= 0 || b.inflight.Load() == 0 || now.Sub(b.lastExpire) < 100*time.Millisecond {
		return
	}
	b.lastExpire = now
	if C.hc_expire(b.be, C.uint64_t(b.timeout)) > 0 {
		b.log.Warn("ucx: transfers outstanding longer than the timeout: failing their peer", "timeout", b.timeout)
		b.handle(C.HC_EV_FAIL)
	}
}

func (b *Backend) wakeProgress() {
	var one = [8]byte{1}
	unix.Write(b.stopFD, one[:])
}

// progressLoop keeps the worker moving when the engine does not: it accepts
// peers, answers handshakes, serves a tcp peer's puts and gets into this
// side's pool, and finishes transfers while the engine sleeps (then it
// wakes the engine through wakeFD). It sleeps on the worker's event fd
// (ucp_worker_arm) when nothing happens.
func (b *Backend) progressLoop() {
	defer close(b.done)
	fds := []unix.PollFd{{Fd: int32(b.stopFD), Events: unix.POLLIN}, {Fd: int32(b.be.efd), Events: unix.POLLIN}}
	if b.be.defd != b.be.efd {
		fds = append(fds, unix.PollFd{Fd: int32(b.be.defd), Events: unix.POLLIN})
	}
	last := time.Now()
	var buf [8]byte
	for {
		// The engine's owner progresses the worker itself while it holds
		// the mutex (Flush, Reap): do not queue behind it — on a busy
		// machine a goroutine that takes the mutex and is preempted stalls
		// the engine for a whole time slice. Look again shortly (polling
		// stays set: Flush may leave its batch to us).
		if !b.mu.TryLock() {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		b.idle = false
		if b.closed {
			b.mu.Unlock()
			return
		}
		b.polling.Store(1)
		b.expire(time.Now())
		// Post what Flush left to us, then progress both workers.
		ev := b.progressed(C.hc_submit(b.be, 0)) | b.progress(true, C.HC_ROUNDS)
		now := time.Now()
		if ev != 0 {
			last = now
		}
		if b.inflight.Load() == 0 && (b.cfg.Spin < 0 || now.Sub(last) < b.cfg.Spin) {
			b.mu.Unlock()
			runtime.Gosched()
			continue
		}
		// Busy: requests are in UCX (not only completions waiting in the
		// ring for the engine, which progress already signalled). Then
		// we look again within 50 µs, and Flush may leave batches to us;
		// idle, we sleep until an event: Flush posts its own (polling
		// 0 first, then a last look at what was published before).
		busy := b.be.inflight > 0
		if !busy {
			b.polling.Store(0)
			b.progressed(C.hc_submit(b.be, 0))
			if busy = b.be.inflight > 0; busy {
				b.polling.Store(1)
			}
		}
		st := C.hc_arm(b.be)
		waiting := b.notifyWaiting()
		handshake := b.handshaking()
		b.idle = !busy && !waiting && !handshake && st != C.UCS_ERR_BUSY
		delivered := b.delivered
		b.delivered = false
		b.mu.Unlock()
		if delivered {
			// A waiter the channel woke is queued on this goroutine's
			// P, and ppoll below keeps the P: the waiter would run
			// only when the runtime's monitor retakes it (113–180 µs
			// a notification, measured). Let it run first.
			runtime.Gosched()
		}
		if st == C.UCS_ERR_BUSY {
			continue
		}
		// While transfers are in flight, wake up every 50µs even without
		// an event: UCX completes some requests (a flush over shared
		// memory) in ucp_worker_progress without signalling the event fd,
		// the engine may be asleep on ReadyFD, and Flush may have left a
		// batch to us.
		var ts *unix.Timespec
		if busy {
			ts = &unix.Timespec{Nsec: 50_000}
		} else if waiting || handshake {
			// Notifications wait for room in the channel, or a
			// handshake is under way: look again every millisecond.
			// UCX 1.13 does not always signal the event fd when a
			// connection's wire-up over RDMA verbs (rc_verbs with a
			// ud_verbs keepalive lane, through rdmacm) can move on:
			// both sides' hellos then wait in UCX, each progress
			// goroutine asleep, until the keepalive timer (20 s)
			// wakes a worker; one ucp_worker_progress finishes it.
			ts = &unix.Timespec{Nsec: 1_000_000}
		}
		for {
			_, err := unix.Ppoll(fds, ts, nil)
			if err != unix.EINTR {
				break
			}
		}
		if fds[0].Revents != 0 {
			unix.Read(b.stopFD, buf[:])
		}
		last = time.Now()
	}
}

// settle progresses both workers until a round reports nothing, acting on
// what they report (tests: a CallerProgress backend brought to rest).
func (b *Backend) settle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 0; i < 1000 && !b.closed && b.progress(true, C.HC_ROUNDS)&C.HC_EV_PROGRESS != 0; i++ {
	}
}

// armLook is what the progress goroutine does before it sleeps, for tests:
// hc_arm, then a look at the workers' event fds without waiting. busy: the
// arm said that events wait (the goroutine progresses instead of
// sleeping); ready: an event fd is readable (a sleeper would wake at once);
// err: the arm failed otherwise.
func (b *Backend) armLook() (busy, ready bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, false, errBackendClosed
	}
	st := C.hc_arm(b.be)
	if st != 0 && st != C.UCS_ERR_BUSY {
		return false, false, ucxErr("ucp_worker_arm", st)
	}
	fds := []unix.PollFd{{Fd: int32(b.be.efd), Events: unix.POLLIN}}
	if b.be.defd != b.be.efd {
		fds = append(fds, unix.PollFd{Fd: int32(b.be.defd), Events: unix.POLLIN})
	}
	// A signal (the Go runtime's preemption, above all) can interrupt
	// even a poll that does not wait: look again.
	n, err := unix.Poll(fds, 0)
	for err == unix.EINTR {
		n, err = unix.Poll(fds, 0)
	}
	if err != nil {
		return false, false, fmt.Errorf("ucx: poll the workers' event fds: %w", err)
	}
	return st == C.UCS_ERR_BUSY, n > 0, nil
}

// handshaking says that a peer's handshake is under way (connecting: our
// hello or the peer's not yet through; under mu).
func (b *Backend) handshaking() bool {
	for _, p := range *b.peers.Load() {
		if p.state.Load() == stateConnecting {
			return true
		}
	}
	return false
}

// destroy releases everything (the progress goroutine is stopped).
func (b *Backend) destroy() {
	if b.be != nil {
		b.fenceAll()
		for r := range b.uncached {
			C.hc_reg_uncached_free(b.be, r)
		}
		b.uncached = nil
		C.hc_destroy(b.be)
		b.be = nil
	}
	if b.wakeFD >= 0 {
		unix.Close(b.wakeFD)
		b.wakeFD = -1
	}
	if b.stopFD >= 0 {
		unix.Close(b.stopFD)
		b.stopFD = -1
	}
}

// EndpointInfo is UCX's description of the endpoint to peer idx
// (ucp_ep_print_info): which transports and devices carry its RMA, AM and
// wireup lanes. "" when the peer has no endpoint.
func (b *Backend) EndpointInfo(idx uint32) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ""
	}
	s := C.hc_ep_info(b.be, C.uint32_t(idx))
	if s == nil {
		return ""
	}
	defer C.free(unsafe.Pointer(s))
	return C.GoString(s)
}

// Offset is the offset of local address addr in the window this backend
// exports (every mapped arena, in the order they were mapped, end to end;
// an arena unmapped leaves a hole, offsets are never reused): the offset
// a peer passes to engine.Remote to reach addr (e.g.
// Offset(block.Addr()) for an engine block). It is the same for every
// peer and does not change while the arena stays mapped. ok is false when
// addr is in no mapped arena.
func (b *Backend) Offset(addr uintptr) (off uint64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, false
	}
	for s := 0; s < backend.MaxArenas; s++ {
		if b.be.memh[s] == nil {
			continue
		}
		base, n := uint64(b.be.arena_addr[s]), uint64(b.be.arena_len[s])
		if a := uint64(addr); a >= base && a < base+n {
			return uint64(b.be.win_start[s]) + (a - base), true
		}
	}
	return 0, false
}

// Endpoints is how many UCX endpoints the backend holds: each peer's
// control endpoint (and data endpoint with SharedMemory) until it is
// closed, and those whose close has not completed yet (tests: a peer gone
// leaves none behind).
func (b *Backend) Endpoints() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0
	}
	n := 0
	for _, p := range unsafe.Slice(b.be.peers, b.be.npeers) {
		C.hc_peer_busy(b.be, p.idx) // reaps close requests that completed
		for _, ep := range []bool{p.ep != nil, p.dep != nil && p.dep != p.ep, p.close_req != nil, p.dclose_req != nil} {
			if ep {
				n++
			}
		}
	}
	return n
}
