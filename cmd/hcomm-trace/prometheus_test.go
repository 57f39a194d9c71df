package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hcomm-go/hcomm/trace"
)

// gather collects c's metrics by name.
func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value returns the value of the series of mf whose labels include want.
func value(mf *dto.MetricFamily, want map[string]string) (float64, bool) {
	for _, m := range mf.GetMetric() {
		match := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match == len(want) {
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func TestCollectorFromSnapshot(t *testing.T) {
	var s trace.Snapshot
	w := trace.SyscallNumber("write") // this architecture's number
	s.Syscalls[w].Count, s.Syscalls[w].Errors, s.Syscalls[w].TotalNs = 77, 2, 3e9
	s.URing[5].Submitted, s.URing[5].Completed, s.URing[5].Bytes = 4, 4, 400
	s.Faults.Total = 9
	c := newCollector(func() (*trace.Snapshot, error) { return &s, nil }, nil)
	mfs := gather(t, c)
	tests := []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"hcomm_trace_syscalls_total", map[string]string{"syscall": "write"}, 77},
		{"hcomm_trace_syscall_errors_total", map[string]string{"syscall": "write"}, 2},
		{"hcomm_trace_syscall_seconds_total", map[string]string{"syscall": "write"}, 3},
		{"hcomm_trace_io_uring_bytes_total", map[string]string{"op": "WRITE_FIXED"}, 400},
		{"hcomm_trace_copy_bytes_total", map[string]string{"source": "io_uring", "direction": "kernel_to_user", "class": "zerocopy"}, 0},
	}
	for _, tc := range tests {
		mf, ok := mfs[tc.metric]
		if !ok {
			t.Errorf("%s missing", tc.metric)
			continue
		}
		if v, ok := value(mf, tc.labels); !ok || v != tc.want {
			t.Errorf("%s%v = %v (found %v), want %v", tc.metric, tc.labels, v, ok, tc.want)
		}
	}
}
