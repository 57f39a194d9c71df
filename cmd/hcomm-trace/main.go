// Command hcomm-trace shows, for one process, what the kernel saw it do:
// system calls (count, errors, time, min/avg/max latency), bytes copied
// between user and kernel space versus moved by DMA or inside the kernel,
// io_uring requests per opcode, page faults and hcomm engine batches. It
// uses eBPF (package trace) and needs root, or CAP_BPF and CAP_PERFMON.
//
//	hcomm-trace run [flags] -- CMD ARGS...   start CMD in a fresh cgroup, trace it and its children
//	hcomm-trace attach -p PID [-d DURATION] [flags]
//	hcomm-trace version
//
// See docs/tracing.md for the flags, the output, the JSON schema and the
// Prometheus metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/trace"
	"github.com/hcomm-go/hcomm/trace/report"
)

const usage = `usage:
  hcomm-trace run [flags] -- CMD ARGS...
  hcomm-trace attach -p PID [-d DURATION] [flags]
  hcomm-trace version        (or --version)
  hcomm-trace help           (or -h: this text)

run starts CMD in a fresh cgroup and counts CMD and its children from CMD's
own execve on, prints the report to standard error when CMD exits (like
strace; -out FILE or -out - for standard output) and exits with CMD's status
(127 when CMD is not found, 126 when it cannot be executed).

attach traces the running process PID (all its threads, not its children)
until it exits, DURATION passes or SIGINT, and prints the report to standard
output.
`

type options struct {
	output     string
	outFile    string
	interval   time.Duration
	top        int
	hist       bool
	syscalls   listFlag
	failed     bool
	errno      string
	perProcess bool
	perThread  bool
	by         string
	prometheus string
	promPID    bool
	linger     time.Duration
	engineBins listFlag
	hookSubmit string
	hookReap   string
	verbose    bool
	pid        int
	duration   time.Duration
}

// listFlag is a repeatable flag whose values may also be comma lists.
type listFlag []string

func (s *listFlag) String() string { return strings.Join(*s, ",") }
func (s *listFlag) Set(v string) error {
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			*s = append(*s, x)
		}
	}
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func newFlags(mode string, o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hcomm-trace "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.output, "o", "table", "report format: table or json")
	outDefault := "standard output"
	if mode == "run" {
		outDefault = "standard error, as strace"
	}
	fs.StringVar(&o.outFile, "out", "", "write the report to FILE (- for standard output; default: "+outDefault+")")
	fs.DurationVar(&o.interval, "i", 0, "print a compact line of what changed every INTERVAL while tracing (json: one object per line)")
	fs.IntVar(&o.top, "top", 20, "syscalls shown in the table, per process with -P/-T (0: all)")
	fs.BoolVar(&o.hist, "hist", true, "print log2 latency histograms in the table")
	fs.Var(&o.syscalls, "e", "count only these syscalls in the syscall table (comma list or repeated; also --syscall)")
	fs.Var(&o.syscalls, "syscall", "same as -e")
	fs.BoolVar(&o.failed, "x", false, "count only failed calls in the syscall table (also --failed)")
	fs.BoolVar(&o.failed, "failed", false, "same as -x")
	fs.StringVar(&o.errno, "errno", "", "count only calls that failed with this errno (a name such as ENOENT, or a number)")
	fs.BoolVar(&o.perProcess, "P", false, "break the syscall table down per process (--by process)")
	fs.BoolVar(&o.perThread, "T", false, "break the syscall table down per thread (--by thread)")
	fs.StringVar(&o.by, "by", "", "break the syscall table down: process or thread")
	fs.StringVar(&o.prometheus, "prometheus", "", "serve the counters as Prometheus metrics on ADDR (e.g. :9464; /metrics) while tracing; checked before CMD starts")
	fs.BoolVar(&o.promPID, "prometheus-pid", false, "add a pid label to every metric (off: a new series every run)")
	fs.DurationVar(&o.linger, "linger", 0, "keep serving the final metrics for DURATION after the trace ends (with --prometheus)")
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
		fmt.Fprintf(stderr, "\n%s flags:\n", mode)
		fs.PrintDefaults()
	}
	return fs
}

// writeHelp prints the usage and the flags of every subcommand.
func writeHelp(w io.Writer) {
	fmt.Fprint(w, usage)
	for _, mode := range []string{"run", "attach"} {
		var o options
		fs := newFlags(mode, &o, w)
		fmt.Fprintf(w, "\n%s flags:\n", mode)
		fs.PrintDefaults()
	}
}

