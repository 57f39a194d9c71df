package nvme

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hcomm-go/hcomm/vfio/nvme/spec"
)

// FuzzParseCQE: any 16 bytes parse, re-marshal to the same bytes (modulo
// nothing: every bit has a field), and their status maps to an error
// consistently: nil exactly when SCT and SC are zero, else an error that
// matches ErrStatus and at most one code sentinel.
func FuzzParseCQE(f *testing.F) {
	seeds := [][]byte{
		make([]byte, 16),
		{7, 0, 0, 0, 0, 0, 0, 0, 5, 0, 1, 0, 3, 0, 1, 0},             // success, phase 1
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x00, 0x81}, // LBA out of range, DNR
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0x09, 0x00}, // data transfer error
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < spec.CQESize {
			return
		}
		b = b[:spec.CQESize]
		e := spec.ParseCQE(b)
		out := make([]byte, spec.CQESize)
		e.Marshal(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("% x parsed to %+v, marshals to % x", b, e, out)
		}
		err := StatusErr(e.Status)
		if (err == nil) != (e.Status.SCT() == 0 && e.Status.SC() == 0) {
			t.Fatalf("status %#x: err %v", uint16(e.Status), err)
		}
		if err != nil {
			if !errors.Is(err, ErrStatus) {
				t.Fatalf("status %#x: %v does not match ErrStatus", uint16(e.Status), err)
			}
			if errors.Is(err, ErrReset) || errors.Is(err, ErrTimeout) {
				t.Fatalf("controller status %#x taken for a driver status: %v", uint16(e.Status), err)
			}
			_ = err.Error()
		}
	})
}
