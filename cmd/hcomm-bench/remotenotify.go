package main

// The remote scenario's notification rows: one hop of a 64 KiB put that
// the target learns about, half a ping-pong between this process's engine
// and a peer process's (each answers the other's hop with its own), two
// ways, with ucx_perftest's active-message latency of the same size beside
// them:
//
//   - notified put: the put and a notification (ucx.Notify) in one batch;
//     the target waits in WaitNotification and checks the round's number
//     in the message.
//   - put+flag: what a program does without notifications — the put, Wait
//     for its completion (the bytes are in the peer's pool), then an 8-byte
//     put of the round's number to a flag the target polls in its pool.
//   - ucx_perftest -t ucp_am_lat -s 65536: a 64 KiB active message each
//     way, the least UCX takes to move 64 KiB and tell the receiver.
//
// Both engines run in the default mode with the backend's progress
// goroutine (notifications travel on the control endpoint, which a
// CallerProgress backend with SharedMemory progresses only every 10 ms).

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"github.com/hcomm-go/hcomm/engine"
)

const (
	notifySize = 64 << 10
	// notifySlots: the messages (notified) or flag values (put+flag) a
	// side cycles through. A transfer's source belongs to the backend
	// until it completes — a notification completes with the peer's
	// acknowledgement, which may still be on its way when the peer's
	// answer arrives — so a slot is written again only after the transfer
	// that used it notifySlots rounds ago completed (Wait: done long
	// since, in practice).
	notifySlots   = 16
	notifyWarmup  = 100 // untimed round trips first
	notifyPoolLen = 4 << 20
)

// notifyRounds is how many timed round trips one repetition makes.
func notifyRounds(quick bool, tls string) int {
	n := 500 // tcp and shm: a few hundred µs a hop
	if tls == "rc" {
		n = 200 // soft-RoCE under TCG: milliseconds
	}
	if quick {
		n /= 5
	}
	return n
}

// notifyHop is one side of the ping-pong: its engine and backend, its
// blocks, and the other side's data and flag offsets in that side's
// window.
type notifyHop struct {
	eng      *engine.Engine
	b        *ucx.Backend
	peer     uint32 // the other side, in this backend
	notified bool
	data     engine.Block // notifySize bytes, the put's source
	msgs     engine.Block // notifySlots × 8 bytes: the messages or flag values sent
	flag     engine.Block // the first 8 bytes: the flag the other side puts to
	dataOff  uint64
	flagOff  uint64
	ids      [notifySlots]engine.ID // the transfer that last used each slot
	used     [notifySlots]bool
	batch    [2]engine.ID
}

// newNotifyHop allocates a side's blocks in eng.
func newNotifyHop(eng *engine.Engine, b *ucx.Backend, notified bool) (*notifyHop, error) {
	h := &notifyHop{eng: eng, b: b, notified: notified}
	var err error
	if h.data, err = eng.Alloc(notifySize); err == nil {
		if h.msgs, err = eng.Alloc(notifySlots * 8); err == nil {
			h.flag, err = eng.Alloc(64)
		}
	}
	return h, err
}

// slot makes message slot i%notifySlots free (its last transfer done),
// writes round i into it and returns where it is.
func (h *notifyHop) slot(ctx context.Context, i uint64) (engine.Loc, error) {
	k := int(i % notifySlots)
	if h.used[k] {
		if err := h.eng.Wait(ctx, h.ids[k]); err != nil {
			return engine.Loc{}, fmt.Errorf("round %d's message: %w", i-notifySlots, err)
		}
	}
	*(*uint64)(unsafe.Pointer(&h.msgs.Bytes()[8*k])) = i
	return engine.HostAt(h.msgs, 8*k), nil
}

