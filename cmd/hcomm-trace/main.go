// Command hcomm-trace shows, for one process, what the kernel saw it do:
// system calls (count, errors, time), bytes copied between user and kernel
// space versus moved by DMA, io_uring requests per opcode, page faults and
// hcomm engine batches. It uses eBPF (package trace) and needs root, or
// CAP_BPF and CAP_PERFMON.
//
//	hcomm-trace run [flags] -- CMD ARGS...   start CMD in a fresh cgroup, trace it and its children
//	hcomm-trace attach -p PID [-d DURATION] [flags]
//
// See docs/tracing.md for the output and the JSON schema.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hcomm-go/hcomm/trace"
)

const usage = `usage:
  hcomm-trace run [flags] -- CMD ARGS...
  hcomm-trace attach -p PID [-d DURATION] [flags]

run starts CMD in a fresh cgroup (CMD and its children are traced from their
first instruction), prints the report when CMD exits and exits with CMD's
status. attach traces the running process PID (not its children) until it
exits, DURATION passes or SIGINT.

flags:
`

type options struct {
	output     string
	outFile    string
	interval   time.Duration
	top        int
	hist       bool
	prometheus string
	engineBins stringList
	hookSubmit string
	hookReap   string
	verbose    bool
	pid        int
	duration   time.Duration
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func newFlags(mode string, o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hcomm-trace "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.output, "o", "table", "output format: table or json")
	fs.StringVar(&o.outFile, "out", "", "write the report to this file instead of standard output")
	fs.DurationVar(&o.interval, "i", 0, "print deltas every INTERVAL while tracing (json: compact lines on standard error)")
	fs.IntVar(&o.top, "top", 20, "syscalls shown in the table (0: all)")
	fs.BoolVar(&o.hist, "hist", true, "print log2 latency histograms in the table")
	fs.StringVar(&o.prometheus, "prometheus", "", "serve the counters as Prometheus metrics on ADDR (e.g. :9464) while tracing")
	fs.Var(&o.engineBins, "engine-binary", "another executable to probe for the engine hooks (repeatable)")
	fs.StringVar(&o.hookSubmit, "hook-submit", trace.HookSubmitBatch, "symbol of the engine's submit-batch hook")
	fs.StringVar(&o.hookReap, "hook-reap", trace.HookReapBatch, "symbol of the engine's reap-batch hook")
	fs.BoolVar(&o.verbose, "v", false, "log engine batch and exec events to standard error")
	if mode == "attach" {
		fs.IntVar(&o.pid, "p", 0, "PID of the process to trace")
		fs.DurationVar(&o.duration, "d", 0, "stop after DURATION (0: until the process exits or SIGINT)")
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// run is main without os.Exit, for tests: it parses the arguments, starts
// or attaches the trace, waits for its end and writes the report.
func run(args []string, stdout, stderr io.Writer) int {
	mode, o, argv, code := parseArgs(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	c := &cli{mode: mode, o: o, stderr: stderr, out: stdout}
	if o.outFile != "" {
		f, err := os.Create(o.outFile)
		if err != nil {
			return c.fail(err)
		}
		defer f.Close()
		c.out = f
	}
	if err := c.start(argv); err != nil {
		return c.fail(err)
	}
	defer c.sess.Close()
	if o.prometheus != "" {
		srv, err := servePrometheus(o.prometheus, c.sess, stderr)
		if err != nil {
			return c.fail(fmt.Errorf("--prometheus %s: %w", o.prometheus, err))
		}
		defer srv.Close()
	}
	code, werr := c.wait()
	return c.finish(code, werr)
}

// cli is one invocation's state.
type cli struct {
	mode   string
	o      options
	out    io.Writer // the report
	stderr io.Writer
	log    *slog.Logger
	sess   *trace.Session
}

func (c *cli) fail(err error) int {
	fmt.Fprintf(c.stderr, "hcomm-trace: %v\n", err)
	return 1
}

// parseArgs returns the subcommand, its options and the command to run; a
// non-negative code means: exit with it now (usage printed).
func parseArgs(args []string, stdout, stderr io.Writer) (mode string, o options, argv []string, code int) {
	if len(args) == 0 || (args[0] != "run" && args[0] != "attach") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, usage)
			return "", o, nil, 0
		}
		fmt.Fprint(stderr, usage)
		return "", o, nil, 2
	}
	mode = args[0]
	fs := newFlags(mode, &o, stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return "", o, nil, 2
	}
	if o.output != "table" && o.output != "json" {
		fmt.Fprintf(stderr, "hcomm-trace: -o %q: want table or json\n", o.output)
		return "", o, nil, 2
	}
	switch mode {
	case "run":
		if fs.NArg() == 0 {
			fmt.Fprintln(stderr, "hcomm-trace run: no command (usage: hcomm-trace run [flags] -- CMD ARGS...)")
			return "", o, nil, 2
		}
	case "attach":
		if o.pid <= 0 || fs.NArg() > 0 {
			fmt.Fprintln(stderr, "hcomm-trace attach: need -p PID and no other arguments")
			return "", o, nil, 2
		}
	}
	return mode, o, fs.Args(), -1
}

// start starts the command (run) or attaches to the process (attach).
func (c *cli) start(argv []string) error {
	level := slog.LevelWarn
	if c.o.verbose {
		level = slog.LevelDebug
	}
	c.log = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	topts := trace.Options{
		Hooks:       trace.Hooks{SubmitBatch: c.o.hookSubmit, ReapBatch: c.o.hookReap},
		Executables: c.o.engineBins,
		Logger:      c.log,
	}
	if c.o.verbose {
		topts.OnEvent = func(e trace.Event) { logEvent(c.log, e) }
	}
	var err error
	if c.mode == "run" {
		c.sess, err = trace.StartCommand(argv, trace.CommandIO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, topts)
	} else {
		c.sess, err = trace.Attach(c.o.pid, topts)
	}
	if err != nil {
		return err
	}
	if st := c.sess.Engine(); !st.Present {
		c.log.Debug("engine section absent", "reason", st.Reason)
	}
	return nil
}

// wait prints live deltas until the traced process ends (or, for attach,
// the duration passes or a signal arrives); signals are forwarded to a
// started command, whose exit ends the trace.
func (c *cli) wait() (int, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if c.o.duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.o.duration)
		defer cancel()
	}
	stopLive := make(chan struct{})
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		live(c.sess, c.o, c.out, c.stderr, stopLive)
	}()
	defer func() { close(stopLive); <-liveDone }()

	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := c.sess.Wait(ctx)
		done <- result{code, err}
	}()
	for {
		select {
		case r := <-done:
			return r.code, r.err
		case sig := <-sigs:
			if c.mode == "run" {
				c.sess.Signal(sig)
			} else {
				cancel()
			}
		}
	}
}

