package main

import (
	"os"
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/hugepage"
)

// Both sides of every backend set the machine can run make the same
// memory ready: the engine's pool grows by one arena mapped into each of
// its backends (growEngineOnce checks the pool's counters and that the
// file backend registered the arena), and the bare calls succeed, step by
// step, for the same set.
func TestGrowOnce(t *testing.T) {
	const size = 8 << 20
	f, err := os.CreateTemp(t.TempDir(), "grow")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range growSets {
		t.Run(s.name, func(t *testing.T) {
			if growHas(s.name, "uringfile") {
				if why := growMemlock(size); why != "" {
					t.Skip(why)
				}
			}
			if _, _, err := growEngineOnce(s.name, hugepage.Backing4K, size, f); err != nil {
				t.Fatalf("engine: %v", err)
			}
			steps, _, err := growBareOnce(s.name, hugepage.Backing4K, size)
			if err != nil {
				t.Fatalf("bare: %v", err)
			}
			for _, be := range []string{"mmap", "hdmadev", "uringfile", "ucx"} {
				if _, ok := steps[be]; ok != (be == "mmap" || growHas(s.name, be)) {
					t.Errorf("bare steps %v: %s measured %v", steps, be, ok)
				}
			}
		})
	}
}

// A row not measured gives its goal "not measured" with the reason, and a
// measured pair a verdict on the ratio of the medians.
func TestGrowGoals(t *testing.T) {
	es := []entry{
		{Name: "grow", Variant: "thp/memory/engine", BaselineVariant: "thp/memory/bare", Metric: "thread_cpu", Engine: ptr(130), Baseline: ptr(100), Ratio: ptr(1.3)},
		{Name: "grow", Variant: "thp/memory/engine", BaselineVariant: "thp/memory/bare", Metric: "time", Engine: ptr(100), Baseline: ptr(100), Ratio: ptr(1)},
		{Name: "grow", Variant: "thp/hdmadev/engine", BaselineVariant: "thp/hdmadev/bare", Metric: "thread_cpu", Engine: ptr(110), Baseline: ptr(100), Ratio: ptr(1.1)},
		{Name: "grow", Variant: "thp/hdmadev/engine", BaselineVariant: "thp/hdmadev/bare", Metric: "time", Engine: ptr(150), Baseline: ptr(100), Ratio: ptr(1.5)},
		{Name: "grow", Variant: "thp/ucx/engine", BaselineVariant: "thp/ucx/bare", Metric: "thread_cpu", Engine: ptr(110), Note: "1024 MiB; the bare side not measured: why"},
		{Name: "grow", Variant: "hugetlb_2m/memory/engine", BaselineVariant: "hugetlb_2m/memory/bare", Metric: "thread_cpu", Note: "not measured: no pages"},
	}
	want := map[string]struct{ verdict, detail string }{
		"grow.thp.memory.time_vs_bare":        {"missed", "130 vs 100 ms of CPU; wall time 100 vs 100 ms (1×)"},
		"grow.thp.hdmadev.time_vs_bare":       {"met", "110 vs 100 ms of CPU; wall time 150 vs 100 ms (1.5×)"},
		"grow.thp.ucx.time_vs_bare":           {"not measured", "the bare side not measured: why"},
		"grow.hugetlb_2m.memory.time_vs_bare": {"not measured", "no pages"},
	}
	n := 0
	for _, g := range goals(es, map[string]bool{"grow": true}, nil) {
		w, ok := want[g.ID]
		if !ok {
			continue
		}
		n++
		if g.Verdict != w.verdict || !strings.Contains(g.Detail, w.detail) {
			t.Errorf("%s: verdict %q detail %q, want %q with %q", g.ID, g.Verdict, g.Detail, w.verdict, w.detail)
		}
	}
	if n != len(want) {
		t.Errorf("%d of %d goals found", n, len(want))
	}
}
