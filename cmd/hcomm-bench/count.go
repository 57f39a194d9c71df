package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hcomm-go/hcomm/cmd/internal/selftrace"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/trace"
)

// counts is what eBPF saw the traced worker do during its counted
// transfers, per transfer.
type counts struct {
	Transfers int                `json:"transfers"`
	Host      float64            `json:"host_syscalls"`   // the process's system calls, device model's excluded
	Device    float64            `json:"device_syscalls"` // vfio-mock's MSI eventfd writes (no syscalls on hardware)
	Copies    float64            `json:"cpu_copies"`      // bytes a CPU copied / bytes per transfer
	CopyBytes float64            `json:"cpu_copy_bytes"`  // syscall + io_uring copies + engine CPU path into device memory
	Direct    float64            `json:"direct_bytes"`    // bytes moved by DMA (O_DIRECT, io_uring fixed buffers on O_DIRECT)
	ByName    map[string]float64 `json:"by_name"`         // every syscall seen (host and device), per transfer
	Faults    float64            `json:"page_faults"`
}

// privileged reports whether eBPF counting can run, and why not.
func privileged(o *options) (bool, string) {
	if o.noTrace {
		return false, "n/a (-no-trace)"
	}
	if err := trace.CheckPrivileges(); err != nil {
		return false, "n/a (needs root)"
	}
	return true, ""
}

// workerReport is the worker's last line: what its device model did.
type workerReport struct {
	DevSyscalls uint64 `json:"dev_syscalls"`
	Bytes       int    `json:"bytes"`
	Err         string `json:"err,omitempty"`
}

// countInChild runs workload w as a child of this binary under trace and
// counts n transfers between two snapshots (package selftrace: set-up,
// warm-up and the handshake stay out of the count).
func countInChild(o *options, w *workload, n int) (*counts, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argv := append([]string{exe, "-worker", "-w-scenario", w.scenario, "-w-variant", w.variant, "-w-n", strconv.Itoa(n)}, childFlags(o)...)
	d, line, err := selftrace.Run(argv, trace.Options{Logger: quietLogger()}, 5*time.Minute)
	var rep workerReport
	if line != nil {
		if jerr := json.Unmarshal(line, &rep); jerr == nil && rep.Err != "" {
			return nil, fmt.Errorf("worker: %s", rep.Err)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		return nil, fmt.Errorf("worker report %q: %w", line, err)
	}
	return makeCounts(d, n, rep.Bytes, rep.DevSyscalls), nil
}

func makeCounts(d *trace.Snapshot, n, bytes int, dev uint64) *counts {
	c := &counts{Transfers: n, ByName: map[string]float64{}}
	var total uint64
	for name, k := range d.SyscallCounts() {
		if k > 1<<62 { // a negative delta after the boundary fix-up
			continue
		}
		total += k
		c.ByName[name] = float64(k) / float64(n)
	}
	c.Host = float64(total-min(dev, total)) / float64(n)
	c.Device = float64(dev) / float64(n)
	cp, direct := d.CopiedBytes(), d.DirectBytes()
	// The engine's CPU path copies into device memory in user space,
	// where no syscall sees it; its hook reports the bytes per path.
	cp += d.Engine.PathBytes[engine.PathCPU] + d.Engine.PathBytes[engine.PathMemory]
	c.CopyBytes = float64(cp) / float64(n)
	c.Direct = float64(direct) / float64(n)
	if bytes > 0 {
		c.Copies = float64(cp) / float64(n) / float64(bytes)
	}
	c.Faults = float64(d.Faults.Total) / float64(n)
	return c
}

// childFlags passes on the options a worker needs to set up the same workload.
func childFlags(o *options) []string {
	var f []string
	if o.quick {
		f = append(f, "-quick")
	}
	if o.dir != "" {
		f = append(f, "-dir", o.dir)
	}
	if o.stableDev != "" {
		f = append(f, "-w-stable-dev", o.stableDev)
	}
	if !o.fileTargets["disk"] || !o.fileTargets["stable"] {
		var t []string
		for _, k := range []string{"disk", "stable"} {
			if o.fileTargets[k] {
				t = append(t, k)
			}
		}
		f = append(f, "-file-targets", strings.Join(t, ","))
	}
	return f
}

// runWorker is the child side: set up, warm up, then (with the handshake)
// run n transfers between the parent's snapshots.
func runWorker(scenario, variant string, n int, handshake bool, o *options) int {
	fail := func(err error) int {
		_ = selftrace.Report(workerReport{Err: err.Error()})
		return 1
	}
	w, err := lookup(scenario, variant)
	if err != nil {
		return fail(err)
	}
	if o.dir == "" && scenario == "file-4k" && !strings.HasPrefix(variant, stablePrefix) {
		return fail(fmt.Errorf("file-4k worker needs -dir"))
	}
	r, err := w.setup(o)
	if err != nil {
		return fail(err)
	}
	n = max(r.per, (n+r.per-1)/r.per*r.per)
	warm := r.per * max(1, 256/r.per)
	if r.bytes > 0 {
		warm = r.per * max(1, min(256, (64<<20)/r.bytes)/r.per)
	}
	if err := r.run(warm); err != nil { // warm up
		return fail(err)
	}
	if handshake {
		if err := selftrace.Begin(); err != nil {
			return fail(err)
		}
	}
	var dev0, dev1 uint64
	if r.devSyscalls != nil {
		dev0 = r.devSyscalls()
	}
	err = r.run(n)
	if handshake {
		if err := selftrace.End(); err != nil {
			return fail(err)
		}
	}
	if r.devSyscalls != nil {
		dev1 = r.devSyscalls()
	}
	if err == nil && r.check != nil {
		err = r.check()
	}
	if cerr := r.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	if err := selftrace.Report(workerReport{DevSyscalls: dev1 - dev0, Bytes: r.bytes}); err != nil {
		return 1
	}
	return 0
}

// sortedNames lists a by-name map's keys by count, largest first.
func sortedNames(m map[string]float64) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	sort.Slice(k, func(i, j int) bool {
		if m[k[i]] != m[k[j]] {
			return m[k[i]] > m[k[j]]
		}
		return k[i] < k[j]
	})
	return k
}
