package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"github.com/hcomm-go/hcomm/cmd/internal/pagefault"
	"github.com/hcomm-go/hcomm/hugepage"
	"golang.org/x/sys/unix"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

func (d *demo) machine() error {
	for _, ps := range []int{2 * mib, gib} {
		c, err := hugepage.ReadHugeCounts(ps)
		if err != nil {
			d.printf("hugetlb %-6s not offered by this kernel (%v)", figures.Size(ps), err)
			continue
		}
		d.printf("hugetlb %-6s pool: %d pages, %d free, %d promised to mappings", figures.Size(ps), c.Total, c.Free, c.Resv)
	}
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil {
		d.printf("transparent hugepages: %s", strings.TrimSpace(string(b)))
	}
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
	d.printf("euid %d; RLIMIT_MEMLOCK %s", os.Geteuid(), rlimitName(lim.Cur))
	if !d.root {
		d.printf("not root: cannot reserve hugetlb pages or read physical addresses; the demo uses what is already reserved")
	}
	return nil
}

// reserve reserves n pages of ps for the demo (root only) and schedules
// their release; it reports and returns false when that is not possible.
func (d *demo) reserve(ps, n int, what string) bool {
	if !d.root {
		c, err := hugepage.ReadHugeCounts(ps)
		if err == nil && c.Available() >= n {
			d.printf("using %d already reserved %s pages for %s", n, figures.Size(ps), what)
			return true
		}
		d.skip("%s: needs %d hugetlb pages of %s; not root, so the demo cannot reserve them (run as root, or as root: echo %d > /sys/kernel/mm/hugepages/hugepages-%dkB/nr_hugepages)",
			what, n, figures.Size(ps), c.Total+n-c.Available(), ps>>10)
		return false
	}
	r, err := hugepage.Reserve(ps, n)
	if err != nil {
		d.skip("%s: %v", what, err)
		return false
	}
	d.printf("reserved %d pages of %s for %s (given back at the end)", n, figures.Size(ps), what)
	d.cleanup = append(d.cleanup, func() {
		if err := r.Release(); err != nil {
			fmt.Fprintf(os.Stderr, "releasing %d pages of %s: %v\n", n, figures.Size(ps), err)
		}
	})
	return true
}

func (d *demo) arenas() error {
	d.reserve(2*mib, 32, "the 64 MiB arenas")
	cases := []struct {
		name string
		cfg  hugepage.ArenaConfig
	}{
		{"default policy (2M, THP, 4K)", hugepage.ArenaConfig{Size: 64 * mib, Populate: true}},
		{"2 MiB hugetlb required", hugepage.ArenaConfig{Size: 64 * mib, Populate: true, Backings: []hugepage.Backing{hugepage.BackingHugetlb2M}}},
		{"memfd 2 MiB (shareable fd), then 4K", hugepage.ArenaConfig{Size: 3 * mib, Backings: []hugepage.Backing{hugepage.BackingMemfd2M, hugepage.Backing4K}}},
		{"1 GiB hugetlb required (none reserved at this point: the error says what to do)", hugepage.ArenaConfig{Size: gib, Backings: []hugepage.Backing{hugepage.BackingHugetlb1G}}},
	}
	for _, c := range cases {
		d.printf("%s:", c.name)
		a, err := hugepage.NewArena(c.cfg)
		if err != nil {
			d.printf("  refused (the policy forbids a fallback): %v", err)
			continue
		}
		d.describe(a)
		a.Close()
	}
	return nil
}

