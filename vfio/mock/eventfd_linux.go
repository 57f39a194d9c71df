package mock

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// dupEventfd duplicates fd (close-on-exec) after checking that it is an
// eventfd, where /proc tells.
func dupEventfd(fd int) (int, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(dup)); err == nil && link != "anon_inode:[eventfd]" {
		unix.Close(dup)
		return -1, fmt.Errorf("%s is not an eventfd: %w", link, unix.EINVAL)
	}
	return dup, nil
}
