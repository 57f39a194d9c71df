package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The peer protocol, for a second process that a test or a benchmark talks
// to (a remote endpoint, a traced workload): the peer prints "ADDR" and
// its fields (its addresses, and whatever else the other side needs) as the
// first line of its standard output (Announce); then it reads one command
// a line from its standard input, answering each with "OK" (Command),
// until its standard input closes, and exits.

// ErrPeer reports a peer that broke the protocol: no ADDR line in time, a
// command not answered with "OK", no exit in time after its input closed.
var ErrPeer = errors.New("testutil: peer")

// Announce prints the peer's first line: "ADDR" and fields, space-separated.
func Announce(w io.Writer, fields ...any) error {
	_, err := fmt.Fprintln(w, append([]any{"ADDR"}, fields...)...)
	return err
}

// PeerProc is a started peer process.
type PeerProc struct {
	Cmd  *exec.Cmd
	Addr []string // the fields of its ADDR line
	in   io.WriteCloser
	out  *bufio.Reader
}

// LaunchPeer starts cmd (its standard error is this process's unless set)
// and waits at most start for its ADDR line; a peer that does not say it
// in time, or says something else, is killed.
func LaunchPeer(cmd *exec.Cmd, start time.Duration) (*PeerProc, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &PeerProc{Cmd: cmd, in: in, out: bufio.NewReader(out)}
	line, err := p.readLine(start)
	f := strings.Fields(line)
	if err != nil || len(f) < 2 || f[0] != "ADDR" {
		p.kill()
		return nil, fmt.Errorf("%w %s said %q, want ADDR <address>: %v", ErrPeer, cmd.Path, line, err)
	}
	p.Addr = f[1:]
	return p, nil
}

// readLine reads one line of the peer's output, killing the peer when none
// comes within d (its output then closes, and the read returns).
func (p *PeerProc) readLine(d time.Duration) (string, error) {
	t := time.AfterFunc(d, func() { p.Cmd.Process.Kill() })
	defer t.Stop()
	line, err := p.out.ReadString('\n')
	if err != nil && !t.Stop() {
		err = fmt.Errorf("no line within %v: %w", d, err)
	}
	return line, err
}

// Command sends the command line c and waits at most wait for the peer's
// "OK"; a peer that does not answer in time is killed.
func (p *PeerProc) Command(c string, wait time.Duration) error {
	if _, err := fmt.Fprintln(p.in, c); err != nil {
		return fmt.Errorf("%w %s: %s: %w", ErrPeer, p.Cmd.Path, c, err)
	}
	line, err := p.readLine(wait)
	if err != nil || strings.TrimSpace(line) != "OK" {
		return fmt.Errorf("%w %s: %s: answered %q: %v", ErrPeer, p.Cmd.Path, c, line, err)
	}
	return nil
}

// Output is the rest of the peer's standard output (after its ADDR line),
// for a caller that neither sends commands nor reads it otherwise: drain it,
// or the peer may block writing.
func (p *PeerProc) Output() io.Reader { return p.out }

// Stop closes the peer's standard input and waits at most wait for it to
// exit; one that has not exited by then is killed, and Stop says so (an
// ErrPeer). Otherwise it returns the peer's exit error, nil for status 0.
func (p *PeerProc) Stop(wait time.Duration) error {
	p.in.Close()
	done := make(chan error, 1)
	go func() { done <- p.Cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		p.Cmd.Process.Kill()
		<-done
		return fmt.Errorf("%w %s did not stop within %v of its input closing", ErrPeer, p.Cmd.Path, wait)
	}
}

func (p *PeerProc) kill() {
	p.Cmd.Process.Kill()
	p.Cmd.Wait()
}

// Peer says how StartPeer waits for a peer process: Start bounds the wait
// for its address, Stop the wait for its exit once its standard input is
// closed (then it is killed), and CheckExit makes a failed exit fail the
// test (leave it false for peers a test kills).
type Peer struct {
	Start, Stop time.Duration
	CheckExit   bool
}

// StartPeer starts cmd, a peer process of the protocol above, and returns
// the fields of its ADDR line, space-separated. Its standard error is the
// test's; the rest of its standard output is discarded. When the test
// ends, StartPeer's cleanup stops it as p says.
func StartPeer(t testing.TB, cmd *exec.Cmd, p Peer) string {
	t.Helper()
	pp, err := LaunchPeer(cmd, p.Start)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pp.Output())
	t.Cleanup(func() {
		if err := pp.Stop(p.Stop); err != nil && p.CheckExit {
			t.Errorf("peer %s: %v", cmd.Path, err)
		}
	})
	return strings.Join(pp.Addr, " ")
}
