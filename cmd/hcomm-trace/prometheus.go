package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hcomm-go/hcomm/trace"
)

// Latency histogram buckets: the programs' log2 slots from 2^histLow ns
// (256 ns; faster calls fall in the first bucket) to 2^histHigh ns (~17 s).
const (
	histLow  = 8
	histHigh = 34
)

// collector serves a tracer's counters as Prometheus metrics. Every scrape
// reads the BPF maps afresh (snap), so values are as current as the scrape.
type collector struct {
	snap func() (*trace.Snapshot, error)

	syscalls, syscallErrors, syscallSeconds *prometheus.Desc
	syscallLatency, uringLatency            *prometheus.Desc
	copyBytes                               *prometheus.Desc
	uringSubmitted, uringCompleted          *prometheus.Desc
	uringErrors, uringBytes                 *prometheus.Desc
	faults                                  *prometheus.Desc
	engineBatches, engineTransfers          *prometheus.Desc
	engineBytes, engineReaped, engineErrors *prometheus.Desc
	buildInfo                               *prometheus.Desc
	scrapeErrors                            prometheus.Counter
}

// newCollector returns a collector over snap (usually Tracer.Snapshot).
// labels are constant labels added to every metric (comm, and pid when
// asked for).
func newCollector(snap func() (*trace.Snapshot, error), labels prometheus.Labels) *collector {
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc("hcomm_trace_"+name, help, vars, labels)
	}
	return &collector{
		snap:            snap,
		syscalls:        d("syscalls_total", "System calls completed by the traced processes.", "syscall"),
		syscallErrors:   d("syscall_errors_total", "System calls that returned an error.", "syscall"),
		syscallSeconds:  d("syscall_seconds_total", "Time spent inside system calls.", "syscall"),
		syscallLatency:  d("syscall_duration_seconds", "Duration of system calls (log2 buckets; exit and exit_group are not timed).", "syscall"),
		uringLatency:    d("io_uring_latency_seconds", "io_uring submit-to-complete latency (log2 buckets).", "op"),
		copyBytes:       d("copy_bytes_total", "Bytes moved by source, direction and class (copy: a CPU copied them; direct: O_DIRECT DMA; zerocopy; kernel_to_kernel: copy_file_range, sendfile, splice).", "source", "direction", "class"),
		uringSubmitted:  d("io_uring_submitted_total", "io_uring requests submitted.", "op"),
		uringCompleted:  d("io_uring_completed_total", "io_uring completions posted.", "op"),
		uringErrors:     d("io_uring_errors_total", "io_uring completions with a negative result.", "op"),
		uringBytes:      d("io_uring_bytes_total", "Bytes moved by io_uring requests (from results).", "op"),
		faults:          d("page_faults_total", "User page faults by access (read, write, instruction fetch).", "access"),
		engineBatches:   d("engine_batches_total", "Engine batches submitted (hookSubmitBatch)."),
		engineTransfers: d("engine_transfers_total", "Engine transfers submitted."),
		engineBytes:     d("engine_bytes_total", "Engine bytes submitted."),
		engineReaped:    d("engine_completions_total", "Engine transfers reaped (hookReapBatch)."),
		engineErrors:    d("engine_errors_total", "Engine transfers reaped with an error."),
		buildInfo:       prometheus.NewDesc("hcomm_trace_build_info", "hcomm-trace's build: module version, VCS revision, Go version (value 1).", []string{"version", "revision", "goversion"}, nil),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcomm_trace_scrape_errors_total", Help: "Failed reads of the BPF maps.", ConstLabels: labels,
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.syscalls, c.syscallErrors, c.syscallSeconds, c.syscallLatency, c.uringLatency,
		c.copyBytes, c.uringSubmitted, c.uringCompleted, c.uringErrors, c.uringBytes, c.faults,
		c.engineBatches, c.engineTransfers, c.engineBytes, c.engineReaped, c.engineErrors, c.buildInfo} {
		ch <- d
	}
	c.scrapeErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	defer c.scrapeErrors.Collect(ch)
	b := readBuildInfo()
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, b.version, b.revision, b.goVersion)
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
		if h, n := histogram(st.Hist[:]); n > 0 {
			ch <- prometheus.MustNewConstHistogram(c.syscallLatency, n, float64(st.TotalNs)/1e9, h, name)
		}
	}
	for _, src := range trace.Sources {
		for _, dir := range trace.Directions {
			for _, class := range trace.Classes {
				if dir == trace.KernelToKernel && class != trace.ClassCopy {
					continue // in-kernel moves have one class
				}
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
		if h, n := histogram(u.Hist[:]); n > 0 {
			ch <- prometheus.MustNewConstHistogram(c.uringLatency, n, histSum(u.Hist[:]), h, name)
		}
	}
	f := s.Faults
	counter(c.faults, float64(f.Total-min(f.Total, f.Write+f.Instr)), "read")
	counter(c.faults, float64(f.Write), "write")
	counter(c.faults, float64(f.Instr), "instruction")
	counter(c.engineBatches, float64(s.Engine.SubmitBatches))
	counter(c.engineTransfers, float64(s.Engine.SubmitTransfers))
	counter(c.engineBytes, float64(s.Engine.SubmitBytes))
	counter(c.engineReaped, float64(s.Engine.ReapCompletions))
	counter(c.engineErrors, float64(s.Engine.ReapErrors))
}

// histogram turns log2 slots (slot i: values in [2^(i-1), 2^i) ns) into
// cumulative Prometheus buckets with upper bounds 2^i ns, i in
// [histLow, histHigh], in seconds, and the sample count.
func histogram(slots []uint64) (map[float64]uint64, uint64) {
	buckets := make(map[float64]uint64, histHigh-histLow+1)
	var cum, n uint64
	for i, c := range slots {
		n += c
		if i <= histHigh {
			cum += c
		}
		if i >= histLow && i <= histHigh {
			buckets[math.Ldexp(1, i)/1e9] = cum
		}
	}
	return buckets, n
}

// histSum estimates the sum of the samples of log2 slots from the buckets'
// mid-points (io_uring has no exact total).
func histSum(slots []uint64) float64 {
	var sum float64
	for i, c := range slots {
		if i == 0 {
			continue
		}
		sum += float64(c) * 1.5 * math.Ldexp(1, i-1)
	}
	return sum / 1e9
}

// metricsServer is the --prometheus endpoint. It listens before the
// command starts, serves once the session exists, and after the trace
// serves the final counters (freeze) for --linger.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server

	mu     sync.Mutex
	sess   *trace.Session
	frozen *trace.Snapshot
}

