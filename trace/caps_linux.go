package trace

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Capability numbers (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// CheckPrivileges reports, before anything is loaded, whether the process
// may load and attach tracing programs: it needs CAP_BPF and CAP_PERFMON in
// its effective set (CAP_SYS_ADMIN implies both). The error wraps
// ErrNotPrivileged and names the missing capabilities.
func CheckPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(capSysAdmin) {
		return nil
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) {
		missing = append(missing, "CAP_PERFMON")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: missing %s in the effective capability set (euid %d); "+
		"run as root, or grant them: setcap cap_bpf,cap_perfmon+ep $(which hcomm-trace)",
		ErrNotPrivileged, strings.Join(missing, " and "), os.Geteuid())
}
