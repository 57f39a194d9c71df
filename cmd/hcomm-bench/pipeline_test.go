package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/trace"
)

// TestProfileLabelCPU: two goroutines burn the same CPU time, one of them
// labelled: in a real CPU profile the labelled one has about half of the
// samples.
func TestProfileLabelCPU(t *testing.T) {
	var prof bytes.Buffer
	runtime.SetCPUProfileRate(pipeProfileHz)
	if err := pprof.StartCPUProfile(&prof); err != nil {
		t.Skipf("CPU profile unavailable (another one running?): %v", err)
	}
	burn := func(d time.Duration, out chan<- time.Duration) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t0 := threadCPUNow(true)
		x := uint64(1)
		for threadCPUNow(true)-t0 < d.Nanoseconds() {
			for range 1000 {
				x = x*6364136223846793005 + 1
			}
		}
		if x == 0 {
			t.Log("never")
		}
		out <- time.Duration(threadCPUNow(true) - t0)
	}
	lab, plain := make(chan time.Duration, 1), make(chan time.Duration, 1)
	pprof.Do(context.Background(), pprof.Labels(pipeDevLabel[0], pipeDevLabel[1]), func(context.Context) {
		go burn(300*time.Millisecond, lab) // inherits the label
	})
	go burn(300*time.Millisecond, plain)
	burnt := <-lab
	<-plain
	pprof.StopCPUProfile()
	lv, all, err := profileLabelCPU(prof.Bytes(), pipeDevLabel[0], pipeDevLabel[1])
	if err != nil {
		t.Fatal(err)
	}
	// At least one sample per tick (100-1000 Hz) over 0.6 s of CPU; the
	// test's own goroutine takes a few.
	if all <= 0 || float64(lv)/float64(all) < 0.3 || float64(lv)/float64(all) > 0.6 {
		t.Fatalf("labelled %v of %v sampled: want about half (each goroutine burnt %v)", time.Duration(lv), time.Duration(all), burnt)
	}
	t.Logf("labelled %v of %v sampled, each goroutine burnt %v", time.Duration(lv), time.Duration(all), burnt)
}

// TestProfileLabelCPUBad: a broken profile is an error, not a zero.
func TestProfileLabelCPUBad(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("not gzip")} {
		if _, _, err := profileLabelCPU(b, "k", "v"); err == nil {
			t.Errorf("%q: no error", b)
		}
	}
}

