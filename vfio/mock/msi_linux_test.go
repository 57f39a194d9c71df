package mock_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// The MSI tests route interrupts to eventfds, which only Linux has.

// TestMSI: a completion of a descriptor with the interrupt flag signals the
// queue's eventfd with an 8-byte increment, only when the queue's IRQ
// register enables it.
func TestMSI(t *testing.T) {
	d := newDevice(t, mock.Config{})
	bar0, _ := d.Region(vfio.RegionBAR0)
	q := newRawQueue(t, d, 2, 64)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	must(t, err)
	defer unix.Close(efd)
	must(t, d.SetIRQs(vfio.IRQMSI, 2, []int{efd}))
	enable(t, d)
	var buf [8]byte
	// IRQ disabled: no signal.
	q.submit(model.Descriptor{Opcode: model.OpFence, Tag: 1, Flags: model.FlagInterrupt})
	q.reap(1)
	if _, err := unix.Read(efd, buf[:]); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("eventfd signalled with IRQ disabled: %v", err)
	}
	must(t, bar0.Write32(model.QueueReg(2, model.QIRQ), model.IRQEnable))
	// No interrupt flag: no signal.
	q.submit(model.Descriptor{Opcode: model.OpFence, Tag: 2})
	q.reap(1)
	if _, err := unix.Read(efd, buf[:]); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("eventfd signalled without the interrupt flag: %v", err)
	}
	q.submit(model.Descriptor{Opcode: model.OpFence, Tag: 3, Flags: model.FlagInterrupt})
	pfd := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 20000); err != nil || n != 1 {
		t.Fatalf("poll eventfd: %d, %v", n, err)
	}
	if n, err := unix.Read(efd, buf[:]); err != nil || n != 8 || buf[0] == 0 {
		t.Fatalf("eventfd read %d %v %v", n, err, buf)
	}
	if c := q.reap(1)[0]; c.Tag != 3 {
		t.Errorf("completion %+v", c)
	}
	if d.Counters().MSIs != 1 {
		t.Errorf("MSIs = %d", d.Counters().MSIs)
	}
	must(t, d.SetIRQs(vfio.IRQMSI, 0, nil))
}

// TestMSIEventfdReference: like the kernel, which holds a reference to each
// eventfd routed by VFIO_DEVICE_SET_IRQS, the mock signals the eventfd the
// host routed even after the host closes its descriptor and the number is
// reused — here by a pipe placed at that number — and it refuses a closed
// descriptor or one that is not an eventfd.
func TestMSIEventfdReference(t *testing.T) {
	d := newDevice(t, mock.Config{})
	bar0, _ := d.Region(vfio.RegionBAR0)
	q := newRawQueue(t, d, 0, 64)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	must(t, err)
	must(t, d.SetIRQs(vfio.IRQMSI, 0, []int{efd}))
	must(t, bar0.Write32(model.QueueReg(0, model.QIRQ), model.IRQEnable))
	enable(t, d)

	// The host closes its eventfd without unrouting; a pipe takes the number.
	var p [2]int
	must(t, unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK))
	defer unix.Close(p[0])
	must(t, unix.Close(efd))
	must(t, unix.Dup3(p[1], efd, unix.O_CLOEXEC))
	must(t, unix.Close(p[1]))
	defer unix.Close(efd) // the pipe's write end now

	q.submit(model.Descriptor{Opcode: model.OpFence, Tag: 1, Flags: model.FlagInterrupt})
	q.reap(1)
	var buf [8]byte
	if n, err := unix.Read(p[0], buf[:]); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("the device wrote its MSI into the file now at the closed eventfd's number: read %d bytes, %v", n, err)
	}
	if c := d.Counters(); c.MSIs != 1 || c.MSIErrors != 0 {
		t.Errorf("MSIs %d, errors %d: want the routed eventfd signalled once", c.MSIs, c.MSIErrors)
	}

	// What the kernel refuses, the mock refuses: a descriptor that is not
	// an eventfd (EINVAL), a closed one (EBADF).
	if err := d.SetIRQs(vfio.IRQMSI, 1, []int{p[0]}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("routing a pipe: %v, want EINVAL", err)
	}
	closed, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	must(t, err)
	must(t, unix.Close(closed))
	if err := d.SetIRQs(vfio.IRQMSI, 1, []int{closed}); !errors.Is(err, unix.EBADF) {
		t.Errorf("routing a closed descriptor: %v, want EBADF", err)
	}
	must(t, d.SetIRQs(vfio.IRQMSI, 0, nil))
}
