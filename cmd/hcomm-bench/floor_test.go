package main

import (
	"os"
	"strings"
	"testing"
)

// The floor loop does exactly the I/Os asked, reads and writes, over
// several runs on one ring, and closes on its own goroutine.
func TestFloorUring(t *testing.T) {
	// The data file goes in a directory of the test's own on a file
	// system with a real O_DIRECT, removed after it.
	o := &options{quick: true, dir: t.TempDir()}
	if _, _, err := benchDir(o); err != nil {
		d, err := os.MkdirTemp("/var/tmp", "hcomm-bench-floor-test-")
		if err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if o.dir = d; func() error { _, _, err := benchDir(o); return err }() != nil {
			t.Skip("no directory on ext4/xfs/btrfs for an O_DIRECT file")
		}
	}
	for _, write := range []bool{false, true} {
		r, err := setupFloorUring(o, write, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 7, fileQD, 3 * fileQD, 1000} {
			if err := r.run(n); err != nil {
				t.Fatalf("write %v, %d I/Os: %v", write, n, err)
			}
		}
		if err := r.close(); err != nil {
			t.Fatal(err)
		}
	}
}

// The stable CPU goal's detail puts the floor beside the engine: its CPU
// per I/O, its ratio to fio's, and the engine's ratio to it.
func TestFloorGoalDetail(t *testing.T) {
	p := stablePrefix + "randread/"
	es := []entry{
		{Name: "file-4k", Variant: p + "engine", BaselineVariant: p + "fio-io_uring", Metric: "cpu", Engine: ptr(1800), Baseline: ptr(3000), Ratio: ptr(0.6)},
		{Name: "file-4k", Variant: p + "engine", BaselineVariant: p + "fio-io_uring", Metric: "iops", Engine: ptr(2), Baseline: ptr(1), Ratio: ptr(2)},
		{Name: "file-4k", Variant: p + "engine", BaselineVariant: p + "floor-uring", Metric: "cpu", Engine: ptr(1800), Baseline: ptr(1500), Ratio: ptr(1.2)},
	}
	for _, g := range goals(es, map[string]bool{"file-4k": true}, nil) {
		if g.ID != "file.stable_randread.cpu_per_io_vs_fio.poll" {
			continue
		}
		if want := "the floor (a bare io_uring loop) 1.5 µs per I/O, 0.5× fio; the engine 1.2× the floor"; !strings.Contains(g.Detail, want) || g.Verdict != "missed" {
			t.Errorf("verdict %q detail %q, want missed with %q", g.Verdict, g.Detail, want)
		}
		return
	}
	t.Error("no stable randread CPU goal")
}
