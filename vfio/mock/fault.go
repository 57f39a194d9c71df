package mock

import (
	"fmt"
	"time"

	"github.com/hcomm-go/hcomm/vfio/hdma/model"
)

// FaultKind selects what an injected fault does to the descriptor it hits.
type FaultKind int

const (
	// FaultError completes the descriptor with an error status (Fault.Status,
	// default model.StatusDeviceError) without moving data.
	FaultError FaultKind = iota + 1
	// FaultLatency delays the descriptor's execution and completion by
	// Fault.Latency. Descriptors are processed in order per queue, so later
	// descriptors of the same queue wait behind it; other queues do not.
	FaultLatency
	// FaultStall makes the descriptor never complete: its queue stops at it
	// (in-order processing) until the device is reset.
	FaultStall
	// FaultReset makes the device reset itself when it fetches the
	// descriptor, mid-stream: every descriptor submitted and not completed,
	// on every queue, completes with model.StatusReset (as far as each
	// completion ring has room), then the device is disabled (STATUS.ready
	// clear) and its queue registers cleared, as after CONTROL.reset.
	FaultReset
)

func (k FaultKind) String() string {
	switch k {
	case FaultError:
		return "error"
	case FaultLatency:
		return "latency"
	case FaultStall:
		return "stall"
	case FaultReset:
		return "reset"
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// Fault is one fault-injection rule. A rule matches descriptors by queue and
// opcode and fires either on exactly the Nth matching descriptor (once) or on
// each matching descriptor with probability Rate (from the device's seeded
// generator, so a run is reproducible). Rules are tried in the order they were
// injected; the first one that fires decides.
type Fault struct {
	Kind FaultKind
	// Queues selects queues as a bit mask (bit q = queue q); 0 means all.
	Queues uint64
	// Opcode selects descriptors by opcode (model.OpH2D ...); 0 means all.
	Opcode uint8
	// Nth fires the rule on the Nth matching descriptor, counted from 1
	// since the rule was injected. 0 means use Rate.
	Nth uint64
	// Rate is the probability, in (0, 1], that a matching descriptor
	// triggers the rule when Nth is 0.
	Rate float64
	// Status is the completion status for FaultError (default
	// model.StatusDeviceError). It must not be StatusOK.
	Status uint16
	// Latency is the added delay for FaultLatency.
	Latency time.Duration
}

// Injection records one fault that fired, for tests to compare with what the
// driver reported.
type Injection struct {
	Kind  FaultKind
	Queue int
	Tag   uint64 // the descriptor's tag
	Seq   uint64 // the descriptor's sequence number on its queue, from 1 (since enable)
}

// rule is an injected Fault with its match counter.
type rule struct {
	Fault
	matched uint64
	done    bool
}

func (f Fault) validate() error {
	switch f.Kind {
	case FaultError, FaultLatency, FaultStall, FaultReset:
	default:
		return fmt.Errorf("mock: inject fault: unknown kind %v: %w", f.Kind, ErrBadFault)
	}
	if f.Nth == 0 && !(f.Rate > 0 && f.Rate <= 1) {
		return fmt.Errorf("mock: inject %v fault: need Nth > 0 or Rate in (0,1], got Nth=0 Rate=%v: %w", f.Kind, f.Rate, ErrBadFault)
	}
	if f.Kind == FaultLatency && f.Latency <= 0 {
		return fmt.Errorf("mock: inject latency fault: latency %v must be positive: %w", f.Latency, ErrBadFault)
	}
	if f.Opcode > model.OpFence {
		return fmt.Errorf("mock: inject %v fault: opcode %d is not an HDMA opcode: %w", f.Kind, f.Opcode, ErrBadFault)
	}
	return nil
}

// injectionLogSize bounds the log of fired faults (a ring of the latest).
const injectionLogSize = 1024
