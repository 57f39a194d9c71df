package nvme

import (
	"bytes"
	"errors"
	"testing"
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
		if len(b) < CQESize {
			return
		}
		b = b[:CQESize]
		e := ParseCQE(b)
		out := make([]byte, CQESize)
		e.Marshal(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("% x parsed to %+v, marshals to % x", b, e, out)
		}
		err := e.Status.Err()
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

// FuzzBuildPRP: for any buffer, PRPs either are refused with ErrBadTransfer
// or cover exactly the buffer.
func FuzzBuildPRP(f *testing.F) {
	f.Add(uint64(0x10000), 4096)
	f.Add(uint64(0x10200), 8192)
	f.Add(uint64(0x200008), 2<<20)
	f.Add(uint64(0x3), 7)
	f.Fuzz(func(t *testing.T, iova uint64, n int) {
		if n > 8<<20 || iova > 1<<50 {
			return
		}
		const listIOVA = 1 << 52
		list := make([]byte, 4*PageSize)
		prp1, prp2, _, err := BuildPRP(iova, n, list, listIOVA)
		if err != nil {
			if !errors.Is(err, ErrBadTransfer) {
				t.Fatalf("BuildPRP(%#x, %d): %v", iova, n, err)
			}
			return
		}
		next, total := iova, 0
		for _, s := range walkPRP(t, prp1, prp2, n, list, listIOVA) {
			if s[0] != next {
				t.Fatalf("BuildPRP(%#x, %d): segment at %#x, want %#x", iova, n, s[0], next)
			}
			next += s[1]
			total += int(s[1])
		}
		if total != n {
			t.Fatalf("BuildPRP(%#x, %d): %d bytes covered", iova, n, total)
		}
	})
}
