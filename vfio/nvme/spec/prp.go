package spec

import (
	"encoding/binary"
	"fmt"
)

// PRPListPages is how many list pages a transfer of n bytes starting at an
// IOVA with page offset off needs (0 when PRP1 and PRP2 suffice).
func PRPListPages(off uint64, n int) int {
	entries := prpEntries(off, n)
	if entries <= 2 {
		return 0
	}
	rest := entries - 1 // PRP1 covers the first page
	// Each list page but the last gives its last slot to the chain pointer.
	pages := 1
	for rest > PRPPerPage {
		rest -= PRPPerPage - 1
		pages++
	}
	return pages
}

// prpEntries is how many memory pages n bytes at page offset off touch.
func prpEntries(off uint64, n int) int {
	off %= PageSize
	return int((off + uint64(n) + PageSize - 1) / PageSize)
}

// BuildPRP fills PRP1 and PRP2 for a transfer of n bytes at device address
// iova (contiguous in IOVA space), writing a PRP list into list (whose
// first byte the controller sees at listIOVA, page aligned, contiguous)
// when the transfer touches more than two pages. The rules (NVMe 1.4,
// "Physical Region Page Entry and List"): PRP1 may carry a dword-aligned
// page offset; every later entry is page aligned; PRP2 is the second page
// when there are exactly two, else the list's address; a full list page
// ends with a pointer to the next list page. It returns the number of list
// bytes written.
func BuildPRP(iova uint64, n int, list []byte, listIOVA uint64) (prp1, prp2 uint64, used int, err error) {
	if n <= 0 {
		return 0, 0, 0, fmt.Errorf("%w: %d-byte transfer", ErrBadTransfer, n)
	}
	if iova&3 != 0 {
		return 0, 0, 0, fmt.Errorf("%w: buffer IOVA %#x is not dword aligned", ErrBadTransfer, iova)
	}
	entries := prpEntries(iova, n)
	prp1 = iova
	page := iova&^(PageSize-1) + PageSize // the second page
	switch {
	case entries == 1:
		return prp1, 0, 0, nil
	case entries == 2:
		return prp1, page, 0, nil
	}
	if listIOVA&(PageSize-1) != 0 {
		return 0, 0, 0, fmt.Errorf("%w: PRP list IOVA %#x is not page aligned", ErrBadTransfer, listIOVA)
	}
	pages := PRPListPages(iova, n)
	if len(list) < pages*PageSize {
		return 0, 0, 0, fmt.Errorf("%w: %d bytes need %d PRP list pages, %d bytes of list space", ErrBadTransfer, n, pages, len(list))
	}
	rest := entries - 1
	slot := 0 // 8-byte slot index into list
	for rest > 0 {
		// Last slot of a list page, with more entries than it can hold:
		// chain to the next list page.
		if slot%PRPPerPage == PRPPerPage-1 && rest > 1 {
			binary.LittleEndian.PutUint64(list[slot*8:], listIOVA+uint64(slot+1)*8)
			slot++
			continue
		}
		binary.LittleEndian.PutUint64(list[slot*8:], page)
		page += PageSize
		slot++
		rest--
	}
	return prp1, listIOVA, slot * 8, nil
}
