package nvme_test

import (
	"strings"
	"testing"
)

func TestParseStraceStacks(t *testing.T) {
	const out = `23382 futex(0x548278, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>
23383 nanosleep({tv_sec=0, tv_nsec=20000},  <unfinished ...>
23383 <... nanosleep resumed>NULL)      = 0
 > /pkg/test(runtime.usleep.abi0+0x37) [0x7da37]
 > /pkg/test(runtime.sysmon+0xb2) [0x54012]
 > /pkg/test(runtime.mstart1+0x93) [0x4a533]
23382 <... futex resumed>)              = 0
 > /pkg/test(runtime.futex.abi0+0x23) [0x7e003]
 > /pkg/test(runtime.notewakeup+0x25) [0x18a25]
 > /pkg/test(github.com/hcomm-go/hcomm/engine.(*Engine).reaper+0x95) [0x1]
 > /pkg/test(runtime.goexit.abi0+0x1) [0x2]
23384 --- SIGURG {si_signo=SIGURG, si_code=SI_TKILL, si_pid=1, si_uid=0} ---
23384   futex(0x1, FUTEX_WAKE_PRIVATE, 1) = 1
 > /pkg/test(runtime.futex.abi0+0x23) [0x7e003]
 > /pkg/test(runtime.notewakeup+0x25) [0x18a25]
 > /pkg/test(github.com/hcomm-go/hcomm/engine.(*Engine).reaper+0x99) [0x1]
23385 +++ exited with 0 +++
nanosleep({tv_sec=0, tv_nsec=20000}, NULL) = 0
 > /pkg/test(runtime.usleep.abi0+0x37) [0x7da37]
 > /pkg/test(runtime.sysmon+0xb2) [0x54012]
 > /pkg/test(runtime.mstart1+0x93) [0x4a533]
23386 io_uring_enter(5, 1, 1, IORING_ENTER_GETEVENTS, NULL, 8) = 1
 > unexpected_backtracing_error [0x0]
23386 io_uring_enter(5, 1, 1, IORING_ENTER_GETEVENTS, NULL, 8) = 1
 > /pkg/test() [0x30]
 > /pkg/test() [0x40]
`
	r, err := parseStraceStacks(strings.NewReader(out), func(off uint64) string {
		if off == 0x30 {
			return "github.com/hcomm-go/hcomm/engine.(*Engine).cycle"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := map[string]int{"futex": 2, "nanosleep": 2, "io_uring_enter": 2}
	if len(r.calls) != len(wantCalls) {
		t.Errorf("calls %v, want %v", r.calls, wantCalls)
	}
	for k, n := range wantCalls {
		if r.calls[k] != n {
			t.Errorf("calls[%s] = %d, want %d (all: %v)", k, r.calls[k], n, r.calls)
		}
	}
	wantStacks := map[string]int{
		"futex ← runtime.futex ← runtime.notewakeup ← engine.(*Engine).reaper": 2,
		"nanosleep ← runtime.usleep ← runtime.sysmon ← runtime.mstart1":        2,
		"io_uring_enter ← unknown":                1,
		"io_uring_enter ← engine.(*Engine).cycle": 1,
	}
	if len(r.stacks) != len(wantStacks) {
		t.Errorf("stacks %v, want %v", r.stacks, wantStacks)
	}
	for k, n := range wantStacks {
		if r.stacks[k] != n {
			t.Errorf("stacks[%q] = %d, want %d (all: %v)", k, r.stacks[k], n, r.stacks)
		}
	}
	if _, err := parseStraceStacks(strings.NewReader(""), nil); err == nil {
		t.Error("empty strace output: no error")
	}
}

func TestParseProcStat(t *testing.T) {
	idle, busy, irq, cpus, err := parseProcStat([]byte("cpu  100 5 40 900 7 3 2 1 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\ncpu1 1 2 3 4 5 6 7 8 9 10\nintr 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if idle != 907 || busy != 100+5+40+3+2+1 || irq != 3+2 || cpus != 2 {
		t.Errorf("idle %d busy %d irq %d cpus %d, want 907 151 5 2", idle, busy, irq, cpus)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 3 x 5 6 7 8\ncpu0 1", "cpu 1 2 3 4 5 6 7 8\n"} {
		if _, _, _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// On this machine: the counters only grow.
	a := sampleCPU(t)
	b := sampleCPU(t)
	if d := b.sub(a); d.guest < 0 || d.guestTicks < 0 || d.process < 0 || d.guestIRQ < 0 {
		t.Errorf("CPU went backwards: %+v", d)
	}
}
