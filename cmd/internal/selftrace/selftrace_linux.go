package selftrace

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/trace"
)

// settle lets a handshake system call that has already done its work
// return (and its exit tracepoint fire) before a snapshot.
const settle = 5 * time.Millisecond

// Run starts argv under trace, waits for its Begin, snapshots, lets it
// run, snapshots at its End, and returns the difference (handshake calls
// removed) and the child's report line. timeout bounds the whole run.
func Run(argv []string, opts trace.Options, timeout time.Duration) (*trace.Snapshot, []byte, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		return nil, nil, err
	}
	defer outR.Close()
	s, err := trace.StartCommand(argv, trace.CommandIO{Stdin: inR, Stdout: outW, Stderr: os.Stderr}, opts)
	inR.Close()
	outW.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("selftrace: start %s: %w", argv[0], err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Reading the child's lines must not outlive ctx.
	lines := make(chan string)
	go func() {
		defer close(lines)
		rd := bufio.NewReader(outR)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case lines <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	next := func(what string) (string, error) {
		select {
		case l, ok := <-lines:
			if !ok {
				code, werr := s.Wait(ctx)
				return "", fmt.Errorf("%w: it exited (status %d, %v) before %s", ErrChild, code, werr, what)
			}
			return l, nil
		case <-ctx.Done():
			_ = s.Signal(os.Kill)
			return "", fmt.Errorf("%w: no %s within %v", ErrChild, what, timeout)
		}
	}
	expect := func(want string) error {
		l, err := next(want)
		if err != nil {
			return err
		}
		if l != want+"\n" {
			return fmt.Errorf("%w: it said %q where %q was due", ErrChild, l, want)
		}
		return nil
	}
	if err := expect("begin"); err != nil {
		return nil, nil, err
	}
	time.Sleep(settle)
	s0, err := s.Snapshot()
	if err != nil {
		return nil, nil, err
	}
	if _, err := inW.Write([]byte("g")); err != nil {
		return nil, nil, err
	}
	if err := expect("end"); err != nil {
		return nil, nil, err
	}
	time.Sleep(settle)
	s1, err := s.Snapshot()
	if err != nil {
		return nil, nil, err
	}
	if _, err := inW.Write([]byte("q")); err != nil {
		return nil, nil, err
	}
	report, err := next("report")
	if err != nil {
		return nil, nil, err
	}
	if code, err := s.Wait(ctx); err != nil || code != 0 {
		return nil, []byte(report), fmt.Errorf("%w: exit status %d (%v)", ErrChild, code, err)
	}
	d := s1.Sub(s0)
	d.Syscalls[unix.SYS_READ].Count--  // the wake-up read at Begin
	d.Syscalls[unix.SYS_WRITE].Count-- // the "end" write
	return d, []byte(report), nil
}

// Begin is the child's side of the window's start: it says so and sleeps
// in read(2) until the parent has taken its first snapshot.
func Begin() error {
	if _, err := unix.Write(1, []byte("begin\n")); err != nil {
		return fmt.Errorf("selftrace: begin: %w", err)
	}
	var b [1]byte
	if _, err := unix.Read(0, b[:]); err != nil {
		return fmt.Errorf("selftrace: begin: %w", err)
	}
	return nil
}

// End closes the window: one write(2), then a wait for the parent's second
// snapshot.
func End() error {
	if _, err := unix.Write(1, []byte("end\n")); err != nil {
		return fmt.Errorf("selftrace: end: %w", err)
	}
	var b [1]byte
	if _, err := unix.Read(0, b[:]); err != nil {
		return fmt.Errorf("selftrace: end: %w", err)
	}
	return nil
}

// Report writes the child's report: v as one JSON line.
func Report(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(b, '\n'))
	return err
}
