package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcomm-go/hcomm/trace"
)

// collector serves a tracer's counters as Prometheus metrics. Every scrape
// reads the BPF maps afresh (Snapshot), so values are as current as the scrape.
type collector struct {
	snap func() (*trace.Snapshot, error)

	syscalls, syscallErrors, syscallSeconds *prometheus.Desc
	copyBytes                               *prometheus.Desc
	uringSubmitted, uringCompleted          *prometheus.Desc
	uringErrors, uringBytes                 *prometheus.Desc
	faults                                  *prometheus.Desc
	engineBatches, engineTransfers          *prometheus.Desc
	engineBytes, engineReaped, engineErrors *prometheus.Desc
	scrapeErrors                            prometheus.Counter
}

// newCollector returns a collector over snap (usually Tracer.Snapshot).
// labels are constant labels added to every metric (e.g. pid, comm).
func newCollector(snap func() (*trace.Snapshot, error), labels prometheus.Labels) *collector {
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc("hcomm_trace_"+name, help, vars, labels)
	}
	return &collector{
		snap:            snap,
		syscalls:        d("syscalls_total", "System calls completed by the traced process.", "syscall"),
		syscallErrors:   d("syscall_errors_total", "System calls that returned an error.", "syscall"),
		syscallSeconds:  d("syscall_seconds_total", "Time spent inside system calls.", "syscall"),
		copyBytes:       d("copy_bytes_total", "Bytes moved between user and kernel space by source, direction and class (copy: a CPU copied them; direct: O_DIRECT DMA; zerocopy).", "source", "direction", "class"),
		uringSubmitted:  d("io_uring_submitted_total", "io_uring requests submitted.", "op"),
		uringCompleted:  d("io_uring_completed_total", "io_uring completions posted.", "op"),
		uringErrors:     d("io_uring_errors_total", "io_uring completions with a negative result.", "op"),
		uringBytes:      d("io_uring_bytes_total", "Bytes moved by io_uring requests (from results).", "op"),
		faults:          d("page_faults_total", "User page faults."),
		engineBatches:   d("engine_batches_total", "Engine batches submitted (hookSubmitBatch)."),
		engineTransfers: d("engine_transfers_total", "Engine transfers submitted."),
		engineBytes:     d("engine_bytes_total", "Engine bytes submitted."),
		engineReaped:    d("engine_completions_total", "Engine transfers reaped (hookReapBatch)."),
		engineErrors:    d("engine_errors_total", "Engine transfers reaped with an error."),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcomm_trace_scrape_errors_total", Help: "Failed reads of the BPF maps.", ConstLabels: labels,
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.syscalls, c.syscallErrors, c.syscallSeconds, c.copyBytes,
		c.uringSubmitted, c.uringCompleted, c.uringErrors, c.uringBytes, c.faults,
		c.engineBatches, c.engineTransfers, c.engineBytes, c.engineReaped, c.engineErrors} {
		ch <- d
	}
	c.scrapeErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	defer c.scrapeErrors.Collect(ch)
	s, err := c.snap()
	if err != nil {
		c.scrapeErrors.Inc()
		return
	}
	counter := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
	}
	for nr := range s.Syscalls {
		st := &s.Syscalls[nr]
		if st.Count == 0 {
			continue
		}
		name := trace.SyscallName(nr)
		counter(c.syscalls, float64(st.Count), name)
		counter(c.syscallErrors, float64(st.Errors), name)
		counter(c.syscallSeconds, float64(st.TotalNs)/1e9, name)
	}
	for _, src := range trace.Sources {
		for _, dir := range trace.Directions {
			for _, class := range trace.Classes {
				counter(c.copyBytes, float64(s.Bytes(src, dir, class)), src.String(), dir.String(), class.String())
			}
		}
	}
	for op := range s.URing {
		u := &s.URing[op]
		if u.Submitted == 0 && u.Completed == 0 {
			continue
		}
		name := trace.URingOpName(op)
		counter(c.uringSubmitted, float64(u.Submitted), name)
		counter(c.uringCompleted, float64(u.Completed), name)
		counter(c.uringErrors, float64(u.Errors), name)
		counter(c.uringBytes, float64(u.Bytes), name)
	}
	counter(c.faults, float64(s.Faults.Total))
	counter(c.engineBatches, float64(s.Engine.SubmitBatches))
	counter(c.engineTransfers, float64(s.Engine.SubmitTransfers))
	counter(c.engineBytes, float64(s.Engine.SubmitBytes))
	counter(c.engineReaped, float64(s.Engine.ReapCompletions))
	counter(c.engineErrors, float64(s.Engine.ReapErrors))
}
