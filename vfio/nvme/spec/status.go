package spec

import "errors"

// Errors of the specification's encoders and parsers, for errors.Is
// (package nvme re-exports them as its own).
var (
	// ErrNotNVMe: identify data this package cannot use (a namespace that
	// is inactive or has an LBA format it does not know).
	ErrNotNVMe = errors.New("nvme: not a usable NVMe controller")
	// ErrBadTransfer: a transfer that no command can carry (block count,
	// buffer or PRP list alignment, list space).
	ErrBadTransfer = errors.New("nvme: invalid transfer")
)

// Status is the 15-bit status field of a completion (DW3 bits 31:17):
// SC in bits 7:0, SCT in 10:8, CRD in 12:11, More in 13, DNR in 14. Bit 15
// is never set by a controller; package nvme uses it for completions it
// makes up itself (nvme.StatusReset, nvme.StatusTimeout).
type Status uint16

// Status code types.
const (
	SCTGeneric         = 0
	SCTCommandSpecific = 1
	SCTMedia           = 2
	SCTPath            = 3
	SCTVendor          = 7
)

// SC is the status code, SCT the status code type.
func (s Status) SC() uint8  { return uint8(s) }
func (s Status) SCT() uint8 { return uint8(s>>8) & 7 }

// CRD is the command retry delay index, More says there is more in the
// error log, DNR says a retry will fail too.
func (s Status) CRD() uint8 { return uint8(s>>11) & 3 }
func (s Status) More() bool { return s>>13&1 != 0 }
func (s Status) DNR() bool  { return s>>14&1 != 0 }

// OK reports success: SCT and SC zero (CRD, More and DNR do not matter).
func (s Status) OK() bool { return s&0x87ff == 0 }
