package ucx

/*
#include "hc.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/hugepage"
)

// Opcodes (backend.Op.Code).
const (
	opPut    = C.HC_PUT    // host → remote
	opGet    = C.HC_GET    // remote → host
	opNotify = C.HC_NOTIFY // host → remote at Notify: a notification
	// A put or get to a peer whose memory is mapped here (shared memory):
	// the submitter copies (Execute). Op.Src is the offset in the local
	// arena, Op.Dst the offset in the peer's window (Execute finds its
	// arena in the window then: the peer may have removed it since).
	opDirectPut = 16
	opDirectGet = 17
	// inlineMax is the largest direct transfer the submitter copies
	// (Execute, only with CallerProgress); the others are copied by
	// hc_submit in the engine's Flush.
	inlineMax = 4 << 10
)

// Describe says what the backend is: "ucx", the listener's address, remote
// locations only.
func (b *Backend) Describe() backend.Description {
	dev := b.addr
	if dev == "" {
		dev = "ucx"
	}
	feat := []string{"ucp-rma", "peer-error-handling", "worker-efd"}
	if tls := os.Getenv("UCX_TLS"); tls != "" {
		feat = append(feat, "UCX_TLS="+tls)
	}
	return backend.Description{
		Name:         "ucx",
		Device:       dev,
		Locs:         1 << backend.LocRemote,
		Align:        1,
		CPUThreshold: -1,
		Features:     feat,
	}
}

// Attach sizes the staging and completion arrays (C memory) for
// env.QueueDepth transfers.
func (b *Backend) Attach(env backend.Env) error {
	if b.attached {
		return fmt.Errorf("ucx: second Attach: %w", backend.ErrBadConfig)
	}
	if env.QueueDepth <= 0 || env.QueueDepth > 1<<20 {
		return fmt.Errorf("ucx: QueueDepth %d: want 1..%d: %w", env.QueueDepth, 1<<20, backend.ErrBadConfig)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errBackendClosed
	}
	if st := C.hc_attach(b.be, C.uint32_t(env.QueueDepth)); st != 0 {
		return ucxErr("attach", st)
	}
	b.attached = true
	b.depth = env.QueueDepth
	b.env = env
	if env.Logger != nil && b.cfg.Logger == nil {
		b.log = env.Logger
	}
	b.sq = unsafe.Slice(b.be.sq, int(b.be.sq_mask)+1)
	b.cq = unsafe.Slice(b.be.cq, int(b.be.cq_mask)+1)
	return nil
}

// MapArena registers mem with UCX (ucp_mem_map) and packs its remote key;
// peers that connect from now on can reach it. The backend address of a
// host byte is its virtual address (Op.Src/Dst of a host end is a pointer).
func (b *Backend) MapArena(slot int, a *hugepage.Arena) (uint64, error) {
	return b.mapMem(slot, a.Bytes(), a.Locked())
}

// mapMem is MapArena for any memory that stays mapped until UnmapArena
// (tests export plain mmap'd memory).
func (b *Backend) mapMem(slot int, mem []byte, locked bool) (uint64, error) {
	size := len(mem)
	if slot < 0 || slot >= backend.MaxArenas || size <= 0 {
		return 0, fmt.Errorf("ucx: map arena %d (%d bytes): %w", slot, size, backend.ErrBadConfig)
	}
	addr := uint64(uintptr(unsafe.Pointer(&mem[0])))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBackendClosed
	}
	if b.be.memh[slot] != nil {
		return 0, fmt.Errorf("ucx: map arena %d: slot in use: %w", slot, backend.ErrBadConfig)
	}
	var lock C.int
	if locked {
		lock = 1
	}
	var note *C.char
	if st := C.hc_map(b.be, C.int(slot), C.uint64_t(addr), C.uint64_t(size), lock, &note); st != 0 {
		return 0, fmt.Errorf("ucx: ucp_mem_map arena %d %#x+%d: %s: %w", slot, addr, size, ucsString(st), ErrUCX)
	}
	if note != nil {
		b.log.Warn("ucx: arena exported as registered memory: shared-memory peers reach it through messages, not directly",
			"arena", slot, "bytes", size, "why", C.GoString(note))
	}
	// The engine publishes the arena to submitters (Execute reads this)
	// only after MapArena returned.
	b.local[slot] = mem
	// Connected peers learn of the arena (hc_map sent it to each) before
	// it is used: before any of its blocks is handed out, so before an
	// application can name it to a peer.
	b.awaitArenaAcks("map", slot)
	return addr, nil
}

// arenaAckWait bounds how long MapArena and UnmapArena wait for the peers'
// acknowledgements of an arena update (Config.Timeout when shorter).
const arenaAckWait = 10 * time.Second

// awaitArenaAcks progresses the workers until every peer acknowledged the
// arena updates sent to it (under mu). A peer that does not within
// arenaAckWait (or Config.Timeout) is disconnected: it cannot be left
// with a window that is not this side's.
func (b *Backend) awaitArenaAcks(what string, slot int) {
	wait := arenaAckWait
	if b.timeout > 0 && b.timeout < wait {
		wait = b.timeout
	}
	deadline := time.Now().Add(wait)
	for {
		pending := false
		for _, p := range *b.peers.Load() {
			if cp := b.cpeer(p.idx); cp.arena_wait > 0 && cp.state < C.HC_FAILED {
				pending = true
			}
		}
		if !pending {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		b.progress(true, C.HC_ROUNDS)
	}
	for _, p := range *b.peers.Load() {
		if cp := b.cpeer(p.idx); cp.arena_wait > 0 && cp.state < C.HC_FAILED {
			b.log.Warn("ucx: disconnecting a peer that did not acknowledge an arena update", "peer", p.idx, "arena", slot, "update", what, "waited", wait)
			b.fence(p)
			C.hc_peer_close(b.be, C.uint32_t(p.idx), C.HC_ST_PEER_GONE)
			b.syncPeer(p)
		}
	}
}

// UnmapArena deregisters an arena. Peers that have it in their window are
// told first, and it is unmapped only once each acknowledged: a peer
// acknowledges after it removed the arena from its window (later
// transfers to it are refused with ErrRemoteBounds) and a flush of its
// endpoint completed (nothing it posted to it is in flight). A peer that
// does not acknowledge in time is disconnected: the memory is about to go
// back to the system, and over tcp or shared memory nothing but this
// backend stops a peer from writing to it.
func (b *Backend) UnmapArena(slot int) error {
	if slot < 0 || slot >= backend.MaxArenas {
		return fmt.Errorf("ucx: unmap arena %d: %w", slot, backend.ErrBadConfig)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errBackendClosed
	}
	C.hc_unpublish(b.be, C.int(slot))
	b.awaitArenaAcks("unmap", slot)
	for _, p := range *b.peers.Load() {
		// A peer the removal could not be sent to still holds the
		// arena: it goes.
		cp := b.cpeer(p.idx)
		if cp.state != C.HC_CLOSED && uint64(cp.exported)&(1<<slot) != 0 {
			b.log.Warn("ucx: disconnecting a peer from an arena being unmapped", "peer", p.idx, "arena", slot)
			b.fence(p)
			C.hc_peer_close(b.be, C.uint32_t(p.idx), C.HC_ST_PEER_GONE)
			b.syncPeer(p)
		}
	}
	b.local[slot] = nil
	if st := C.hc_unmap(b.be, C.int(slot)); st != 0 {
		return fmt.Errorf("ucx: ucp_mem_unmap arena %d: %s: %w", slot, ucsString(st), ErrUCX)
	}
	return nil
}

// peer returns peer idx if it is ready (Prepare: any goroutine).
func (b *Backend) peer(idx uint32) (*peer, error) {
	ps := *b.peers.Load()
	if int(idx) >= len(ps) {
		return nil, fmt.Errorf("ucx: peer %d (have %d): %w: %w", idx, len(ps), ErrNoPeer, backend.ErrBadTransfer)
	}
	p := ps[idx]
	switch p.state.Load() {
	case stateReady:
		return p, nil
	case stateConnecting:
		return nil, fmt.Errorf("ucx: peer %d: handshake not finished: %w: %w", idx, ErrNoPeer, backend.ErrBadTransfer)
	}
	return nil, fmt.Errorf("ucx: peer %d: %w: %w", idx, ErrPeerGone, backend.ErrBadTransfer)
}

// Prepare checks a host→remote (put) or remote→host (get) transfer: the
// peer is connected, and the remote range lies inside one arena of the
// window it exported. Nothing is posted for a transfer that fails here.
func (b *Backend) Prepare(src, dst backend.Endpoint, n uint32, op *backend.Op) error {
	var host, rem *backend.Endpoint
	switch {
	case src.Kind == backend.LocHost && dst.Kind == backend.LocRemote:
		host, rem = &src, &dst
		op.Code = opPut
	case src.Kind == backend.LocRemote && dst.Kind == backend.LocHost:
		host, rem = &dst, &src
		op.Code = opGet
	default:
		return fmt.Errorf("ucx: %s → %s: want host → remote or remote → host: %w", src.Kind, dst.Kind, backend.ErrBadTransfer)
	}
	if rem.Peer > 0xffff {
		return fmt.Errorf("ucx: peer %d: %w: %w", rem.Peer, ErrNoPeer, backend.ErrBadTransfer)
	}
	p, err := b.peer(rem.Peer)
	if err != nil {
		return err
	}
	if rem.Off == Notify {
		if op.Code != opPut || n > MaxNotify {
			return fmt.Errorf("ucx: peer %d: a notification is a put of at most %d bytes (a %d-byte transfer from the peer's Notify offset or of more): %w",
				rem.Peer, MaxNotify, n, backend.ErrBadTransfer)
		}
		op.Path = backend.PathRemote
		op.Len = n
		op.HostArena = uint16(host.Arena)
		op.Aux = uint16(rem.Peer)
		op.Code = opNotify
		op.Src, op.Dst = host.Addr, 0
		return nil
	}
	off := rem.Off
	w := p.win.Load()
	i, straddle := w.find(off, n)
	if i < 0 {
		if p.state.Load() >= stateFailed { // gone since b.peer looked
			return fmt.Errorf("ucx: peer %d: %w: %w", rem.Peer, ErrPeerGone, backend.ErrBadTransfer)
		}
		if straddle {
			return fmt.Errorf("ucx: peer %d: range %#x+%d runs past the end of one of its arenas: %w: %w",
				rem.Peer, off, n, ErrRemoteBounds, backend.ErrOutOfBounds)
		}
		return fmt.Errorf("ucx: peer %d: range %#x+%d outside its %d-byte window's arenas: %w: %w",
			rem.Peer, off, n, w.size, ErrRemoteBounds, backend.ErrOutOfBounds)
	}
	op.Path = backend.PathRemote
	op.Len = n
	op.HostArena = uint16(host.Arena)
	op.Aux = uint16(rem.Peer)
	if w.direct[i] != nil && n <= inlineMax && b.cfg.CallerProgress && b.local[host.Arena] != nil {
		// The peer's arena is mapped here, and whoever submits also
		// polls (CallerProgress, engine.ModePoll): the submitter copies,
		// and its next Poll delivers the completion — no call into C.
		// With a reaper goroutine the completion would cross threads
		// anyway, and the submitter's copy outside the engine's owner
		// flag measured slower there than hc_submit's (docs/remote.md);
		// larger transfers are hc_submit's too.
		op.Inline = true
		op.Src, op.Dst = host.Off, off
		op.Code += opDirectPut - opPut
		return nil
	}
	if op.Code == opPut {
		op.Src, op.Dst = host.Addr, rem.Off
	} else {
		op.Src, op.Dst = rem.Off, host.Addr
	}
	return nil
}

// Execute copies a transfer to or from a peer whose memory is mapped here
// (Prepare marked it Inline): what UCX's shared-memory put and get do, on
// the submitter, with no request, flush or completion ring. Complete when
// it returns (the bytes are in the peer's memory).
func (b *Backend) Execute(op *backend.Op) (uint32, backend.Status) {
	if op.Code != opDirectPut && op.Code != opDirectGet {
		return 0, backend.StatusBackend + stBadOp
	}
	p := (*b.peers.Load())[op.Aux]
	p.users.Add(1)
	if p.fenced.Load() {
		p.users.Add(-1)
		return 0, backend.StatusBackend + stPeerGone
	}
	// The window now (the peer may have removed the arena since
	// Prepare: syncWindow waits for users after publishing a new one).
	w := p.win.Load()
	i, _ := w.find(op.Dst, op.Len)
	if i < 0 || w.direct[i] == nil {
		p.users.Add(-1)
		return 0, backend.StatusBackend + stBounds
	}
	roff := op.Dst - w.start[i]
	rem := w.direct[i][roff : roff+uint64(op.Len)]
	loc := b.local[op.HostArena][op.Src : op.Src+uint64(op.Len)]
	dst, src := rem, loc
	if op.Code == opDirectGet {
		dst, src = loc, rem
	}
	copy(dst, src)
	p.users.Add(-1)
	return op.Len, backend.StatusOK
}

// Forward stages op in C memory (the submission ring, past what Flush
// published); Flush publishes the batch.
func (b *Backend) Forward(tag uint64, op *backend.Op, last bool) bool {
	if b.staged+int(b.inflight.Load()) >= b.depth {
		return false
	}
	s := &b.sq[(b.pub+uint32(b.staged))&uint32(b.be.sq_mask)]
	s.tag = C.uint64_t(tag)
	s.len = C.uint32_t(op.Len)
	s.peer = C.uint32_t(op.Aux)
	s.arena = C.uint16_t(op.HostArena)
	s.op = C.uint8_t(op.Code)
	if op.Code != opGet {
		s.local, s.roff = C.uint64_t(op.Src), C.uint64_t(op.Dst)
	} else {
		s.roff, s.local = C.uint64_t(op.Src), C.uint64_t(op.Dst)
	}
	b.staged++
	if op.Code == opNotify {
		b.urgent = true
	}
	return true
}

// Flush publishes the staged transfers and posts them — ucp_put_nbx /
// ucp_get_nbx straight from/to pool memory and one ucp_ep_flush_nbx per
// peer the batch put to, in one call into C — unless transfers are already
// outstanding and someone is about to progress the worker anyway: then
// that one posts them (hc_submit, under the mutex, in order). A batch that
// carries a notification is always posted here: left to the progress
// goroutine it waited for that goroutine's next look (up to 50 µs, and
// more on a busy machine) before its flush even started.
func (b *Backend) Flush() {
	if b.staged == 0 {
		return
	}
	busy := b.inflight.Add(int64(b.staged)) > int64(b.staged)
	b.pub += uint32(b.staged)
	b.staged = 0
	// Release: the entries written by Forward before the index.
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b.be.sq_pub)), b.pub)
	if b.env.Counters != nil {
		b.env.Counters.Doorbells++
	}
	// Who posts a batch left here: the progress goroutine while it polls
	// (polling: it looks again within 50 µs), or with requests in UCX
	// whoever progresses them (that goroutine, woken by their events; with
	// CallerProgress the engine's next Poll) — and any Reap, which posts
	// first. Before polling goes to 0 the goroutine looks at what was
	// published once more (sequentially consistent on both sides: one of
	// the two posts it). The submitter then makes no call into UCX and
	// holds the engine's owner flag through no system call: over tcp the
	// engine's reaper spun on that flag through every post
	// (docs/remote.md, "tcp bandwidth"). A batch that finds nothing
	// outstanding is posted here at once.
	urgent := b.urgent
	b.urgent = false
	if busy && !urgent && (b.polling.Load() > 0 || atomic.LoadUint32((*uint32)(unsafe.Pointer(&b.be.inflight))) > 0) {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	// hc_submit posts and then progresses the data worker (one call into
	// C): what completes at once (shared memory) is ready for the next Reap.
	ev := C.hc_submit(b.be, b.pollRounds())
	b.progressed(ev)
	wake := b.idle && b.be.inflight > 0
	b.idle = false
	b.mu.Unlock()
	if wake {
		// The progress goroutine sleeps until the worker's next event:
		// have it look after the requests still in UCX (events UCX does
		// not signal, the watchdog). Once per idle → busy change, not per
		// batch; never when everything completed at posting (shared
		// memory: a put or get is a memcpy).
		b.wakeProgress()
	}
}

// Reap progresses the worker and moves finished transfers into out.
func (b *Backend) Reap(out []backend.Completion) int {
	// The control worker (handshakes, peer failure) is the progress
	// goroutine's; without one (CallerProgress), Reap looks at it every
	// ctlEvery (the clock is read every 64th Reap: a poll loop calls Reap
	// millions of times a second).
	check := false
	if b.cfg.CallerProgress {
		b.reaps++
		check = b.reaps&63 == 0
		// A shared-memory data worker with nothing published or posted
		// (inflight counts both until drained) has nothing to give: no
		// completion can be in the ring, and the peer's puts into this
		// pool are its own copies. Between two looks at the clock such a
		// Reap is all of an idle poll loop's backend work (a ping-pong's
		// every Poll but one per round trip: the transfers it submits are
		// Inline): no mutex, no call into C. A Connect running meanwhile
		// progresses the control worker itself.
		if !check && b.dataWorker && b.inflight.Load() == 0 {
			return 0
		}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0
	}
	ctl := check && time.Since(b.lastCtl) >= ctlEvery
	if b.be.sq_head != C.uint32_t(b.pub) {
		// Left by Flush to whoever progresses next: post it first.
		b.progressed(C.hc_submit(b.be, 0))
	}
	again := b.checked
	b.checked = false
	switch {
	case again:
		// With CallerProgress, the Reap the engine makes right after
		// Check (its cycle found nothing while transfers are outstanding:
		// Reap, Check, Reap) does not progress the data worker again: the
		// one before Check just did, Check's failures are in the ring
		// already, and the caller polls again — a second progress would
		// be one more epoll_wait over tcp in every empty Poll. A control
		// worker of its own that is due is progressed all the same.
		if ctl && b.be.dworker != b.be.worker {
			b.progress(true, 0)
		}
	case ctl || b.be.dworker == b.be.worker || b.be.inflight > 0:
		// Otherwise a shared-memory data worker with nothing in flight
		// has nothing to give — this side's direct copies completed into
		// the ring when they were posted, and a peer's puts into this
		// pool are its own copies — and the call into C is skipped (a
		// poll loop's common case).
		b.progress(ctl, b.pollRounds())
	}
	n := b.drain(out)
	b.mu.Unlock()
	return n
}

// BatchWaits says whether the engine should wait on this backend in
// batches (WaitCompletions): over UCX's tcp (no SharedMemory), yes — a
// transfer completes tens of microseconds after it is posted, when the
// peer's acknowledgement is progressed, and without batched waits the
// engine's reaper stands back with runtime.Gosched while a waiter reaps,
// tens of thousands of yields per second on the CPU the submitter needs
// (docs/remote.md, "tcp bandwidth"). With SharedMemory, no: a put or get
// is a copy, complete when Flush returns, and there is nothing to wait
// for in the backend.
func (b *Backend) BatchWaits() bool { return !b.cfg.SharedMemory }

// WaitCompletions (engine batched waits, only when BatchWaits): the
// waiter, which holds the engine's reaping flag, progresses the worker
// itself — posting first what Flush published and left to whoever
// progresses next — until want completions wait in the ring, or minWait
// passed since the first one arrived, or timeout passed, or nothing is
// left in UCX. It polls for waitSpin, then sleeps on the worker's event
// fd between rounds (ucp_worker_arm, at most 1 ms at a time: UCX does not
// signal every completion) — over a real network a transfer takes longer
// than a spin should. It does not reap (the engine does, next) and writes
// no eventfd: the reaper sleeping on ReadyFD has nothing to do that the
// waiter will not do. Each round takes the mutex briefly: Flush and the
// progress goroutine get it between rounds. Returns the ppoll calls; the
// system calls UCX makes (send, recv, epoll_wait over tcp) are not
// counted.
func (b *Backend) WaitCompletions(want int, minWait, timeout time.Duration) int {
	b.batchWaits.Add(1)
	start := time.Now()
	var first time.Time
	sys := 0
	fds := []unix.PollFd{{Fd: int32(b.be.defd), Events: unix.POLLIN}}
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return sys
		}
		ev := C.hc_submit(b.be, 0) | C.hc_progress(b.be, 0, C.HC_ROUNDS)
		if ev&^C.HC_EV_PROGRESS != 0 {
			b.handle(ev)
		}
		if ev&C.HC_EV_NOTIFY != 0 || b.notifyWaiting() {
			b.deliver()
		}
		ready := int(b.be.cq_tail - b.be.cq_head)
		inUCX := b.be.inflight > 0
		now := time.Now()
		if ready > 0 && first.IsZero() {
			first = now
		}
		if ready >= want || !inUCX || !first.IsZero() && now.Sub(first) >= minWait || now.Sub(start) >= timeout {
			b.mu.Unlock()
			return sys
		}
		if ev != 0 || now.Sub(start) < waitSpin {
			b.mu.Unlock()
			continue
		}
		st := C.hc_arm(b.be)
		b.mu.Unlock()
		if st == C.UCS_ERR_BUSY {
			continue
		}
		wait := min(time.Millisecond, timeout-now.Sub(start))
		if !first.IsZero() {
			wait = min(wait, minWait-now.Sub(first))
		}
		ts := unix.NsecToTimespec(max(wait, time.Microsecond).Nanoseconds())
		_, _ = unix.Ppoll(fds, &ts, nil)
		sys++
	}
}

// waitSpin is how long WaitCompletions polls before it sleeps between
// rounds: a put over tcp on one host completes within tens of µs.
const waitSpin = 100 * time.Microsecond

// ctlEvery is how often Reap progresses the control worker under
// CallerProgress, when it is not the data worker (SharedMemory): its tcp
// connection carries only handshakes and the peers' failures. Every 1 ms
// (until this change) a shared-memory ping-pong's mean round trip was
// 1.43-2.62x ucx_perftest's, every 10 ms or 100 ms 1.33-1.57x (medians of
// 5, alternated runs, docs/remote.md); a peer's failure is noticed up to
// 10 ms later.
const ctlEvery = 10 * time.Millisecond

// drain copies completions from C's ring (under mu).
func (b *Backend) drain(out []backend.Completion) int {
	n := 0
	h, t := b.be.cq_head, b.be.cq_tail
	for h != t && n < len(out) {
		e := &b.cq[h&b.be.cq_mask]
		out[n] = backend.Completion{Tag: uint64(e.tag), N: uint32(e.n), Status: status(int32(e.status))}
		n++
		h++
	}
	b.be.cq_head = h
	b.inflight.Add(-int64(n))
	b.signaled = false
	return n
}

// Check runs the watchdog (Config.Timeout): UCX's peer error handling
// (keepalive, resets) reports dead peers through the endpoint error
// callback, handled in Reap; a peer that stopped with its connection open
// fails here. Its transfers come out of the next Reap.
func (b *Backend) Check() {
	b.mu.Lock()
	if !b.closed && b.timeout > 0 && b.inflight.Load() > 0 {
		b.expire(time.Now())
	}
	b.checked = b.cfg.CallerProgress
	b.mu.Unlock()
}

// Outstanding is staged + posted, not yet reaped.
func (b *Backend) Outstanding() int { return b.staged + int(b.inflight.Load()) }

// ReadyFD is an eventfd the progress goroutine writes when completions wait
// in the ring (the worker's own event fd belongs to that goroutine).
func (b *Backend) ReadyFD() (int, bool) {
	if b.cfg.CallerProgress {
		return -1, false
	}
	return b.wakeFD, true
}

// Cancel force-closes every peer's endpoint, so that UCX completes each
// request in flight (canceled), and moves every outstanding transfer into
// out.
func (b *Backend) Cancel(out []backend.Completion) int {
	n := 0
	for i := 0; i < b.staged && n < len(out); i++ {
		out[n] = backend.Completion{Tag: uint64(b.sq[(b.pub+uint32(i))&uint32(b.be.sq_mask)].tag), Status: backend.StatusCanceled}
		n++
	}
	b.staged = 0
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return n
	}
	b.fenceAll()
	C.hc_cancel_all(b.be)
	for _, p := range *b.peers.Load() {
		b.syncPeer(p)
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.be.inflight > 0 && time.Now().Before(deadline) {
		b.progress(true, C.HC_ROUNDS)
	}
	n += b.drain(out[n:])
	return n
}

// Close stops the progress goroutine and releases UCX: endpoints (forced),
// listener, memory registrations, worker, context.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.closing)
	b.mu.Unlock()
	b.wakeProgress()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range *b.peers.Load() {
		if p.state.Load() < stateFailed {
			p.status = C.UCS_ERR_CANCELED
			p.state.Store(stateClosed)
			p.settle() // a Connect under way returns
		}
	}
	b.destroy()
	return nil
}
