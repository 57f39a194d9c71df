package mock

import "errors"

// Errors callers can test for with errors.Is (listed in doc.go; the device's
// refusals are the vfio package's sentinels).
var (
	// ErrBadConfig reports an invalid Config.
	ErrBadConfig = errors.New("invalid device configuration")
	// ErrBadFault reports an invalid fault-injection rule.
	ErrBadFault = errors.New("invalid fault rule")
)