// run is main without os.Exit, for tests: it parses the arguments, starts
// or attaches the trace, waits for its end and writes the report.
func run(args []string, stdout, stderr io.Writer) int {
	inv, code := parseArgs(args, stdout, stderr)
	if inv == nil {
		return code
	}
	c := &cli{invocation: inv, stderr: stderr, out: stderr}
	if inv.mode == "attach" || inv.o.outFile == "-" {
		c.out = stdout
	}
	if f := inv.o.outFile; f != "" && f != "-" {
		file, err := os.Create(f)
		if err != nil {
			return c.fail(err)
		}
		defer file.Close()
		c.out = file
	}
	// The metrics address is taken before the command starts: a busy
	// port must not cost a run.
	if inv.o.prometheus != "" {
		m, err := listenMetrics(inv.o.prometheus)
		if err != nil {
			return c.fail(fmt.Errorf("--prometheus %s: %w", inv.o.prometheus, err))
		}
		defer m.Close()
		c.metrics = m
	}
	if err := c.start(); err != nil {
		c.fail(err)
		return startExitCode(err)
	}
	defer c.sess.Close()
	if c.metrics != nil {
		c.metrics.serve(c.sess, inv.o.promPID, stderr)
	}
	code, werr := c.wait()
	return c.finish(code, werr)
}

// startExitCode is the exit status for a trace that could not start: as a
// shell's, 127 when CMD is not found and 126 when it cannot be executed
// (exec.LookPath's *exec.Error names CMD); 1 for anything else, such as
// missing privileges.
func startExitCode(err error) int {
	var ee *exec.Error
	if !errors.As(err, &ee) {
		return 1
	}
	switch {
	case errors.Is(ee.Err, exec.ErrNotFound), errors.Is(ee.Err, fs.ErrNotExist):
		return 127
	case errors.Is(ee.Err, fs.ErrPermission):
		return 126
	}
	return 1
}

// invocation is what the command line asks for.
type invocation struct {
	mode string // "run" or "attach"
	o    options
	argv []string // run: the command
	opts trace.Options
}

// parseArgs checks the command line; a nil invocation means: exit with
// code now (usage, version or an error already printed).
func parseArgs(args []string, stdout, stderr io.Writer) (*invocation, int) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return nil, 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		writeHelp(stdout)
		return nil, 0
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionString())
		return nil, 0
	case "run", "attach":
	default:
		fmt.Fprintf(stderr, "hcomm-trace: unknown subcommand %q (want run, attach, version or help)\n", args[0])
		return nil, 2
	}
	inv := &invocation{mode: args[0]}
	o := &inv.o
	fs := newFlags(inv.mode, o, stderr)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if err := o.check(inv.mode, fs.NArg()); err != nil {
		fmt.Fprintf(stderr, "hcomm-trace %s: %v\n", inv.mode, err)
		return nil, 2
	}
	var err error
	if inv.opts, err = o.traceOptions(); err != nil {
		fmt.Fprintf(stderr, "hcomm-trace %s: %v\n", inv.mode, err)
		return nil, 2
	}
	inv.argv = fs.Args()
	return inv, -1
}

// check refuses values that mean nothing: negative durations and counts,
// an unknown format or breakdown, a missing command or PID.
func (o *options) check(mode string, nargs int) error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"-i", o.interval}, {"-d", o.duration}, {"--linger", o.linger}} {
		if d.v < 0 {
			return fmt.Errorf("%s %s: a duration cannot be negative", d.flag, d.v)
		}
	}
	if o.top < 0 {
		return fmt.Errorf("-top %d: cannot be negative (0 shows all)", o.top)
	}
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("-o %q: want table or json", o.output)
	}
	if o.linger > 0 && o.prometheus == "" {
		return errors.New("--linger needs --prometheus")
	}
	switch mode {
	case "run":
		if nargs == 0 {
			return errors.New("no command (usage: hcomm-trace run [flags] -- CMD ARGS...)")
		}
	case "attach":
		if o.pid <= 0 || nargs > 0 {
			return errors.New("need -p PID and no other arguments")
		}
	}
	return nil
}

