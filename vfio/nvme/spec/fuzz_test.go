package spec

import (
	"errors"
	"testing"
)

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
