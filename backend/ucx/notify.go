package ucx

/*
#include "hc.h"
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"
)

// Notify is the remote offset that makes a put a notification:
//
//	eng.SubmitBatch([]engine.Transfer{
//		{Src: engine.Host(kv), Dst: engine.Remote(peer, off), Len: n},
//		{Src: engine.Host(msg), Dst: engine.Remote(peer, ucx.Notify), Len: m},
//	}, ids)
//
// The second transfer's Len bytes (at most MaxNotify) are delivered to the
// peer's application (Notifications, WaitNotification) after every put
// this side submitted to that peer before it is in the peer's pool, in
// submission order per peer, exactly once. It completes when the peer's
// backend acknowledged the delivery into its notification queue; a peer
// that dies (or is disconnected, or times out) before that makes it fail
// once with ErrPeerGone, like any transfer in flight to it. Until it
// completes its source block belongs to the backend.
const Notify uint64 = 1 << 63

// MaxNotify is the largest notification message, in bytes.
const MaxNotify = C.HC_NOTIFY_MAX

// DefaultNotifyQueue is Config.NotifyQueue's default.
const DefaultNotifyQueue = 1024

// Notification is a message a peer sent with a Notify put. Every put that
// peer submitted before it is in this side's pool.
type Notification struct {
	Peer uint32 // this side's index of the sender (Peers)
	Seq  uint64 // its number among the sender's notifications to this side, from 0
	n    uint16
	msg  [MaxNotify]byte
}

// Msg is the message (valid as long as the Notification).
func (n *Notification) Msg() []byte { return n.msg[:n.n] }

// Notifications is the channel notifications are delivered on, in order
// per peer. A notification is acknowledged to its sender when it enters
// the channel (Config.NotifyQueue long): a full channel holds further
// ones back in the backend, and the senders' notified puts stay
// outstanding until the application reads.
func (b *Backend) Notifications() <-chan Notification { return b.notes }

// WaitNotification waits for the next notification (from any peer), or
// until ctx is done, or the backend is closed (ErrClosed).
func (b *Backend) WaitNotification(ctx context.Context) (Notification, error) {
	select {
	case n := <-b.notes:
		return n, nil
	case <-ctx.Done():
		return Notification{}, fmt.Errorf("ucx: wait for a notification: %w", ctx.Err())
	case <-b.closing:
		select {
		case n := <-b.notes:
			return n, nil
		default:
		}
		return Notification{}, errBackendClosed
	}
}

// deliver moves received notifications into the channel, as far as it
// has room, and sends what notifications wait for: acknowledgements of
// those delivered, notifications whose puts completed (under mu).
func (b *Backend) deliver() {
	for {
		e := C.hc_notify_peek(b.be)
		if e == nil {
			break
		}
		var n Notification
		n.Peer, n.Seq, n.n = uint32(e.peer), uint64(e.seq), uint16(e.len)
		copy(n.msg[:n.n], unsafe.Slice((*byte)(unsafe.Pointer(&e.data[0])), n.n))
		select {
		case b.notes <- n:
			C.hc_notify_pop(b.be)
			b.delivered = true
			continue
		default:
		}
		break
	}
	if ev := C.hc_notify_flush(b.be); ev&^C.HC_EV_PROGRESS != 0 {
		b.handle(ev)
	}
}

// notifyWaiting says that received notifications wait for room in the
// channel (under mu).
func (b *Backend) notifyWaiting() bool { return b.be.nr_head != b.be.nr_tail }
