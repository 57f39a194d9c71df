package trace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Session is one traced process: a command started in a fresh cgroup
// (StartCommand) or a running process (Attach).
type Session struct {
	*Tracer
	Mode    string // "run" or "attach"
	PID     int
	Argv    []string
	Cgroup  *Cgroup
	cmd     *exec.Cmd
	pidfd   int
	started time.Time
	comm    string // attach: /proc/PID/comm when attached
	opts    Options
}

// CommandIO is where a started command's standard streams go (nil: the
// null device, as os/exec does).
type CommandIO struct {
	Stdin          *os.File
	Stdout, Stderr *os.File
	Env            []string // nil: inherit
	Dir            string
}

// StartCommand creates a fresh cgroup, loads and attaches the probes
// filtered to it, and only then starts argv inside it with clone3
// (CLONE_INTO_CGROUP), so the command and all its children are counted from
// their first instruction. The command's executable is probed for the
// engine hooks. Wait for it with Wait; Close removes the cgroup.
func StartCommand(argv []string, stdio CommandIO, opts Options) (*Session, error) {
	if len(argv) == 0 {
		return nil, errors.New("trace: no command given")
	}
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		// exec.ErrNotFound or fs.ErrPermission: shells exit 127 or 126.
		return nil, fmt.Errorf("trace: command %q: %w", argv[0], err)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	cg, err := NewCgroup("hcomm-trace")
	if err != nil {
		return nil, err
	}
	exes := append([]string{path}, opts.Executables...)
	tr, err := newTracer(target{cgroup: cg}, opts, exes)
	if err != nil {
		cg.Remove()
		return nil, err
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
	cmd.Env, cmd.Dir = stdio.Env, stdio.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
	s := &Session{Tracer: tr, Mode: "run", Argv: argv, Cgroup: cg, cmd: cmd, pidfd: -1, opts: opts}
	if err := cmd.Start(); err != nil {
		s.Close()
		return nil, fmt.Errorf("start %s in cgroup %s: %w", path, cg.Path, err)
	}
	s.PID = cmd.Process.Pid
	s.started = time.Now()
	return s, nil
}

// Attach traces the running thread group pid (only it: not its children).
// Its executable (/proc/PID/exe) is probed for the engine hooks. A zombie
// is ErrProcessGone; a thread id that is not its process's is
// ErrNotProcess, naming the process to attach to instead.
func Attach(pid int, opts Options) (*Session, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("%w: invalid PID %d", ErrProcessGone, pid)
	}
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	if err := checkAttachable(pid); err != nil {
		return nil, err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("%w: PID %d: no such process", ErrProcessGone, pid)
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	exes := append([]string{exe}, opts.Executables...)
	tr, err := newTracer(target{pid: pid}, opts, exes)
	if err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	s := &Session{Tracer: tr, Mode: "attach", PID: pid, pidfd: pidfd, started: time.Now(), opts: opts}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		s.Argv = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		s.comm = strings.TrimSpace(string(b))
	}
	// The process may have exited between pidfd_open and the attach.
	if !s.alive() {
		s.Close()
		return nil, fmt.Errorf("%w: PID %d exited while attaching", ErrProcessGone, pid)
	}
	return s, nil
}

// checkAttachable reads /proc/PID/status: the PID must name a live
// process, not a zombie and not a thread of another process.
func checkAttachable(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("%w: PID %d: no such process", ErrProcessGone, pid)
		}
		return fmt.Errorf("trace: read /proc/%d/status: %w", pid, err)
	}
	st := parseStatus(string(b))
	if strings.HasPrefix(st["State"], "Z") || strings.HasPrefix(st["State"], "X") {
		return fmt.Errorf("%w: PID %d is a zombie: it has exited and waits for its parent to reap it; there is nothing left to trace", ErrProcessGone, pid)
	}
	if tgid := st["Tgid"]; tgid != "" && tgid != strconv.Itoa(pid) {
		return fmt.Errorf("%w: %d is a thread of process %s: attach -p %s traces the process with all its threads", ErrNotProcess, pid, tgid, tgid)
	}
	return nil
}

// parseStatus splits /proc/PID/status into its "Key:\tvalue" lines.
func parseStatus(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func (s *Session) alive() bool {
	return unix.PidfdSendSignal(s.pidfd, 0, nil, 0) == nil
}

// Wait blocks until the traced process ends or ctx is done. For a started
// command it returns the command's exit status (128+signal when killed, as
// a shell reports it); when ctx ends first the command keeps running and
// Wait returns ctx's error. For an attached process it returns 0 and
// ErrProcessGone when the process exited, or ctx's error.
func (s *Session) Wait(ctx context.Context) (int, error) {
	if s.cmd != nil {
		done := make(chan error, 1)
		go func() { done <- s.cmd.Wait() }()
		select {
		case err := <-done:
			return exitStatus(s.cmd, err)
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	for {
		pfd := []unix.PollFd{{Fd: int32(s.pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return -1, fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return 0, fmt.Errorf("%w: PID %d exited", ErrProcessGone, s.PID)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}

// Signal forwards sig to a started command.
func (s *Session) Signal(sig os.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	return s.cmd.Process.Signal(sig)
}

func exitStatus(cmd *exec.Cmd, err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return -1, err
}

// Close detaches the probes and, for a started command, removes its cgroup
// (moving any process still inside to the parent cgroup). It does not kill
// the command.
func (s *Session) Close() error {
	var errs []error
	if s.Tracer != nil {
		errs = append(errs, s.Tracer.Close())
	}
	if s.Cgroup != nil {
		errs = append(errs, s.Cgroup.Remove())
	}
	if s.pidfd >= 0 {
		unix.Close(s.pidfd)
		s.pidfd = -1
	}
	return errors.Join(errs...)
}

// Meta describes the session for a report; call it after Close for the
// complete list of execs. exitCode may be nil (attach, or still running).
func (s *Session) Meta(exitCode *int) Meta {
	p := ProcessInfo{PID: s.PID, Argv: s.Argv}
	if s.Cgroup != nil {
		p.Cgroup = s.Cgroup.Path
	}
	execs := s.Execs()
	for _, e := range execs {
		if e.PID == s.PID {
			p.Comm = e.Comm // the command's own exec
		}
	}
	if p.Comm == "" {
		if s.Mode == "attach" {
			p.Comm = s.comm
		} else if len(s.Argv) > 0 {
			p.Comm = filepath.Base(s.Argv[0])
		}
	}
	return Meta{
		Process: p, Mode: s.Mode, Duration: time.Since(s.started), ExitCode: exitCode,
		Engine: s.Engine(), Execs: execs, Unavailable: s.Unavailable(),
		Filter: s.opts.Filter, By: s.opts.By,
	}
}
