package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/trace"
)

// The test binary doubles as the traced worker (count re-executes it).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-worker" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestPathsRoundTrip(t *testing.T) {
	for _, kind := range []string{"traditional", "engine"} {
		p, err := openPath(kind)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.roundTrips(2 * batch); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if err := p.verify(); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
		if err := p.close(); err != nil {
			t.Errorf("%s: close: %v", kind, err)
		}
	}
	if _, err := openPath("carrier-pigeon"); err == nil {
		t.Error("unknown path: no error")
	}
}

// The demo's table comes from eBPF: exactly what each path does per
// transfer (a round trip is two transfers).
func TestCountsExact(t *testing.T) {
	testutil.RequirePrivileged(t, "eBPF counting of the demo's traced worker")
	if err := trace.CheckPrivileges(); err != nil {
		testutil.RequireFeature(t, "eBPF tracing", err)
	}
	tr, err := count("traditional", 640)
	if err != nil {
		t.Fatal(err)
	}
	// The path's own calls are exact. The Go runtime adds one more read
	// each time its netpoller wakes on its eventfd (netpollBreak): such a
	// read always follows an epoll_pwait that returned it, so the reads
	// beyond one per transfer may not exceed the epoll_pwait calls.
	reads, polls := tr.byName["read"], tr.byName["epoll_pwait"]
	if tr.byName["pwrite64"] != 0.5 || tr.byName["pread64"] != 0.5 || reads < 1 || reads-1 > polls || tr.device != 1 {
		t.Errorf("traditional per transfer: %v, device %v; want pwrite64 0.5, pread64 0.5, read 1 (+ at most the runtime's epoll_pwait wake-ups), device 1", tr.byName, tr.device)
	}
	if tr.copies < 0.99 || tr.copies > 1.01 {
		t.Errorf("traditional: %v CPU copies per transfer, want 1", tr.copies)
	}
	en, err := count("engine", 6400)
	if err != nil {
		t.Fatal(err)
	}
	// Poll mode asks the device for no interrupts (nobody sleeps on them).
	if en.device != 0 || en.byName["pwrite64"] != 0 || en.byName["read"] > en.byName["epoll_pwait"] {
		t.Errorf("engine per transfer: %v, device %v; want no pwrite and no read beyond the runtime's epoll_pwait wake-ups, device 0", en.byName, en.device)
	}
	if en.syscalls > 0.05 || en.copies > 0.001 {
		t.Errorf("engine: %v syscalls and %v copies per transfer, want ~0", en.syscalls, en.copies)
	}
}

// The section prints one table and says what it skipped when it cannot
// count.
func TestTransfersSection(t *testing.T) {
	var out bytes.Buffer
	d := &demo{out: &out, root: os.Geteuid() == 0, n: 640}
	defer d.release()
	if err := d.transfers(); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"engine ÷ traditional", "What it means", "every block came back byte for byte",
		"Throughput", "less time per transfer, pipelined", "Latency: one synchronous 4 KiB", "latency p50", "latency p99"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if !d.root && (!strings.Contains(s, "n/a (needs root)") || len(d.skipped) == 0) {
		t.Errorf("unprivileged: counts not marked n/a or nothing listed as skipped:\n%s", s)
	}
}