// finish reads the final counters, closes the session (so the exec list is
// complete), writes the report and returns the exit status: the command's
// for run, 0 for an attach that ended normally.
func (c *cli) finish(code int, werr error) int {
	snap, serr := c.sess.Snapshot()
	var exit *int
	status := 0
	switch c.mode {
	case "run":
		if werr != nil {
			fmt.Fprintf(c.stderr, "hcomm-trace: wait for command: %v\n", werr)
			status = 1
		} else {
			exit, status = &code, code
		}
	case "attach":
		ended := errors.Is(werr, trace.ErrProcessGone) || errors.Is(werr, context.Canceled) || errors.Is(werr, context.DeadlineExceeded)
		if werr != nil && !ended {
			fmt.Fprintf(c.stderr, "hcomm-trace: %v\n", werr)
			status = 1
		}
		if errors.Is(werr, trace.ErrProcessGone) {
			fmt.Fprintf(c.stderr, "hcomm-trace: process %d exited\n", c.o.pid)
		}
	}
	c.sess.Close()
	if serr != nil {
		return c.fail(fmt.Errorf("read counters: %w", serr))
	}
	rep := trace.NewReport(snap, c.sess.Meta(exit))
	if err := writeReport(c.out, rep, c.o, true); err != nil {
		return c.fail(fmt.Errorf("write report: %w", err))
	}
	return status
}

func writeReport(w io.Writer, r *trace.Report, o options, final bool) error {
	if o.output == "json" {
		return trace.WriteJSON(w, r)
	}
	return trace.WriteTable(w, r, trace.TableOptions{Top: o.top, Histograms: o.hist && final, Header: true})
}

// live prints the change since the previous interval until stop closes.
func live(sess *trace.Session, o options, out, stderr io.Writer, stop chan struct{}) {
	if o.interval <= 0 {
		return
	}
	t := time.NewTicker(o.interval)
	defer t.Stop()
	prev, err := sess.Snapshot()
	if err != nil {
		return
	}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		cur, err := sess.Snapshot()
		if err != nil {
			fmt.Fprintf(stderr, "hcomm-trace: read counters: %v\n", err)
			continue
		}
		m := sess.Meta(nil)
		m.Duration = cur.Taken.Sub(prev.Taken)
		m.Execs = nil
		r := trace.NewReport(cur.Sub(prev), m)
		prev = cur
		if o.output == "json" {
			// Standard output carries exactly one object, the final one.
			r.Mode += "-interval"
			fmt.Fprintln(stderr, compactJSON(r))
			continue
		}
		fmt.Fprintf(out, "--- %s: last %s ---\n", time.Now().Format("15:04:05"), o.interval)
		top := o.top
		if top == 0 || top > 10 {
			top = 10
		}
		trace.WriteTable(out, r, trace.TableOptions{Top: top})
	}
}

func compactJSON(r *trace.Report) string {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Sprintf(`{"error":%q}`, err.Error())
	}
	return string(b)
}

func servePrometheus(addr string, sess *trace.Session, stderr io.Writer) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	m := sess.Meta(nil)
	reg.MustRegister(newCollector(sess.Snapshot, prometheus.Labels{"pid": strconv.Itoa(m.Process.PID), "comm": m.Process.Comm}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(stderr, "hcomm-trace: serving metrics on http://%s/metrics\n", ln.Addr())
	return srv, nil
}

func logEvent(log *slog.Logger, e trace.Event) {
	switch e.Type {
	case trace.EventEngineSubmit:
		log.Info("engine submit", "tid", e.PID, "transfers", e.Count, "bytes", e.Bytes, "path", trace.EnginePathName(int(e.Aux)))
	case trace.EventEngineReap:
		log.Info("engine reap", "tid", e.PID, "completions", e.Count, "bytes", e.Bytes, "errors", e.Aux)
	case trace.EventExec:
		log.Info("exec", "pid", e.PID, "comm", e.Comm, "file", e.File)
	}
}
