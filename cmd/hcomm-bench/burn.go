package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The loaded latency tables' load: a CPU-bound process (this binary with
// -burn-cpu N: one thread that never sleeps, pinned to CPU N) on the
// machine's last CPU, the "other vCPU" of a two-vCPU machine. The process
// measuring is not pinned: the scheduler gives it the other CPUs, as it
// would any program on a machine that runs something else.

// burnCPU is the CPU the load is pinned to: the last one.
func burnCPU() int { return runtime.NumCPU() - 1 }

// burnWhere says where the load runs, for the table's title.
func burnWhere() string {
	return fmt.Sprintf("a busy loop pinned to CPU %d of %d", burnCPU(), runtime.NumCPU())
}

// startBurner starts the load and returns the function that stops it (it
// is also stopped at exit, and dies with this process: Pdeathsig).
func startBurner(o *options) (stop func(), err error) {
	if runtime.NumCPU() < 2 {
		return nil, fmt.Errorf("one CPU: no other CPU to load")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-burn-cpu", strconv.Itoa(burnCPU()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the load: %w", err)
	}
	kill := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	undo := atExit(kill)
	// The burner says when it is pinned and spinning (one byte).
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := stdout.Read(b[:])
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(10 * time.Second):
		err = errors.New("not ready in 10 s")
	}
	if err != nil {
		undo()
		return nil, fmt.Errorf("the load (%s): %w", burnWhere(), err)
	}
	o.logf("load: pid %d, %s", cmd.Process.Pid, burnWhere())
	return undo, nil
}

// burnMain is the load process: pinned to cpu, one OS thread that spins
// until killed.
func burnMain(cpu int) int {
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintf(os.Stderr, "hcomm-bench -burn-cpu %d: %v\n", cpu, err)
		return 1
	}
	if _, err := os.Stdout.Write([]byte{'\n'}); err != nil {
		return 1
	}
	x := uint64(1)
	for {
		// xorshift: work the compiler cannot drop, no memory traffic.
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if x == 0 {
			break
		}
	}
	return int(x & 1)
}
