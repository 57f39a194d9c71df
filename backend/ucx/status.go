package ucx

/*
#include "hc.h"
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/hcomm-go/hcomm/backend"
)

// Backend statuses (backend.StatusBackend + s): s is -ucs_status_t for UCX's
// own (1..255), and these for hc's.
const (
	stPeerGone = 250 + iota
	stBounds
	stBadOp
	stNoSlot
	nStatus
)

// status turns a C completion status into an engine status.
func status(st int32) backend.Status {
	switch {
	case st == 0:
		return backend.StatusOK
	case st == C.UCS_ERR_CANCELED || st == C.HC_ST_CANCELED_STAGED:
		return backend.StatusCanceled
	case st == C.HC_ST_PEER_GONE || st == C.HC_ST_PROTOCOL:
		return backend.StatusBackend + stPeerGone
	case st == C.HC_ST_BOUNDS:
		return backend.StatusBackend + stBounds
	case st == C.HC_ST_NO_SLOT:
		return backend.StatusBackend + stNoSlot
	case st < 0 && st > -250:
		return backend.StatusBackend + backend.Status(-st)
	}
	return backend.StatusBackend + backend.Status(C.UCS_ERR_IO_ERROR*-1)
}

// errTable holds Err's answers, formatted once: the completion path
// allocates nothing.
var errTable = func() [nStatus]error {
	var t [nStatus]error
	for s := 1; s < nStatus; s++ {
		t[s] = statusErr(s)
	}
	return t
}()

var errUnknown = fmt.Errorf("ucx: unknown status: %w: %w", ErrTransport, backend.ErrIO)

func statusErr(s int) error {
	switch s {
	case stPeerGone:
		return fmt.Errorf("ucx: peer gone before posting: %w: %w", ErrPeerGone, backend.ErrIO)
	case stBounds:
		return fmt.Errorf("ucx: remote range outside the peer's export: %w: %w", ErrRemoteBounds, backend.ErrIO)
	case stBadOp:
		return fmt.Errorf("ucx: no inline path: %w: %w", ErrTransport, backend.ErrIO)
	case stNoSlot:
		return fmt.Errorf("ucx: every request slot is held by transfers UCX never completed after a peer failure: %w: %w", ErrTransport, backend.ErrIO)
	}
	msg := ucsString(C.int(-s))
	var sentinel, kind error = backend.ErrIO, ErrTransport
	switch C.int(-s) {
	case C.UCS_ERR_ENDPOINT_TIMEOUT, C.UCS_ERR_TIMED_OUT:
		sentinel, kind = backend.ErrTimeout, ErrPeerGone
	case C.UCS_ERR_CONNECTION_RESET, C.UCS_ERR_UNREACHABLE, C.UCS_ERR_REJECTED,
		C.UCS_ERR_NOT_CONNECTED, C.UCS_ERR_CANCELED:
		kind = ErrPeerGone
	}
	if errors.Is(sentinel, backend.ErrTimeout) {
		return fmt.Errorf("ucx: %s: %w: %w", msg, kind, sentinel)
	}
	return fmt.Errorf("ucx: %s: %w: %w", msg, kind, sentinel)
}

// Err turns a backend status into the error callers see.
func (b *Backend) Err(s backend.Status) error {
	i := int(s - backend.StatusBackend)
	if s < backend.StatusBackend || i <= 0 || i >= nStatus {
		return errUnknown
	}
	return errTable[i]
}
