package main

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

// Return codes of the C ABI: the negated Linux errnos that hcomm.h defines
// as HCOMM_* (capi.go checks at compile time that both agree).
const (
	codeOK           int32 = 0
	codeENOENT       int32 = -2
	codeEIO          int32 = -5
	codeEBADF        int32 = -9
	codeEAGAIN       int32 = -11
	codeENOMEM       int32 = -12
	codeEFAULT       int32 = -14
	codeENODEV       int32 = -19
	codeEINVAL       int32 = -22
	codeEMFILE       int32 = -24
	codeEOPNOTSUPP   int32 = -95
	codeESHUTDOWN    int32 = -108
	codeETIMEDOUT    int32 = -110
	codeEINPROGRESS  int32 = -115
	codeESTALE       int32 = -116
	codeECANCELED    int32 = -125
	codeEACCES       int32 = -13
	codeEBUSY        int32 = -16
	codeEFORK        int32 = -1001 // returned by hcomm.c only (before Go is entered)
	codeENXIO        int32 = -6    // no such peer
	codeECONNRESET   int32 = -104  // the peer is gone
	codeECONNREFUSED int32 = -111  // connect failed
)

// definedCodes are every code hcomm.h defines: the only values the ABI
// returns (TestCodesDefined).
var definedCodes = []int32{codeOK, codeENOENT, codeEIO, codeEBADF, codeEAGAIN, codeENOMEM, codeEACCES,
	codeEFAULT, codeEBUSY, codeENODEV, codeEINVAL, codeEMFILE, codeEOPNOTSUPP, codeESHUTDOWN,
	codeETIMEDOUT, codeEINPROGRESS, codeESTALE, codeECANCELED, codeEFORK, codeENXIO, codeECONNRESET,
	codeECONNREFUSED}

// codeOf maps an engine error to a code, always one hcomm.h defines (an
// errno without a code of its own becomes the nearest defined one). Hot errors (queue full) are tested
// first, by identity; errors.Is walks wrapped causes without allocating.
func codeOf(err error) int32 {
	switch {
	case err == nil:
		return codeOK
	case err == engine.ErrQueueFull:
		return codeEAGAIN
	// The remote target's (before the engine's sentinels they wrap: a
	// dead peer's transfers also wrap ErrIO or ErrTimeout).
	case errors.Is(err, ucx.ErrPeerGone):
		return codeECONNRESET
	case errors.Is(err, ucx.ErrNoPeer):
		return codeENXIO
	case errors.Is(err, ucx.ErrRemoteBounds):
		return codeEFAULT
	case errors.Is(err, ucx.ErrBadAddress):
		return codeEINVAL
	case errors.Is(err, ucx.ErrConnect):
		return codeECONNREFUSED
	case errors.Is(err, engine.ErrCanceled):
		return codeECANCELED
	case errors.Is(err, engine.ErrTimeout):
		return codeETIMEDOUT
	case errors.Is(err, engine.ErrDevice), errors.Is(err, engine.ErrIO), errors.Is(err, engine.ErrShortIO):
		return codeEIO
	case errors.Is(err, context.DeadlineExceeded):
		return codeEINPROGRESS
	case errors.Is(err, engine.ErrClosed):
		return codeESHUTDOWN
	case errors.Is(err, engine.ErrStaleID):
		return codeESTALE
	case errors.Is(err, engine.ErrUnknownID):
		return codeENOENT
	case errors.Is(err, engine.ErrForeignBlock), errors.Is(err, engine.ErrFreedBlock), errors.Is(err, engine.ErrOutOfBounds):
		return codeEFAULT
	case errors.Is(err, engine.ErrNotSupported):
		return codeEOPNOTSUPP
	case errors.Is(err, engine.ErrBusy):
		return codeEBUSY
	case errors.Is(err, engine.ErrBadConfig), errors.Is(err, engine.ErrBadTransfer), errors.Is(err, engine.ErrAlignment),
		errors.Is(err, hugepage.ErrInvalidSize), errors.Is(err, hugepage.ErrBadAlign):
		return codeEINVAL
	case errors.Is(err, hugepage.ErrPoolExhausted), errors.Is(err, hugepage.ErrTooLarge),
		errors.Is(err, hugepage.ErrNoHugepages), errors.Is(err, hugepage.ErrMemlock), errors.Is(err, syscall.ENOMEM):
		return codeENOMEM
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENODEV):
		return codeENODEV
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		switch en {
		case syscall.EPERM, syscall.EACCES, syscall.EROFS, syscall.ETXTBSY:
			return codeEACCES
		case syscall.EISDIR, syscall.ENOTDIR, syscall.ENAMETOOLONG, syscall.ELOOP, syscall.EINVAL:
			return codeEINVAL
		case syscall.ENXIO, syscall.ENOTBLK:
			return codeENODEV
		case syscall.EMFILE, syscall.ENFILE:
			return codeEMFILE
		case syscall.EBUSY:
			return codeEBUSY
		case syscall.EAGAIN:
			return codeEAGAIN
		case syscall.EFAULT:
			return codeEFAULT
		case syscall.EOPNOTSUPP, syscall.ENOSYS:
			return codeEOPNOTSUPP
		}
	}
	return codeEIO
}
