package nvme

import (
	"errors"
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/vfio/nvme/spec"
)

func st(sct, sc uint8, dnr bool) Status {
	s := Status(sct)<<8 | Status(sc)
	if dnr {
		s |= 1 << 14
	}
	return s
}

func TestStatusErrors(t *testing.T) {
	tests := []struct {
		name  string
		s     Status
		is    []error
		isNot []error
	}{
		{"success", 0, nil, nil},
		{"success with More", 1 << 13, nil, nil},
		{"invalid opcode", st(0, 0x01, true), []error{ErrStatus, ErrInvalidOpcode}, []error{ErrInvalidField, ErrMedia}},
		{"invalid field", st(0, 0x02, true), []error{ErrStatus, ErrInvalidField}, []error{ErrInvalidOpcode}},
		{"data transfer error", st(0, 0x04, false), []error{ErrStatus, ErrDataTransfer}, []error{ErrInternal}},
		{"abort requested", st(0, 0x07, false), []error{ErrStatus, ErrAborted}, nil},
		{"aborted by SQ deletion", st(0, 0x08, false), []error{ErrAborted}, nil},
		{"internal", st(0, 0x06, false), []error{ErrInternal}, nil},
		{"invalid namespace", st(0, 0x0b, true), []error{ErrInvalidNamespace}, nil},
		{"invalid PRP offset", st(0, 0x13, true), []error{ErrInvalidPRPOffset}, nil},
		{"LBA out of range", st(0, 0x80, true), []error{ErrStatus, ErrLBAOutOfRange}, []error{ErrCapacityExceeded}},
		{"capacity exceeded", st(0, 0x81, true), []error{ErrCapacityExceeded}, nil},
		{"namespace not ready", st(0, 0x82, false), []error{ErrNamespaceNotReady}, nil},
		{"unknown generic", st(0, 0x7f, false), []error{ErrStatus}, []error{ErrCommandSpecific, ErrMedia}},
		{"invalid queue identifier", st(1, 0x01, true), []error{ErrInvalidQueue, ErrCommandSpecific, ErrStatus}, nil},
		{"invalid queue size", st(1, 0x02, true), []error{ErrInvalidQueue, ErrCommandSpecific}, nil},
		{"invalid interrupt vector", st(1, 0x08, true), []error{ErrInvalidInterruptVec, ErrCommandSpecific}, nil},
		{"abort limit", st(1, 0x03, false), []error{ErrAbortLimitExceeded}, nil},
		{"other command specific", st(1, 0x0a, true), []error{ErrCommandSpecific, ErrStatus}, []error{ErrInvalidQueue}},
		{"write fault", st(2, 0x80, false), []error{ErrWriteFault, ErrMedia, ErrStatus}, nil},
		{"unrecovered read", st(2, 0x81, false), []error{ErrUnrecoveredRead, ErrMedia}, []error{ErrWriteFault}},
		{"guard check", st(2, 0x82, false), []error{ErrProtection, ErrMedia}, nil},
		{"compare failure", st(2, 0x85, false), []error{ErrCompareFailure, ErrMedia}, nil},
		{"deallocated block", st(2, 0x87, false), []error{ErrMedia}, []error{ErrAccessDenied}},
		{"path error", st(3, 0x00, false), []error{ErrPath, ErrStatus}, nil},
		{"vendor specific", st(7, 0xc0, false), []error{ErrStatus}, []error{ErrPath, ErrMedia}},
		{"driver: reset", StatusReset, []error{ErrReset}, []error{ErrStatus, ErrTimeout}},
		{"driver: timeout", StatusTimeout, []error{ErrTimeout}, []error{ErrStatus, ErrReset}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := StatusErr(tt.s)
			if tt.is == nil {
				if err != nil || !tt.s.OK() {
					t.Fatalf("status %#x: %v, want success", uint16(tt.s), err)
				}
				return
			}
			if err == nil || tt.s.OK() {
				t.Fatalf("status %#x: no error", uint16(tt.s))
			}
			for _, e := range tt.is {
				if !errors.Is(err, e) {
					t.Errorf("%v: not %v", err, e)
				}
			}
			for _, e := range tt.isNot {
				if errors.Is(err, e) {
					t.Errorf("%v: matches %v", err, e)
				}
			}
		})
	}
}

func TestStatusFields(t *testing.T) {
	s := Status(0x4000 | 0x2000 | 2<<11 | 2<<8 | 0x81)
	if s.SC() != 0x81 || s.SCT() != 2 || s.CRD() != 2 || !s.More() || !s.DNR() || s.OK() {
		t.Fatalf("fields of %#x: SC %#x SCT %d CRD %d More %v DNR %v", uint16(s), s.SC(), s.SCT(), s.CRD(), s.More(), s.DNR())
	}
	msg := (&StatusError{Status: s}).Error()
	if !strings.Contains(msg, "unrecovered read") || !strings.Contains(msg, "do not retry") {
		t.Fatalf("message %q", msg)
	}
	c := Completion{CID: 5, Opcode: spec.OpRead, Status: st(0, 0x80, true)}
	var se *StatusError
	if err := c.Err(); !errors.As(err, &se) || se.CID != 5 || se.Opcode != spec.OpRead {
		t.Fatalf("completion error %v", err)
	}
}
