package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/engine"
)

// Remote addresses (HCOMM_TARGET_REMOTE): hcomm_remote_addr(peer, off) =
// remoteAddrBase | peer<<remotePeerShift | off. Like device addresses they
// are non-canonical on x86-64, so no host pointer has one; they occupy
// [remoteAddrBase, remoteAddrEnd), above device space (devAddrBase +
// maxDevSpace).
const (
	remoteAddrBase  uintptr = 0x6000000000000000
	remotePeerShift         = 44
	remoteMaxOffset         = 1 << remotePeerShift
	remoteMaxPeer           = 0xffff // the engine's Op carries a 16-bit peer index
	remoteAddrEnd           = remoteAddrBase + (remoteMaxPeer+1)<<remotePeerShift
	// Notification addresses (hcomm_notify_addr(peer) = notifyAddrBase |
	// peer<<remotePeerShift), right above remote space and non-canonical
	// too; only offset 0 of each peer's range is one.
	notifyAddrBase = remoteAddrEnd
	notifyAddrEnd  = notifyAddrBase + (remoteMaxPeer+1)<<remotePeerShift
)

// notifyDecode is the peer of a notification address, false for an
// address inside notification space that is none.
func notifyDecode(p uintptr) (uint32, bool) {
	v := p - notifyAddrBase
	return uint32(v >> remotePeerShift), v&(remoteMaxOffset-1) == 0
}

// remoteDecode splits a remote address into peer and offset.
func remoteDecode(p uintptr) (uint32, uint64) {
	v := p - remoteAddrBase
	return uint32(v >> remotePeerShift), uint64(v & (remoteMaxOffset - 1))
}

// newRemote creates the remote target's UCX backend: a context and worker
// (UCX reads UCX_TLS and its other variables now) and, with target_path, a
// listener on that address.
func (s *state) newRemote(c config) (backend.Backend, int32, error) {
	b, err := ucx.New(ucx.Config{Listen: c.Path, SharedMemory: c.Flags&remoteShm != 0, Logger: logger})
	if err != nil {
		return nil, noDevice(codeOf(err)), err
	}
	s.ucx = b
	return b, codeOK, nil
}

// remoteHint completes the message of an unresolved pointer on the remote
// target.
func (s *state) remoteHint() string {
	if s.ucx == nil {
		return ""
	}
	return ", hcomm_remote_addr"
}

// checkRemote checks a transfer with a remote end before it reaches the
// engine: host to remote (a put) or remote to host (a get), and the remote
// range inside one arena of a live peer's window — the engine's Check, the
// same checks Submit makes, so that a batch with a bad entry is refused
// whole, before any of it is submitted.
func (s *state) checkRemote(t *engine.Transfer, src, dst uintptr, sk, dk int, n uintptr) int32 {
	var p uintptr
	switch {
	case sk == locHost && dk == locRemote:
		p = dst
	case sk == locRemote && dk == locHost:
		p = src
	default:
		return fail(codeEOPNOTSUPP, "the remote target moves data between host memory and a peer's window (hcomm_remote_addr) only")
	}
	t.Len = int(n)
	if err := s.eng.Check(*t); err != nil {
		peer, off := remoteDecode(p)
		if detail != nil {
			detail(fmt.Sprintf("remote address %#x (peer %d, offset %#x) + %d bytes: %v", p, peer, off, n, err))
		}
		return codeOf(err)
	}
	return codeOK
}

// connect connects to the peer listening at addr; timeoutMs < 0: no limit.
func (s *state) connect(addr string, timeoutMs int) (uint32, int32) {
	if s.ucx == nil {
		return 0, fail(codeEOPNOTSUPP, "hcomm_connect: the %s target has no peers (use HCOMM_TARGET_REMOTE)", s.eng.Backend().Name)
	}
	ctx := context.Background()
	if timeoutMs >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
		defer cancel()
	}
	peer, err := s.ucx.Connect(ctx, addr)
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		return 0, fail(codeETIMEDOUT, "hcomm_connect(%q): no handshake within %d ms: %v", addr, timeoutMs, err)
	case err != nil:
		if detail != nil {
			detail(fmt.Sprintf("hcomm_connect(%q): %v", addr, err))
		}
		return 0, codeOf(err)
	case peer > remoteMaxPeer:
		s.ucx.Disconnect(peer)
		return 0, fail(codeEMFILE, "hcomm_connect(%q): peer ID %d: hcomm_remote_addr holds IDs below %d only", addr, peer, remoteMaxPeer+1)
	}
	return peer, codeOK
}

// disconnect closes the connection to peer.
func (s *state) disconnect(peer uint32) int32 {
	if s.ucx == nil {
		return fail(codeEOPNOTSUPP, "hcomm_disconnect: the %s target has no peers", s.eng.Backend().Name)
	}
	if n := len(s.ucx.Peers()); int(peer) >= n {
		return fail(codeENXIO, "hcomm_disconnect(%d): this handle has had %d peers", peer, n)
	}
	s.ucx.Disconnect(peer)
	return codeOK
}

// listenAddr writes the listener's address, NUL-terminated, into buf.
func (s *state) listenAddr(buf []byte) int32 {
	if s.ucx == nil {
		return fail(codeEOPNOTSUPP, "hcomm_listen_addr: the %s target does not listen", s.eng.Backend().Name)
	}
	a := s.ucx.Addr()
	if len(a)+1 > len(buf) {
		return fail(codeEINVAL, "hcomm_listen_addr: %d bytes needed, the buffer has %d", len(a)+1, len(buf))
	}
	copy(buf, a)
	buf[len(a)] = 0
	return codeOK
}

// remoteOffset is where host memory p lies in the window this handle
// exports.
func (s *state) remoteOffset(p uintptr) (uint64, int32) {
	if s.ucx == nil {
		return 0, fail(codeEOPNOTSUPP, "hcomm_remote_offset: the %s target exports nothing", s.eng.Backend().Name)
	}
	if _, _, ok := s.host.find(p, 1); !ok {
		return 0, fail(codeEFAULT, "hcomm_remote_offset(%#x): not host memory of this handle", p)
	}
	off, ok := s.ucx.Offset(p)
	if !ok {
		return 0, fail(codeEFAULT, "hcomm_remote_offset(%#x): in no exported arena", p)
	}
	return off, codeOK
}

// waitNotification takes the next notification, waiting at most timeoutMs
// (negative: no limit).
func (s *state) waitNotification(timeoutMs int) (ucx.Notification, int32) {
	if s.ucx == nil {
		return ucx.Notification{}, fail(codeEOPNOTSUPP, "hcomm_wait_notification: the %s target has no peers (use HCOMM_TARGET_REMOTE)", s.eng.Backend().Name)
	}
	if timeoutMs == 0 { // just look
		select {
		case n := <-s.ucx.Notifications():
			return n, codeOK
		default:
			return ucx.Notification{}, codeETIMEDOUT
		}
	}
	ctx := context.Background()
	if timeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
		defer cancel()
	}
	n, err := s.ucx.WaitNotification(ctx)
	switch {
	case err == nil:
		return n, codeOK
	case errors.Is(err, context.DeadlineExceeded):
		return n, codeETIMEDOUT
	case errors.Is(err, ucx.ErrClosed):
		return n, fail(codeEBADF, "hcomm_wait_notification: the handle was finalized")
	}
	return n, fail(codeOf(err), "hcomm_wait_notification: %v", err)
}
