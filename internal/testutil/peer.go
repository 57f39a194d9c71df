package testutil

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Peer says how StartPeer waits for a peer process: Start bounds the wait
// for its address, Stop the wait for its exit once its standard input is
// closed (then it is killed), and CheckExit makes a failed exit fail the
// test (leave it false for peers a test kills).
type Peer struct {
	Start, Stop time.Duration
	CheckExit   bool
}

// StartPeer starts cmd, a peer process that prints "ADDR <address>" as its
// first line of standard output and runs until its standard input closes,
// and returns the address. Its standard error is the test's. When the test
// ends, StartPeer's cleanup closes the peer's standard input and waits for
// it as p says.
func StartPeer(t testing.TB, cmd *exec.Cmd, p Peer) string {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil && p.CheckExit {
				t.Errorf("peer %s: %v", cmd.Path, err)
			}
		case <-time.After(p.Stop):
			cmd.Process.Kill()
			<-done
			if p.CheckExit {
				t.Errorf("peer %s did not stop within %v of its stdin closing", cmd.Path, p.Stop)
			}
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		addr, ok := strings.CutPrefix(strings.TrimSpace(s), "ADDR ")
		if !ok {
			t.Fatalf("peer %s said %q, want ADDR <address>", cmd.Path, s)
		}
		return addr
	case <-time.After(p.Start):
		cmd.Process.Kill()
		t.Fatalf("peer %s did not start within %v", cmd.Path, p.Start)
	}
	return ""
}
