package main

/*
#include <stdint.h>
#include "hcomm.h"
*/
import "C"

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/span"
)

// fileDirect is HCOMM_FILE_DIRECT (hcomm_open_file's flags).
const fileDirect = 1

var _ = [1]struct{}{}[fileDirect-C.HCOMM_FILE_DIRECT]

// fileAlign is the read handle's alignment and its file space's granule:
// what O_DIRECT needs of addresses, lengths and offsets.
const fileAlign = uringfile.DirectAlign

//export hcommgo_open_file
func hcommgo_open_file(fh *C.hcomm_handle_t, path *C.char, flags, depth C.uint32_t, size *C.uint64_t, granted *C.uint32_t) C.int {
	s, n, g, code := openFile(C.GoString(path), uint32(flags), uint32(depth), cInvoke)
	if code != codeOK {
		return C.int(code)
	}
	*fh = C.hcomm_handle_t(s.handle)
	if size != nil {
		*size = C.uint64_t(n)
	}
	if granted != nil {
		*granted = C.uint32_t(g)
	}
	return C.int(codeOK)
}

// openFile opens the existing file at path for reading (O_DIRECT when
// flags asks for it and the file system allows it) as a new handle whose
// device space is the whole file: device address base+k is byte k. Its own
// pool is the smallest the engine takes; transfers read into memory
// registered with it (another handle's pool blocks, say). It returns the
// file's size and the flags granted. Every failure sets the message.
func openFile(path string, flags, depth uint32, invoke invokeFunc) (_ *state, size uint64, granted uint32, code int32) {
	if path == "" {
		return nil, 0, 0, fail(codeEINVAL, "hcomm_open_file: path is empty")
	}
	if flags&^fileDirect != 0 {
		return nil, 0, 0, fail(codeEINVAL, "hcomm_open_file(%s): flags %#x: unknown bits (HCOMM_FILE_DIRECT is %#x)", path, flags, fileDirect)
	}
	f, err := openRead(path, flags&fileDirect != 0)
	if err != nil {
		return nil, 0, 0, fail(openCode(err), "hcomm_open_file: %v", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, 0, fail(codeEIO, "hcomm_open_file: %v", err)
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, 0, 0, fail(codeEINVAL, "hcomm_open_file: %s is not a regular file (%v)", path, st.Mode().Type())
	}
	size = uint64(st.Size())
	if flags&fileDirect != 0 && isDirect(f) {
		granted = fileDirect
	}
	s := &state{target: targetFile, invoke: invoke, log: logger, file: f}
	// The whole file (rounded up to the granule; at least one) is
	// allocated file space, so that every range of it is addressable.
	space := max(fileAlign, (size+fileAlign-1)/fileAlign*fileAlign)
	s.fileSpace = span.New(space, fileAlign)
	s.fileSpace.Alloc(space)
	// One file: a table of one slot, not the default's 4096 (98 KiB of Go
	// heap per open handle).
	be, err := uringfile.New(f, uringfile.Config{Logger: logger, MaxFiles: 1})
	if err != nil {
		s.closeFile()
		return nil, 0, 0, failErr(err)
	}
	// Its pool is in 4 KiB pages: nothing reads into it (transfers use
	// registered memory), and with the default backings a 64 KiB pool
	// would take a whole 2 MiB hugetlb page, pinned, per open file.
	c := config{Target: targetFile, PoolSize: engine.MinPoolSize, QueueDepth: depth, Align: fileAlign,
		Backings: []hugepage.Backing{hugepage.Backing4K}}
	if code, err := c.check(); err != nil {
		s.closeFile()
		return nil, 0, 0, fail(code, "hcomm_open_file(%s): %v", path, err)
	}
	if code, err := s.openEngine(c, be); err != nil {
		s.closeFile()
		return nil, 0, 0, fail(code, "hcomm_open_file(%s): %v", path, err)
	}
	if code, err := s.register(); err != nil {
		_ = s.eng.Close()
		s.closeFile()
		return nil, 0, 0, fail(code, "hcomm_open_file(%s): %v", path, err)
	}
	return s, size, granted, codeOK
}

// openRead opens path read-only; with direct, O_DIRECT first and plain
// reads where the file system refuses it (tmpfs: EINVAL).
func openRead(path string, direct bool) (*os.File, error) {
	if direct {
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
		if err == nil || !errors.Is(err, syscall.EINVAL) {
			return f, err
		}
	}
	return os.OpenFile(path, os.O_RDONLY, 0)
}

func isDirect(f *os.File) bool {
	fl, err := fcntlFlags(f)
	return err == nil && fl&syscall.O_DIRECT != 0
}

func fcntlFlags(f *os.File) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// openCode is the code of a failed open: no such file ENODEV (as for the
// file target of hcomm_init; ENOENT means an unknown transfer ID), no
// permission EACCES, else EIO.
func openCode(err error) int32 {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return codeENODEV
	case errors.Is(err, fs.ErrPermission):
		return codeEACCES
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTDIR):
		return codeEINVAL
	}
	return codeEIO
}