// send makes round i's hop to the other side.
func (h *notifyHop) send(ctx context.Context, i uint64) error {
	put := engine.Transfer{Src: engine.Host(h.data), Dst: engine.Remote(h.peer, h.dataOff), Len: notifySize}
	if h.notified {
		m, err := h.slot(ctx, i)
		if err != nil {
			return err
		}
		ts := []engine.Transfer{put, {Src: m, Dst: engine.Remote(h.peer, ucx.Notify), Len: 8}}
		if _, err := h.eng.SubmitBatchContext(ctx, ts, h.batch[:]); err != nil {
			return err
		}
		h.ids[i%notifySlots], h.used[i%notifySlots] = h.batch[1], true
		return nil
	}
	id, err := h.eng.SubmitContext(ctx, put)
	if err == nil {
		err = h.eng.Wait(ctx, id)
	}
	if err != nil {
		return err
	}
	m, err := h.slot(ctx, i)
	if err != nil {
		return err
	}
	if id, err = h.eng.SubmitContext(ctx, engine.Transfer{Src: m, Dst: engine.Remote(h.peer, h.flagOff), Len: 8}); err != nil {
		return err
	}
	h.ids[i%notifySlots], h.used[i%notifySlots] = id, true
	return nil
}

// recv waits for round i's hop from the other side.
func (h *notifyHop) recv(ctx context.Context, i uint64) error {
	if h.notified {
		nt, err := h.b.WaitNotification(ctx)
		if err != nil {
			return err
		}
		if m := nt.Msg(); len(m) != 8 || *(*uint64)(unsafe.Pointer(&m[0])) != i {
			return fmt.Errorf("round %d: notification %d carries %x", i, nt.Seq, m)
		}
		return nil
	}
	seen := (*atomic.Uint64)(unsafe.Pointer(&h.flag.Bytes()[0]))
	for spins := 0; seen.Load() != i; spins++ {
		if spins&0xfff == 0xfff && ctx.Err() != nil {
			return ctx.Err()
		}
		// Over tcp the put lands only when this side's progress
		// goroutine serves it: a spin that never yields holds a P until
		// the runtime preempts it.
		runtime.Gosched()
	}
	return nil
}

// remoteNotify measures the two notification rows, a repetition of each
// in turn (and ucx_perftest's am latency once per repetition), until
// deadline.
func remoteNotify(o *options, name, engineTLS, perftestTLS string, deadline time.Time) []*remoteRow {
	shm := name == "shm"
	rows := []*remoteRow{
		{tls: name, op: "notified put", size: notifySize, batch: 1, unit: "µs", noSock: true},
		{tls: name, op: "put+flag", size: notifySize, batch: 1, unit: "µs", noSock: true},
	}
	rounds := notifyRounds(o.quick, name)
	for rep := 0; rep < o.reps; rep++ {
		for k, r := range rows {
			if time.Now().After(deadline) {
				if r.err == "" {
					r.err = fmt.Sprintf("%s (%d of %d repetitions)", outOfTime, len(r.eng), o.reps)
				}
				continue
			}
			if r.err != "" {
				continue
			}
			ctx, cancel := measureCtx(deadline)
			v, vt, err := engineNotifyLat(ctx, engineTLS, shm, k == 0, rounds)
			cancel()
			if err != nil {
				r.err = err.Error()
				continue
			}
			r.eng, r.engT = append(r.eng, v), append(r.engT, vt)
		}
		if time.Now().After(deadline) {
			continue
		}
		pv, pvt, err := perftest(perftestTLS, "ucp_am_lat", notifySize, rounds, remoteWarmup(rounds), deadline)
		for _, r := range rows {
			if err != nil {
				r.ptErr = err.Error()
			} else {
				r.pt, r.ptT = append(r.pt, pv), append(r.ptT, pvt)
			}
		}
	}
	return rows
}

