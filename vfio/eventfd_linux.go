package vfio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// EventFD is an eventfd for interrupt delivery (SetIRQs). A driver waits on
// it with Wait, or hands Fd to io_uring (uring.Ring, PrepReadEventfd) to read
// it without blocking a thread. The fd is blocking on purpose: io_uring
// answers a read of an O_NONBLOCK file with EAGAIN instead of waiting for
// it. TryRead and Wait poll before they read, so they never block beyond
// what they promise; one consumer at a time.
type EventFD struct {
	fd     int
	mu     sync.Mutex
	closed bool
}

// NewEventFD creates an eventfd (EFD_CLOEXEC, counter mode).
func NewEventFD() (*EventFD, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("vfio: eventfd: %w", err)
	}
	return &EventFD{fd: fd}, nil
}

// Fd is the file descriptor.
func (e *EventFD) Fd() int { return e.fd }

// TryRead returns the counter and resets it, or 0 without blocking when no
// event is pending.
func (e *EventFD) TryRead() (uint64, error) {
	if ready, err := e.poll(0); err != nil || !ready {
		return 0, err
	}
	var b [8]byte
	_, err := unix.Read(e.fd, b[:])
	if err != nil {
		return 0, fmt.Errorf("vfio: read eventfd: %w", err)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// Wait blocks until at least one event arrived (and consumes the count) or
// ctx ends. It sleeps in poll(2) in slices of at most 50 ms to notice ctx.
func (e *EventFD) Wait(ctx context.Context) (uint64, error) {
	for {
		if n, err := e.TryRead(); err != nil || n > 0 {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("vfio: wait for interrupt: %w", err)
		}
		if _, err := e.poll(50); err != nil {
			return 0, err
		}
	}
}

// poll waits up to ms milliseconds for the eventfd to be readable.
func (e *EventFD) poll(ms int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, ms)
	if errors.Is(err, unix.EINTR) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("vfio: poll eventfd: %w", err)
	}
	return n > 0 && fds[0].Revents&unix.POLLIN != 0, nil
}

// Close closes the eventfd. Idempotent. Disable the interrupt (SetIRQs with
// no eventfds) before closing.
func (e *EventFD) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	return unix.Close(e.fd)
}
