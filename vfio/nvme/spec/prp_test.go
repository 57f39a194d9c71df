package spec

import (
	"encoding/binary"
	"errors"
	"testing"
)

// walkPRP follows PRP1, PRP2 and the list the way a controller does and
// returns the (address, length) segments of the transfer. list is the list
// memory, seen by the controller at listIOVA.
func walkPRP(t *testing.T, prp1, prp2 uint64, n int, list []byte, listIOVA uint64) [][2]uint64 {
	t.Helper()
	var segs [][2]uint64
	first := min(uint64(n), PageSize-prp1%PageSize)
	segs = append(segs, [2]uint64{prp1, first})
	rest := uint64(n) - first
	if rest == 0 {
		if prp2 != 0 {
			t.Errorf("PRP2 %#x set for a one-page transfer", prp2)
		}
		return segs
	}
	if rest <= PageSize {
		return append(segs, [2]uint64{prp2, rest})
	}
	// prp2 is a list pointer: entries until rest is covered; the last
	// slot of a list page chains to the next when more than one entry
	// remains.
	ptr := prp2
	for rest > 0 {
		slot := ptr - listIOVA
		if slot%8 != 0 || slot+8 > uint64(len(list)) {
			t.Fatalf("list pointer %#x outside the list", ptr)
		}
		e := binary.LittleEndian.Uint64(list[slot:])
		if (ptr+8)%PageSize == 0 && rest > PageSize {
			ptr = e
			continue
		}
		if e%PageSize != 0 {
			t.Fatalf("list entry %#x not page aligned", e)
		}
		l := min(rest, PageSize)
		segs = append(segs, [2]uint64{e, l})
		rest -= l
		ptr += 8
	}
	return segs
}

func TestBuildPRP(t *testing.T) {
	const listIOVA = 0x7000_0000
	tests := []struct {
		name      string
		iova      uint64
		n         int
		wantPRP2  string // "none", "page", "list"
		listPages int
	}{
		{"512 B aligned", 0x10000, 512, "none", 0},
		{"4 KiB aligned", 0x10000, 4096, "none", 0},
		{"4 KiB + 4 offset", 0x10004, 4096, "page", 0},
		{"8 KiB aligned", 0x10000, 8192, "page", 0},
		{"8 KiB + 512 offset", 0x10200, 8192, "list", 1},
		{"12 KiB aligned", 0x10000, 12288, "list", 1},
		{"128 KiB aligned", 0x100000, 128 << 10, "list", 1},
		{"1 MiB aligned", 0x100000, 1 << 20, "list", 1},
		{"2 MiB aligned: 512 entries, 511 in the list", 0x200000, 2 << 20, "list", 1},
		{"2 MiB + 8: 513 entries, 512 in one list page", 0x200008, 2 << 20, "list", 1},
		{"2 MiB + 8 KiB: 514 entries, chained", 0x200000, 2<<20 + 8192, "list", 2},
		{"4 MiB aligned: chained", 0x400000, 4 << 20, "list", 2},
		{"3 bytes", 0x1ffc, 3, "none", 0},
		{"straddles one boundary", 0x1ffc, 8, "page", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PRPListPages(tt.iova, tt.n); got != tt.listPages {
				t.Fatalf("PRPListPages %d, want %d", got, tt.listPages)
			}
			list := make([]byte, 4*PageSize)
			for i := range list {
				list[i] = 0xee
			}
			prp1, prp2, used, err := BuildPRP(tt.iova, tt.n, list, listIOVA)
			if err != nil {
				t.Fatal(err)
			}
			if prp1 != tt.iova {
				t.Fatalf("PRP1 %#x, want %#x", prp1, tt.iova)
			}
			switch tt.wantPRP2 {
			case "none":
				if prp2 != 0 || used != 0 {
					t.Fatalf("PRP2 %#x, %d list bytes; want none", prp2, used)
				}
			case "page":
				if prp2 != (tt.iova&^(PageSize-1))+PageSize || used != 0 {
					t.Fatalf("PRP2 %#x, %d list bytes; want the second page", prp2, used)
				}
			case "list":
				if prp2 != listIOVA || used == 0 || used > tt.listPages*PageSize {
					t.Fatalf("PRP2 %#x, %d list bytes; want the list at %#x in %d pages", prp2, used, listIOVA, tt.listPages)
				}
			}
			// The walk must cover exactly [iova, iova+n), in order.
			next := tt.iova
			total := uint64(0)
			for _, s := range walkPRP(t, prp1, prp2, tt.n, list, listIOVA) {
				if s[0] != next {
					t.Fatalf("segment at %#x, want %#x", s[0], next)
				}
				next += s[1]
				total += s[1]
			}
			if total != uint64(tt.n) {
				t.Fatalf("segments cover %d bytes, want %d", total, tt.n)
			}
		})
	}
}

func TestBuildPRPErrors(t *testing.T) {
	list := make([]byte, PageSize)
	for _, c := range []struct {
		name     string
		iova     uint64
		n        int
		list     []byte
		listIOVA uint64
	}{
		{"zero length", 0x1000, 0, list, 0x2000},
		{"unaligned buffer", 0x1002, 512, list, 0x2000},
		{"unaligned list", 0x1000, 16384, list, 0x2008},
		{"list too short", 0x1000, 4 << 20, list, 0x2000},
	} {
		if _, _, _, err := BuildPRP(c.iova, c.n, c.list, c.listIOVA); !errors.Is(err, ErrBadTransfer) {
			t.Errorf("%s: %v, want ErrBadTransfer", c.name, err)
		}
	}
}
