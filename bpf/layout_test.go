package bpf

import "testing"

func TestLayoutMatchesGeneratedTypes(t *testing.T) {
	var s SysStat
	var u UringStat
	var e EngineStat
	tests := []struct {
		name      string
		got, want int
	}{
		{"sys_stat.hist", len(s.Hist), HistSlots},
		{"uring_stat.hist", len(u.Hist), HistSlots},
		{"engine_stat.batch_hist", len(e.BatchHist), HistSlots},
		{"engine_stat.path_batches", len(e.PathBatches), MaxPaths},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: generated length %d, layout.go says %d", tc.name, tc.got, tc.want)
		}
	}
	spec, err := Spec()
	if err != nil {
		t.Fatalf("parse embedded object: %v", err)
	}
	maps := []struct {
		name string
		want uint32
	}{
		{"sys_stats", MaxSyscalls},
		{"sys_minmax", MaxSyscalls},
		{"uring_stats", MaxOps},
		{"copy_stats", CopySlots},
	}
	if got := CopyIndex(SrcURing, DirKernelToKernel, ClassZeroCopy); got != CopySlots-1 {
		t.Errorf("last copy index %d, want CopySlots-1 = %d", got, CopySlots-1)
	}
	for _, m := range maps {
		ms, ok := spec.Maps[m.name]
		if !ok {
			t.Fatalf("map %s missing from the object", m.name)
		}
		if ms.MaxEntries != m.want {
			t.Errorf("map %s: %d entries, layout.go says %d", m.name, ms.MaxEntries, m.want)
		}
	}
}