// TestPipeOnce moves a small O_DIRECT file into device memory both ways
// and checks what each measures (pipeOnce verifies the bytes itself).
func TestPipeOnce(t *testing.T) {
	o := &options{}
	dir, _, err := benchDir(o)
	if err != nil {
		t.Skipf("no disk file system for O_DIRECT: %v", err)
	}
	tmp, err := os.MkdirTemp(dir, "hcomm-bench-pipeline-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	const size = 32 << 20
	path := filepath.Join(tmp, pipeDataFile)
	if err := layOutPipeFile(path, size); err != nil {
		t.Fatal(err)
	}
	if f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0); err != nil {
		t.Skipf("%s has no O_DIRECT: %v", dir, err)
	} else {
		f.Close()
	}
	for _, v := range pipeVariants[:2] {
		s, desc, err := pipeOnce(path, size, v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		t.Logf("%s: %+v (%s)", v, s, desc)
		// 32 MiB is a few profile samples: either CPU share may be 0.
		if s.gibps <= 0 || s.devCPU < 0 || s.hostCPU < 0 || s.devCPU+s.hostCPU <= 0 || s.rssBeyond <= 0 || s.privBeyond <= 0 || s.privBeyond > s.rssBeyond {
			t.Errorf("%s: a measurement is out of range: %+v", v, s)
		}
		engine := v == pipeVariants[0]
		if engine && (s.poolPeakMB <= 0 || s.poolPeakMB > pipeChunk*pipeDepth>>20) {
			t.Errorf("engine pool peak %.1f MiB, want (0, %d]", s.poolPeakMB, pipeChunk*pipeDepth>>20)
		}
		if !engine && s.poolPeakMB != 0 {
			t.Errorf("traditional has a pool peak %.1f", s.poolPeakMB)
		}
	}
	// A corrupted byte in device memory is caught.
	dm := make([]byte, 2*pipeChunk)
	pipePattern(dm[:pipeChunk], 0)
	pipePattern(dm[pipeChunk:], pipeChunk)
	if err := checkDevmem(dm, int64(len(dm))); err != nil {
		t.Fatal(err)
	}
	dm[pipeChunk+5] ^= 1
	if err := checkDevmem(dm, int64(len(dm))); err == nil {
		t.Fatal("a flipped byte passed the check")
	}
}

func TestPipelineEntriesAndGoals(t *testing.T) {
	s := [2][]pipeSample{
		{{gibps: 0.95, hostCPU: 0.1, devCPU: 0.2, rssBeyond: 30, privBeyond: 16, poolPeakMB: 8}, {gibps: 0.9, hostCPU: 0.12, devCPU: 0.2, rssBeyond: 31, privBeyond: 17, poolPeakMB: 8}},
		{{gibps: 0.3, hostCPU: 1.0, devCPU: 0.3, rssBeyond: 15, privBeyond: 5}, {gibps: 0.35, hostCPU: 1.2, devCPU: 0.3, rssBeyond: 15, privBeyond: 5}},
	}
	es := pipeEntries(s, []float64{1, 1}, []float64{0.05, 0.06}, []float64{0.1, 0.2}, "fio", [2]*float64{ptr(0), ptr(1)}, [2]string{"a", "b"})
	// The device stage alone faster than the disk in one repetition and
	// slower in the other: the slower stage is 1 then 0.95 GiB/s.
	es = append(es, pipeStageEntries(s[0], []pipeSample{{gibps: 3}, {gibps: 0.95}}, []float64{1, 1})...)
	rs := [2][]pipeRemoteSample{{{gibps: 2.0, hostCPU: 0.5}, {gibps: 2.2, hostCPU: 0.52}}, {{gibps: 2.1, hostCPU: 0.5}, {gibps: 2.3, hostCPU: 0.49}}}
	es = append(es, pipeRemoteEntries(rs, "")...)
	want := map[string]string{
		"pipeline.device_to_remote.bw_vs_two_engines":          "met",
		"pipeline.device_to_remote.cpu_per_gib_vs_two_engines": "met",
		"pipeline.file_to_device.bw_vs_fio":                    "met",
		"pipeline.file_to_device.bw_vs_slower_stage":           "met",
		"pipeline.file_to_device.cpu_per_gib_vs_traditional":   "met",
		"pipeline.file_to_device.cpu_copies_per_byte":          "met",
		"pipeline.file_to_device.pool_bytes":                   "met",
		"pipeline.file_to_device.private_beyond_device":        "met",
	}
	for _, g := range goals(es, map[string]bool{"pipeline": true}, nil) {
		if w, ok := want[g.ID]; ok {
			if g.Verdict != w {
				t.Errorf("%s: %s (%v), want %s", g.ID, g.Verdict, g.Detail, w)
			}
			delete(want, g.ID)
		}
	}
	for id := range want {
		t.Errorf("goal %s not judged", id)
	}
	// A copy per byte misses; so does private memory beyond chunk × depth + 16 MiB.
	s[0][0].privBeyond, s[0][1].privBeyond = 25, 26
	es = pipeEntries(s, []float64{1, 1}, nil, nil, "fio", [2]*float64{ptr(0.5), ptr(1)}, [2]string{})
	// The device stage alone at 1.2 GiB/s, the disk at 2: the Copy's
	// 0.925 GiB/s is 0.77× the slower stage.
	es = append(es, pipeStageEntries(s[0], []pipeSample{{gibps: 1.2}, {gibps: 1.2}}, []float64{2, 2})...)
	// Device → peer: 0.8× the bandwidth, 1.2× the CPU.
	rs[0][0], rs[0][1] = pipeRemoteSample{gibps: 1.6, hostCPU: 0.6}, pipeRemoteSample{gibps: 1.8, hostCPU: 0.6}
	es = append(es, pipeRemoteEntries(rs, "")...)
	missed := map[string]bool{"pipeline.file_to_device.cpu_copies_per_byte": true, "pipeline.file_to_device.private_beyond_device": true,
		"pipeline.file_to_device.bw_vs_slower_stage":  true,
		"pipeline.device_to_remote.bw_vs_two_engines": true, "pipeline.device_to_remote.cpu_per_gib_vs_two_engines": true}
	for _, g := range goals(es, map[string]bool{"pipeline": true}, nil) {
		if missed[g.ID] {
			if g.Verdict != "missed" {
				t.Errorf("%s: %s (%v), want missed", g.ID, g.Verdict, g.Detail)
			}
			delete(missed, g.ID)
		}
	}
	for id := range missed {
		t.Errorf("goal %s not judged", id)
	}
}

// TestPipelineCopies counts, with eBPF in traced children, the CPU copies
// of both ways over a 64 MiB file: the engine's Copy none (its only
// copied bytes are the interrupts' 8-byte eventfd counters), the
// traditional way one per byte (the pwrite into the staging buffer).
func TestPipelineCopies(t *testing.T) {
	testutil.RequirePrivileged(t, "eBPF counting of a traced worker")
	if err := trace.CheckPrivileges(); err != nil {
		testutil.RequireFeature(t, "eBPF tracing", err)
	}
	o := &options{quick: true}
	dir, _, err := benchDir(o)
	if err != nil {
		t.Skipf("no disk file system for O_DIRECT: %v", err)
	}
	tmp, err := os.MkdirTemp(dir, "hcomm-bench-pipeline-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := layOutPipeFile(filepath.Join(tmp, pipeDataFile), pipelineSize(o)); err != nil {
		t.Fatal(err)
	}
	o.dir = tmp
	for _, c := range []struct {
		variant  string
		min, max float64
	}{{pipeVariants[0], 0, 1e-3}, {pipeVariants[1], 0.99, 1.01}} {
		w, err := lookup("pipeline", c.variant)
		if err != nil {
			t.Fatal(err)
		}
		got, err := countInChild(o, w, 64)
		if err != nil {
			t.Fatalf("%s: %v", c.variant, err)
		}
		t.Logf("%s: %.3g copies per byte, %.4g CPU-copied and %.4g DMA bytes per chunk, %.3g host syscalls per chunk (%v)", c.variant, got.Copies, got.CopyBytes, got.Direct, got.Host, got.ByName)
		if got.Copies < c.min || got.Copies > c.max {
			t.Errorf("%s: %.4g CPU copies per byte, want [%g, %g]", c.variant, got.Copies, c.min, c.max)
		}
		if got.Direct < pipeChunk {
			t.Errorf("%s: %.4g bytes per chunk moved by DMA, want the chunk (O_DIRECT)", c.variant, got.Direct)
		}
	}
}

// TestRunPipeline runs the whole scenario on a 16 MiB file, copies not
// counted: every entry the goals read is there and measured, and the
// table prints.
func TestRunPipeline(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		testutil.RequireFeature(t, "fio", err)
	}
	pipeSizeOverride = 16 << 20
	t.Cleanup(func() { pipeSizeOverride = 0 })
	o := &options{reps: 2, noTrace: true}
	var out bytes.Buffer
	es, skipped, failed := runPipeline(o, &out, true)
	if failed {
		t.Fatalf("failed: %v", skipped)
	}
	t.Logf("%s", out.String())
	for _, g := range goals(es, map[string]bool{"pipeline": true}, nil) {
		if !strings.HasPrefix(g.ID, "pipeline.") {
			continue
		}
		measured := g.Value != nil
		if g.ID == "pipeline.file_to_device.cpu_copies_per_byte" {
			measured = !measured && strings.Contains(g.Detail, "-no-trace")
		}
		if !measured {
			t.Errorf("%s: %s (%s)", g.ID, g.Verdict, g.Detail)
		}
	}
	if !strings.Contains(out.String(), "file_to_device/fio") {
		t.Errorf("no fio row in the table:\n%s", out.String())
	}
}

