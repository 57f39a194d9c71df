package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// peerEnv makes the test binary a peer of the kind it names (TestPeerHelper).
const peerEnv = "TESTUTIL_PEER"

// TestPeerHelper is the peer process when peerEnv is set: "good" follows
// the protocol, "mute" never says its address, "liar" says something else,
// "deaf" answers commands but ignores its input closing, "rude" answers
// commands with "NO".
func TestPeerHelper(t *testing.T) {
	kind := os.Getenv(peerEnv)
	if kind == "" {
		t.Skip("the peer process of TestLaunchPeer (helper, not a test)")
	}
	switch kind {
	case "mute":
		time.Sleep(time.Minute)
	case "liar":
		fmt.Println("HELLO 127.0.0.1:1")
	default:
		Announce(os.Stdout, "127.0.0.1:1", 42)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if kind == "rude" {
			fmt.Println("NO")
		} else {
			fmt.Println("OK")
		}
	}
	if kind == "deaf" {
		time.Sleep(time.Minute)
	}
	os.Exit(0)
}

func peerCmd(kind string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerHelper$")
	cmd.Env = append(os.Environ(), peerEnv+"="+kind)
	return cmd
}

// A peer's ADDR line, commands and exit, and each way a peer can break the
// protocol, which LaunchPeer, Command and Stop report as ErrPeer within
// their bounds.
func TestLaunchPeer(t *testing.T) {
	for _, tc := range []struct {
		kind                    string
		launchErr, cmdErr, stop bool
	}{
		{kind: "good"},
		{kind: "mute", launchErr: true},
		{kind: "liar", launchErr: true},
		{kind: "rude", cmdErr: true},
		{kind: "deaf", stop: true},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t0 := time.Now()
			p, err := LaunchPeer(peerCmd(tc.kind), 2*time.Second)
			if tc.launchErr {
				if !errors.Is(err, ErrPeer) || time.Since(t0) > 10*time.Second {
					t.Fatalf("LaunchPeer: %v after %v, want ErrPeer within the bound", err, time.Since(t0))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(p.Addr, " "); got != "127.0.0.1:1 42" {
				t.Errorf("Addr %q, want the ADDR line's fields", got)
			}
			if err := p.Command("ping", 5*time.Second); errors.Is(err, ErrPeer) != tc.cmdErr {
				t.Errorf("Command: %v, want an ErrPeer: %v", err, tc.cmdErr)
			}
			// A -race child sleeps GORACE's atexit_sleep_ms (1 s) at its
			// exit: 5 s for the peers that exit, 1 s for the deaf one.
			wait := 5 * time.Second
			if tc.stop {
				wait = time.Second
			}
			if err := p.Stop(wait); errors.Is(err, ErrPeer) != tc.stop || (!tc.stop && err != nil) {
				t.Errorf("Stop: %v, want an ErrPeer: %v", err, tc.stop)
			}
		})
	}
}
