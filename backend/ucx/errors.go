package ucx

import (
	"errors"
	"fmt"

	"github.com/hcomm-go/hcomm/internal/errs"
)

// Sentinel errors, for errors.Is. Every error the package returns wraps one
// of these (and, for transfers, one of the engine's sentinels).
var (
	// ErrUCX: a UCP call failed (context, worker, listener, memory
	// registration); the message names the call and UCX's status.
	ErrUCX = errors.New("ucx: UCP call failed")
	// ErrBadAddress: an address is not "host:port" with a numeric IP.
	ErrBadAddress = errors.New("ucx: bad address")
	// ErrConnect: a peer could not be reached, refused the connection, or
	// sent a handshake this package does not understand.
	ErrConnect = errors.New("ucx: connect failed")
	// ErrNoPeer: a Remote location names a peer index this backend never
	// had.
	ErrNoPeer = errors.New("ucx: no such peer")
	// ErrPeerGone: the peer failed (process killed, connection reset,
	// peer engine closed) or was disconnected; transfers outstanding to it
	// complete with an error wrapping it, once.
	ErrPeerGone = errors.New("ucx: peer gone")
	// ErrRemoteBounds: a remote offset + length lies outside the window
	// the peer exported, or straddles two of its arenas.
	ErrRemoteBounds = errors.New("ucx: remote range outside the peer's export")
	// ErrProtocol: a peer sent what this package refuses — a hello
	// (handshake) that is truncated, oversized or lies about its arena
	// table, or a notification out of sequence. The peer is refused and
	// its connection closed (Connect's error wraps it and ErrConnect);
	// nothing else is disturbed.
	ErrProtocol = errors.New("ucx: peer broke the protocol")
	// ErrTransport: UCX failed a transfer for another reason.
	ErrTransport = errors.New("ucx: transfer failed")
	// ErrClosed: the backend is closed. hcomm's shared sentinel (package
	// internal/errs), the same value as engine.ErrClosed.
	ErrClosed = errs.ErrClosed
)

// errBackendClosed is ErrClosed as a closed backend returns it, made once so
// that the refusal allocates nothing.
var errBackendClosed = fmt.Errorf("ucx: backend %w", ErrClosed)
