package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// TestCodesDefined: whatever error reaches the ABI, its code is one hcomm.h
// defines (a directory as target_path returned -21, an immutable
// file -1, codes hcomm_strerror did not know).
func TestCodesDefined(t *testing.T) {
	errs := []error{
		engine.ErrQueueFull, engine.ErrCanceled, engine.ErrTimeout, engine.ErrDevice, engine.ErrIO,
		engine.ErrShortIO, engine.ErrClosed, engine.ErrStaleID, engine.ErrUnknownID, engine.ErrForeignBlock,
		engine.ErrFreedBlock, engine.ErrOutOfBounds, engine.ErrNotSupported, engine.ErrBadConfig,
		engine.ErrBadTransfer, engine.ErrAlignment, engine.ErrBusy, hugepage.ErrPoolExhausted,
		hugepage.ErrBadAlign, os.ErrNotExist, os.ErrPermission, errors.New("anything"),
		ucx.ErrUCX, ucx.ErrBadAddress, ucx.ErrConnect, ucx.ErrNoPeer, ucx.ErrPeerGone, ucx.ErrRemoteBounds,
		ucx.ErrTransport, ucx.ErrClosed,
	}
	for en := syscall.Errno(1); en < 4096; en++ {
		errs = append(errs, en, &os.PathError{Op: "open", Path: "/x", Err: en}, fmt.Errorf("wrapped: %w", en))
	}
	for _, err := range errs {
		if c := codeOf(err); !slices.Contains(definedCodes, c) {
			t.Errorf("codeOf(%v) = %d: not a code of hcomm.h", err, c)
		}
	}
	for _, tc := range []struct {
		err  error
		want int32
	}{
		{syscall.EISDIR, codeEINVAL},
		{syscall.EPERM, codeEACCES},
		{syscall.EACCES, codeEACCES},
		{syscall.EROFS, codeEACCES},
		{syscall.ENOENT, codeENODEV},
		{engine.ErrBusy, codeEBUSY},
		// A dead peer's transfers wrap ErrPeerGone with ErrIO or ErrTimeout.
		{fmt.Errorf("x: %w: %w", ucx.ErrPeerGone, engine.ErrIO), codeECONNRESET},
		{fmt.Errorf("x: %w: %w", ucx.ErrPeerGone, engine.ErrTimeout), codeECONNRESET},
		{fmt.Errorf("x: %w: %w", ucx.ErrNoPeer, engine.ErrBadTransfer), codeENXIO},
		{fmt.Errorf("x: %w: %w", ucx.ErrRemoteBounds, engine.ErrOutOfBounds), codeEFAULT},
		{fmt.Errorf("x: %w: %w", ucx.ErrTransport, engine.ErrIO), codeEIO},
		{ucx.ErrConnect, codeECONNREFUSED},
		{ucx.ErrBadAddress, codeEINVAL},
	} {
		if c := codeOf(tc.err); c != tc.want {
			t.Errorf("codeOf(%v) = %d, want %d", tc.err, c, tc.want)
		}
	}
}

// TestRegisterHost drives hcomm_register_host_mem's Go half: caller memory
// is used in place, misuse is refused with its code and a message.
func TestRegisterHost(t *testing.T) {
	var msgs []string
	detail = func(m string) { msgs = append(msgs, m) }
	defer func() { detail = nil }()
	s := openT(t, config{Target: targetMemory}, newCalls().invoke)
	mem, err := unix.Mmap(-1, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	p := unsafe.Pointer(&mem[0])
	if c := s.registerHost(p, 64<<10); c != codeOK {
		t.Fatalf("registerHost: %d (%v)", c, msgs)
	}
	pool, c := s.allocHost(4096)
	if c != codeOK {
		t.Fatal(c)
	}
	for i := range 4096 {
		mem[i] = byte(i * 3)
	}
	id, c := s.submit(uintptr(p), pool, 4096, 0, 0)
	if c != codeOK || s.wait(id, 5000) != codeOK {
		t.Fatalf("submit from registered memory: %d", c)
	}
	pb, _, _ := s.host.at(pool)
	got := pb.Bytes()[:4096]
	for i := range got {
		if got[i] != mem[i] {
			t.Fatalf("byte %d: %d, want %d", i, got[i], mem[i])
		}
	}
	for _, tc := range []struct {
		name string
		code int32
		call func() int32
	}{
		{"unaligned", codeEINVAL, func() int32 { return s.registerHost(unsafe.Add(p, 8), 4096) }},
		{"overlap", codeEINVAL, func() int32 { return s.registerHost(unsafe.Add(p, 4096), 4096) }},
		{"free registered", codeEINVAL, func() int32 { return s.freeHost(uintptr(p)) }},
		{"unregister pool", codeEINVAL, func() int32 { return s.unregisterHost(pool) }},
		{"unregister inside", codeEFAULT, func() int32 { return s.unregisterHost(uintptr(p) + 4096) }},
		{"unregister", codeOK, func() int32 { return s.unregisterHost(uintptr(p)) }},
		{"unregister twice", codeEFAULT, func() int32 { return s.unregisterHost(uintptr(p)) }},
	} {
		msgs = msgs[:0]
		if c := tc.call(); c != tc.code {
			t.Errorf("%s: code %d, want %d (%v)", tc.name, c, tc.code, msgs)
		} else if c != codeOK && len(msgs) == 0 {
			t.Errorf("%s: no message for hcomm_last_error", tc.name)
		}
	}
	if _, c := s.submit(uintptr(p), pool, 64, 0, 0); c != codeEFAULT {
		t.Errorf("submit from unregistered memory: %d, want EFAULT", c)
	}
}
