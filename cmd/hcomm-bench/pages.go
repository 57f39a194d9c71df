package main

import (
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/hcomm-go/hcomm/cmd/internal/pagefault"
	"github.com/hcomm-go/hcomm/hugepage"
)

const pagesSize = 1 << 30

// pageResult is one backing's measurements over the repetitions.
type pageResult struct {
	backing hugepage.Backing
	faults  stat // minor faults to touch 1 GiB
	touch   stat // ms to touch 1 GiB (kernel zeroing included)
	access  stat // ns per dependent random 8-byte load
	err     error
}

// runPages maps 1 GiB with 4 KiB pages, 2 MiB and 1 GiB hugetlb pages,
// touches it (one write per 4 KiB) counting this thread's minor faults,
// then times dependent random loads over it. As root it reserves the
// hugetlb pages and gives them back; otherwise it uses what is reserved.
func runPages(o *options) ([]*pageResult, []string) {
	var skipped []string
	backings := []hugepage.Backing{hugepage.Backing4K}
	root := os.Geteuid() == 0
	for _, b := range []hugepage.Backing{hugepage.BackingHugetlb2M, hugepage.BackingHugetlb1G} {
		n := pagesSize / b.PageSize()
		if root {
			// A margin: the hugetlb pool is the whole machine's, and other
			// processes may take pages from it while this runs.
			r, err := hugepage.Reserve(b.PageSize(), n+max(1, n/16))
			if err != nil {
				skipped = append(skipped, fmt.Sprintf("pages %v: reserve %d pages: %v", b, n, err))
				continue
			}
			undo := atExit(func() { _ = r.Release() })
			defer undo()
		} else if c, err := hugepage.ReadHugeCounts(b.PageSize()); err != nil || c.Available() < n {
			skipped = append(skipped, fmt.Sprintf("pages %v: needs %d reserved pages and cannot reserve them unprivileged (run as root)", b, n))
			continue
		}
		backings = append(backings, b)
	}
	accesses := 1 << 22
	if o.quick {
		accesses = 1 << 18
	}
	res := make([]*pageResult, len(backings))
	var f, t, a = make([][]float64, len(backings)), make([][]float64, len(backings)), make([][]float64, len(backings))
	for i, b := range backings {
		res[i] = &pageResult{backing: b}
	}
	for rep := 0; rep < o.reps; rep++ {
		for i, b := range backings {
			if res[i].err != nil {
				continue
			}
			faults, took, ns, err := pagesOnce(b, accesses)
			if err != nil {
				res[i].err = err
				continue
			}
			f[i] = append(f[i], float64(faults))
			t[i] = append(t[i], float64(took.Microseconds())/1000)
			a[i] = append(a[i], ns)
		}
	}
	for i := range res {
		res[i].faults, res[i].touch, res[i].access = newStat(f[i]), newStat(t[i]), newStat(a[i])
	}
	return res, skipped
}

func pagesOnce(b hugepage.Backing, accesses int) (faults int64, took time.Duration, nsPerAccess float64, err error) {
	ar, err := hugepage.NewArena(hugepage.ArenaConfig{Size: pagesSize, Backings: []hugepage.Backing{b}})
	if err != nil {
		return 0, 0, 0, err
	}
	defer ar.Close()
	mem := ar.Bytes()[:pagesSize]
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	faults, took = pagefault.Touch(mem)
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	t0 := time.Now()
	sum := chase(words, accesses)
	el := time.Since(t0)
	if sum == 42 { // keeps the loads; never true for zeroed memory with these seeds
		fmt.Fprint(os.Stderr, "")
	}
	return faults, took, float64(el.Nanoseconds()) / float64(accesses), nil
}

// chase does n dependent loads at pseudo-random 8-byte words: each address
// mixes the previous load's value in, so the loads cannot overlap and each
// pays its TLB miss and cache miss in full.
func chase(words []uint64, n int) uint64 {
	mask := uint64(len(words) - 1)
	x := uint64(0x9e3779b97f4a7c15)
	idx := uint64(0)
	var sum uint64
	for range n {
		v := words[idx]
		sum += v
		x = x*6364136223846793005 + 1442695040888963407
		idx = ((x >> 17) ^ v) & mask
	}
	return sum
}