// traceOptions turns the flags into trace.Options.
func (o *options) traceOptions() (trace.Options, error) {
	opts := trace.Options{
		Hooks:       trace.Hooks{SubmitBatch: o.hookSubmit, ReapBatch: o.hookReap},
		Executables: o.engineBins,
		Filter:      trace.Filter{Syscalls: o.syscalls, Failed: o.failed},
	}
	if _, err := trace.ParseSyscalls(o.syscalls); err != nil {
		return opts, err
	}
	if o.errno != "" {
		e, err := parseErrno(o.errno)
		if err != nil {
			return opts, err
		}
		opts.Filter.Errno = e
	}
	by := o.by
	switch {
	case o.perProcess && o.perThread:
		return opts, errors.New("-P and -T: choose one")
	case o.perProcess:
		by = "process"
	case o.perThread:
		by = "thread"
	}
	switch by {
	case "":
	case "process":
		opts.By = trace.ByProcess
	case "thread":
		opts.By = trace.ByThread
	default:
		return opts, fmt.Errorf("--by %q: want process or thread", by)
	}
	return opts, nil
}

// parseErrno accepts an errno name (ENOENT) or number (2).
func parseErrno(s string) (unix.Errno, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 4096 {
		return unix.Errno(n), nil
	}
	name := strings.ToUpper(s)
	for e := unix.Errno(1); e < 4096; e++ {
		if unix.ErrnoName(e) == name {
			return e, nil
		}
	}
	return 0, fmt.Errorf("--errno %q: not an errno name (ENOENT) or number", s)
}

// cli is one invocation's state.
type cli struct {
	*invocation
	out     io.Writer // the report
	stderr  io.Writer
	log     *slog.Logger
	sess    *trace.Session
	metrics *metricsServer
}

func (c *cli) fail(err error) int {
	fmt.Fprintf(c.stderr, "hcomm-trace: %v\n", err)
	return 1
}

// start starts the command (run) or attaches to the process (attach).
func (c *cli) start() error {
	level := slog.LevelWarn
	if c.o.verbose {
		level = slog.LevelDebug
	}
	c.log = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	c.opts.Logger = c.log
	if c.o.verbose {
		c.opts.OnEvent = func(e trace.Event) { logEvent(c.log, e) }
	}
	var err error
	if c.mode == "run" {
		c.sess, err = trace.StartCommand(c.argv, trace.CommandIO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, c.opts)
	} else {
		c.sess, err = trace.Attach(c.o.pid, c.opts)
	}
	if err != nil {
		return err
	}
	if st := c.sess.Engine(); !st.Present {
		c.log.Debug("engine section absent", "reason", st.Reason)
	}
	return nil
}

// wait prints live intervals until the traced process ends (or, for attach,
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
		c.live(stopLive)
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

// live prints one compact line (json: one object) per interval, of what
// changed in it, until stop closes.
func (c *cli) live(stop chan struct{}) {
	if c.o.interval <= 0 {
		return
	}
	t := time.NewTicker(c.o.interval)
	defer t.Stop()
	prev, err := c.sess.Snapshot()
	if err != nil {
		fmt.Fprintf(c.stderr, "hcomm-trace: read counters: %v\n", err)
		return
	}
	top := c.o.top
	if top == 0 || top > 5 {
		top = 5
	}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		cur, err := c.sess.Snapshot()
		if err != nil {
			fmt.Fprintf(c.stderr, "hcomm-trace: read counters: %v\n", err)
			continue
		}
		iv := report.NewInterval(cur.Sub(prev), cur.Taken.Sub(prev.Taken))
		prev = cur
		if c.o.output == "json" {
			err = report.WriteJSONLine(c.out, iv)
		} else {
			err = iv.WriteLine(c.out, top)
		}
		if err != nil {
			fmt.Fprintf(c.stderr, "hcomm-trace: write interval: %v\n", err)
			return
		}
	}
}

// finish reads the final counters, closes the session (so the exec list is
// complete), writes the report, lingers for the metrics' last scrape and
// returns the exit status: the command's for run, 0 for an attach that
// ended normally.
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
	if serr != nil {
		c.sess.Close()
		return c.fail(fmt.Errorf("read counters: %w", serr))
	}
	if c.metrics != nil {
		c.metrics.freeze(snap)
	}
	c.sess.Close()
	rep := report.New(snap, c.sess.Meta(exit))
	if err := c.writeReport(rep); err != nil {
		return c.fail(fmt.Errorf("write report: %w", err))
	}
	if c.metrics != nil && c.o.linger > 0 {
		c.metrics.linger(c.o.linger, c.stderr)
	}
	return status
}

func (c *cli) writeReport(r *report.Report) error {
	if c.o.output == "json" {
		return report.WriteJSON(c.out, r)
	}
	return report.WriteTable(c.out, r, report.TableOptions{Top: c.o.top, Histograms: c.o.hist, Header: true})
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