func TestReadResident(t *testing.T) {
	debug.FreeOSMemory() // the earlier tests' freed heap would take the 64 MiB below without growing RSS
	r, err := readResident()
	if err != nil {
		t.Fatal(err)
	}
	if r.private <= 0 || r.total < r.private {
		t.Fatalf("resident %+v: want 0 < private ≤ total", r)
	}
	// 64 MiB of touched anonymous memory shows in both.
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	r2, err := readResident()
	if err != nil {
		t.Fatal(err)
	}
	if d := r2.private - r.private; d < 60<<20 {
		t.Errorf("private grew %d bytes after touching 64 MiB", d)
	}
	runtime.KeepAlive(b)
}

func TestFioPipeArgs(t *testing.T) {
	args, note := fioPipeArgs("/x/f", 1<<30)
	j := strings.Join(args, " ")
	for _, w := range []string{"--filename=/x/f", "--rw=read", "--direct=1", "--bs=1048576", "--iodepth=8", "--size=1073741824"} {
		if !strings.Contains(j, w) {
			t.Errorf("fio args %q lack %s", j, w)
		}
	}
	if huge := strings.Contains(j, "--iomem=mmaphuge"); huge != strings.Contains(note, "hugetlb pages, as") {
		t.Errorf("args %q and note %q disagree on hugepages", j, note)
	}
}