// describe prints what an arena got and the kernel's proof of it.
func (d *demo) describe(a *hugepage.Arena) {
	fd := ""
	if a.Fd() >= 0 {
		fd = fmt.Sprintf(", memfd %d", a.Fd())
	}
	d.printf("  got %v: %s at %#x%s", a.Backing(), figures.Size(a.Len()), a.Addr(), fd)
	for _, fb := range a.Fallbacks() {
		d.printf("  fallback: %v", fb)
	}
	if r, err := a.Residency(); err == nil {
		d.printf("  smaps: KernelPageSize %d kB, resident %s, THP %s, hugetlb %s", r.KernelPageSize>>10,
			figures.Size(int(r.Rss)), figures.Size(int(r.AnonHugePages)), figures.Size(int(r.Hugetlb)))
	}
	runs, err := a.PhysRuns()
	switch {
	case err == nil:
		d.printf("  pagemap: %d physically contiguous run(s), first %s at %#x", len(runs), figures.Size(runs[0].Len), runs[0].Phys)
	case errors.Is(err, hugepage.ErrNotResident):
		d.printf("  pagemap: not populated, no physical addresses yet")
	default:
		d.printf("  pagemap: %v", err)
	}
}

func (d *demo) faults() error {
	size := d.touchGB * gib
	d.printf("each case maps %s without prefaulting and writes one byte per 4 KiB page", figures.Size(size))
	type result struct {
		b      hugepage.Backing
		faults int64
		took   time.Duration
	}
	var res []result
	for _, b := range []hugepage.Backing{hugepage.Backing4K, hugepage.BackingTHP, hugepage.BackingHugetlb2M, hugepage.BackingHugetlb1G} {
		if b.Hugetlb() && !d.reserve(b.PageSize(), size/b.PageSize(), fmt.Sprintf("touching %s of %v", figures.Size(size), b)) {
			continue
		}
		a, err := hugepage.NewArena(hugepage.ArenaConfig{Size: size, Backings: []hugepage.Backing{b}})
		if err != nil {
			d.skip("%v: %v", b, err)
			continue
		}
		f, took := pagefault.Touch(a.Bytes())
		a.Close()
		res = append(res, result{b, f, took})
	}
	if len(res) == 0 {
		return nil
	}
	base := res[0]
	for _, r := range res {
		vs := "(the baseline)"
		if r.b != hugepage.Backing4K {
			vs = fmt.Sprintf("(%.0fx fewer than 4 KiB pages)", float64(base.faults)/float64(max(r.faults, 1)))
		}
		d.printf("%-11v %7d minor faults  %7.1f ms  %s", r.b, r.faults, float64(r.took.Microseconds())/1000, vs)
	}
	d.printf("(time includes the kernel zeroing each page on first touch; fewer faults, fewer TLB entries)")
	return nil
}

func (d *demo) pool() error {
	p, err := hugepage.NewPool(hugepage.PoolConfig{Size: 64 * mib, Arena: hugepage.ArenaConfig{Populate: true}})
	if err != nil {
		return err
	}
	defer p.Close()
	a := p.Arenas()[0]
	d.printf("pool of %s on %v", figures.Size(a.Len()), a.Backing())
	for _, fb := range a.Fallbacks() {
		d.printf("  fallback: %v", fb)
	}
	var blocks []hugepage.Block
	for _, req := range []struct{ n, align int }{{100, 64}, {4096, 4096}, {5000, 4096}, {1 * mib, 2 * mib}} {
		b, err := p.AllocAligned(req.n, req.align)
		if err != nil {
			return err
		}
		blocks = append(blocks, b)
		d.printf("  AllocAligned(%7d, %7d) -> offset %#9x, %7d bytes, addr %% align = %d", req.n, req.align, b.Offset(), b.Len(), b.Addr()%uintptr(req.align))
	}
	img, err := p.Alloc2D(3, 1000, 256)
	if err != nil {
		return err
	}
	d.printf("  Alloc2D(3 rows, 1000 B, align 256) -> stride %d, offset %#x", img.Stride, img.Offset())
	st := p.Stats()
	d.printf("  stats: in use %d B, held %d B, fragmentation %.2f, waste %.2f, %d large block(s), classes %v",
		st.InUse, st.Held, st.Fragmentation, st.Waste, st.LargeBlocks, classNames(st.Classes))
	if err := p.Free(blocks[0]); err != nil {
		return err
	}
	err = p.Free(blocks[0])
	d.printf("  freeing a block twice: %v", err)
	return nil
}

func classNames(cs []hugepage.ClassStats) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%dB×%d", c.Size, c.Live))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func rlimitName(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return figures.Size(int(v))
}