func listenMetrics(addr string) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &metricsServer{ln: ln}, nil
}

// snapshot is what a scrape sees: the live counters, or the final ones.
func (m *metricsServer) snapshot() (*trace.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frozen != nil {
		return m.frozen, nil
	}
	return m.sess.Snapshot()
}

// serve starts answering: /metrics, and a landing page at /.
func (m *metricsServer) serve(sess *trace.Session, pidLabel bool, stderr io.Writer) {
	m.sess = sess
	meta := sess.Meta(nil)
	labels := prometheus.Labels{"comm": meta.Process.Comm}
	if pidLabel {
		labels["pid"] = strconv.Itoa(meta.Process.PID)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(m.snapshot, labels))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>hcomm-trace</title><h1>hcomm-trace</h1>"+
			"<p>Tracing %s (PID %d, %s). <a href=\"/metrics\">Metrics</a>.</p><p>%s</p>\n",
			html.EscapeString(meta.Process.Comm), meta.Process.PID, html.EscapeString(meta.Mode), html.EscapeString(versionString()))
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go m.srv.Serve(m.ln)
	fmt.Fprintf(stderr, "hcomm-trace: serving metrics on http://%s/metrics\n", m.ln.Addr())
}

// freeze makes later scrapes see s, the final counters (the session's maps
// are about to close).
func (m *metricsServer) freeze(s *trace.Snapshot) {
	m.mu.Lock()
	m.frozen = s
	m.mu.Unlock()
}

// linger keeps serving the final counters for d.
func (m *metricsServer) linger(d time.Duration, stderr io.Writer) {
	fmt.Fprintf(stderr, "hcomm-trace: serving the final metrics on http://%s/metrics for %s\n", m.ln.Addr(), d)
	time.Sleep(d)
}

// Close stops serving (and listening).
func (m *metricsServer) Close() error {
	if m.srv != nil {
		return m.srv.Close()
	}
	return m.ln.Close()
}