// TestPipeRemoteOnce moves device memory to a peer process over UCX shared
// memory both ways (one engine; two engines chained by hand) and checks
// what each measures (pipeRemoteOnce reads the peer's pool back and
// compares it itself).
func TestPipeRemoteOnce(t *testing.T) {
	t.Setenv("UCX_TLS", pipeRemoteTLS)
	peer, err := startRemotePeer("passive", pipeRemoteTLS, true)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.stop()
	for _, v := range pipeRemoteVariants {
		s, desc, err := pipeRemoteOnce(v, peer.ucxAddr, 2*pipeRemoteWindow)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		t.Logf("%s: %+v (%s)", v, s, desc)
		if s.gibps <= 0 || s.devCPU < 0 || s.hostCPU < 0 || s.devCPU+s.hostCPU <= 0 {
			t.Errorf("%s: a measurement is out of range: %+v", v, s)
		}
	}
	// A differing byte is caught.
	b := make([]byte, 2*pipeChunk)
	pipePattern(b, 0)
	if err := checkPattern(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := checkPattern(b[pipeChunk:], pipeChunk); err != nil {
		t.Fatal(err)
	}
	b[pipeChunk+7] ^= 1
	if err := checkPattern(b, 0); err == nil {
		t.Fatal("a flipped byte passed the check")
	}
}

func TestPipeBesideEntries(t *testing.T) {
	s := []pipeSample{{gibps: 3}, {gibps: 3.5}}
	fio := []float64{8, 10}
	for _, tc := range []struct {
		name   string
		beside []besideSample
		detail string // in bw_vs_fio's detail ("" = no beside clause)
	}{
		{"none", nil, ""},
		{"slower beside the device", []besideSample{{fio: 6, device: 11}, {fio: 7, device: 10}}, "beside it: 0.722× [0.7–0.75] its read alone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := pipeEntries([2][]pipeSample{s, s}, fio, nil, nil, "fio", [2]*float64{ptr(0), ptr(1)}, [2]string{})
			es = append(es, pipeBesideEntries(s, tc.beside, fio)...)
			if n := len(pipeBesideEntries(s, tc.beside, fio)); (n == 0) != (tc.beside == nil) {
				t.Fatalf("%d entries for %d repetitions", n, len(tc.beside))
			}
			var found bool
			for _, g := range goals(es, map[string]bool{"pipeline": true}, nil) {
				if g.ID != "pipeline.file_to_device.bw_vs_fio" {
					continue
				}
				found = true
				has := strings.Contains(g.Detail, "beside it")
				if tc.detail == "" && has || tc.detail != "" && !strings.Contains(g.Detail, tc.detail) {
					t.Errorf("detail %q, want %q", g.Detail, tc.detail)
				}
			}
			if !found {
				t.Fatal("bw_vs_fio not judged")
			}
			if tc.beside == nil {
				return
			}
			e := entries(es).find(ref{"pipeline", pipeVariants[0], pipeFioBeside, "bandwidth"})
			if e == nil || e.Ratio == nil || *e.Ratio < 0.49 || *e.Ratio > 0.51 {
				t.Errorf("the copy against fio beside the device: %+v, want 0.5×", e)
			}
		})
	}
}