// engineNotifyLat: the ping-pong of 64 KiB hops with a notify peer
// process; half the round trip in µs, the mean and the median.
func engineNotifyLat(ctx context.Context, tls string, shm, notified bool, rounds int) (float64, float64, error) {
	peer, err := startRemotePeer("notify", tls, shm)
	if err != nil {
		return 0, 0, err
	}
	defer peer.stop()
	b, err := ucx.New(ucx.Config{SharedMemory: shm, Logger: quietLogger()})
	if err != nil {
		return 0, 0, err
	}
	eng, err := engine.Open(engine.Config{Backend: b, PoolSize: notifyPoolLen, QueueDepth: 64, Logger: quietLogger()})
	if err != nil {
		b.Close()
		return 0, 0, err
	}
	defer eng.Close()
	h, err := newNotifyHop(eng, b, notified)
	if err != nil {
		return 0, 0, err
	}
	dataOff, ok1 := b.Offset(h.data.Addr())
	flagOff, ok2 := b.Offset(h.flag.Addr())
	if !ok1 || !ok2 {
		return 0, 0, errors.New("blocks outside the exported window")
	}
	if h.peer, err = b.Connect(ctx, peer.ucxAddr); err != nil {
		return 0, 0, err
	}
	h.dataOff, h.flagOff = peer.dataOff, peer.pingOff
	if err := peer.cmd(fmt.Sprintf("notify %d %d %d %t", dataOff, flagOff, rounds+notifyWarmup, notified)); err != nil {
		return 0, 0, err
	}
	var start, t0 time.Time
	rtts := make([]float64, 0, rounds)
	for i := uint64(1); i <= uint64(rounds+notifyWarmup); i++ {
		now := time.Now()
		if i == notifyWarmup+1 {
			start = now
		}
		if i > notifyWarmup+1 {
			rtts = append(rtts, float64(now.Sub(t0).Nanoseconds()))
		}
		t0 = now
		if err := h.send(ctx, i); err != nil {
			return 0, 0, fmt.Errorf("round %d: %w%s", i, err, peerFailure(b))
		}
		if err := h.recv(ctx, i); err != nil {
			return 0, 0, fmt.Errorf("round %d: %w%s", i, err, peerFailure(b))
		}
	}
	el := time.Since(start)
	if err := eng.Drain(ctx); err != nil {
		return 0, 0, err
	}
	return float64(el.Nanoseconds()) / float64(rounds) / 2 / 1000, figures.Median(rtts) / 2 / 1000, nil
}

// peerFailure says why b's peers failed, if any did ("" otherwise): a
// hop that times out waiting for the other side's is better told with it.
func peerFailure(b *ucx.Backend) string {
	var s string
	for _, p := range b.Peers() {
		if p.Failed != nil {
			s += fmt.Sprintf("; peer %d failed: %v", p.Index, p.Failed)
		}
	}
	return s
}

// answerNotify is the notify peer's side (remotePeerMain): f is the
// command's fields after "notify" — the initiator's data and flag offsets,
// the round trips, notified or not. It answers every hop with its own.
func answerNotify(eng *engine.Engine, b *ucx.Backend, h *notifyHop, f []string) error {
	if len(f) != 4 {
		return fmt.Errorf("notify: %d arguments, want 4", len(f))
	}
	var err error
	var n uint64
	if h.dataOff, err = strconv.ParseUint(f[0], 10, 64); err == nil {
		if h.flagOff, err = strconv.ParseUint(f[1], 10, 64); err == nil {
			if n, err = strconv.ParseUint(f[2], 10, 64); err == nil {
				h.notified, err = strconv.ParseBool(f[3])
			}
		}
	}
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h.peer = 0 // the initiator connected: this backend's peer 0
	for i := uint64(1); i <= n; i++ {
		if err := h.recv(ctx, i); err != nil {
			return fmt.Errorf("round %d: %w%s", i, err, peerFailure(b))
		}
		for {
			err := h.send(ctx, i)
			if err == nil {
				break
			}
			// The first hop can arrive before the initiator's hello is
			// taken in here.
			if !errors.Is(err, ucx.ErrNoPeer) || i != 1 || ctx.Err() != nil {
				return fmt.Errorf("round %d: %w%s", i, err, peerFailure(b))
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return eng.Drain(ctx)
}
