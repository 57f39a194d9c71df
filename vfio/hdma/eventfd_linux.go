package hdma

import "golang.org/x/sys/unix"

// newEventfd makes the eventfd a queue's MSI vector signals. Blocking:
// io_uring completes a READ of an O_NONBLOCK file with EAGAIN instead of
// waiting for it to become readable.
func newEventfd() (int, error) { return unix.Eventfd(0, unix.EFD_CLOEXEC) }
