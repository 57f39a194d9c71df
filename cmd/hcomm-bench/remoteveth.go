package main

// The remote scenario's stable device: UCX's tcp transport over a veth
// pair between two network stacks, the "tcp_veth" transport. Over loopback
// both sides share one network stack and the lo device (MTU 64 KiB, no
// qdisc), and ucx_perftest's own tcp put moved anywhere between 400 and
// 4300 MiB/s from one run to the next; over a veth pair the bytes cross a
// device between two namespaces, as between two hosts' stacks, at the
// CPU's speed. The scenario child creates the namespace and the pair
// before the tcp_veth rows and removes both after them — on failure and on
// SIGTERM too (atExit) — as backend/ucx's TestNetNamespace does for its
// peer.
//
// The passive peer and ucx_perftest's server run in the namespace
// (ip netns exec), their UCX confined to the pair's end there
// (UCX_NET_DEVICES); the engine and ucx_perftest's client run in this
// process's namespace, confined to the other end. The pair's /30 comes from
// 198.18.0.0/15 (RFC 2544's range for benchmarking network devices, routed
// nowhere) and exists only on the pair: an address of the peer's end is
// not local here, so every byte to it crosses the pair. The pair's
// counters check that, per measurement (vethPair.crossed).

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// vethTLS is the tcp_veth transport's name in the tables and goal IDs.
const vethTLS = "tcp_veth"

// vethNSPrefix starts the namespace's name; the creating process's id
// follows, so that leftovers of a killed run can be told from a live one's.
const vethNSPrefix = "hcbv"

// vethPair is the namespace and the veth pair joining it to this process's
// namespace.
type vethPair struct {
	ns         string // the peer's namespace (ip netns)
	here, peer string // the pair's ends: in this namespace, in ns
	hereIP     string // this end's address
	peerIP     string // the peer end's address
	mtu        int    // the pair's MTU
	created    bool   // the link exists (ip link add succeeded)
	nsMade     bool   // the namespace exists (ip netns add succeeded)
	undo       func() // unregisters the atExit teardown
	err        error  // teardown's
}

// remoteNet is the veth pair while the tcp_veth transport is measured, nil
// otherwise (loopback, RDMA): where the peers and ucx_perftest's server run
// and which address they are reached at.
var remoteNet *vethPair

// vethStatus says whether this process can make the pair, and why not.
func vethStatus() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (ip netns add, ip link add … type veth)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("iproute2's ip command not found (apt-get install iproute2): %w", err)
	}
	return nil
}

// ipRun runs ip with args and returns its error with its output.
func ipRun(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, firstLine(strings.TrimSpace(string(out))))
	}
	return nil
}

// setupVeth creates the namespace and the pair with their addresses and
// brings them up; on any failure it removes what it made and says why.
func setupVeth(o *options) (v *vethPair, err error) {
	if err := vethStatus(); err != nil {
		return nil, err
	}
	removeStaleVeth(o)
	pid := os.Getpid()
	v = &vethPair{
		ns:   fmt.Sprintf("%s%d", vethNSPrefix, pid),
		here: fmt.Sprintf("hcbv%da", pid%10_000_000),
		peer: fmt.Sprintf("hcbv%db", pid%10_000_000),
	}
	// The upper half of 198.18.0.0/15 (backend/ucx's TestNetNamespace
	// takes its /30s from the whole range by process id too): 2^14 /30s,
	// hosts .1 and .2 of one.
	sub := uint32(198)<<24 | 19<<16 | uint32(pid%(1<<14))<<2
	ip := func(a uint32) string { return fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&255, a>>8&255, a&255) }
	v.hereIP, v.peerIP = ip(sub+1), ip(sub+2)
	if err := addrInUse(v.hereIP, v.peerIP); err != nil {
		return nil, err
	}
	v.undo = atExit(func() { _ = v.teardown() })
	defer func() {
		if err != nil {
			if terr := v.close(); terr != nil {
				err = fmt.Errorf("%w (and removing it: %v)", err, terr)
			}
			v = nil
		}
	}()
	if err := ipRun("netns", "add", v.ns); err != nil {
		// Root without CAP_SYS_ADMIN/CAP_NET_ADMIN (a container).
		return nil, err
	}
	v.nsMade = true
	if err := ipRun("link", "add", v.here, "type", "veth", "peer", "name", v.peer, "netns", v.ns); err != nil {
		return nil, err
	}
	v.created = true
	for _, c := range [][]string{
		{"addr", "add", v.hereIP + "/30", "dev", v.here},
		{"link", "set", v.here, "up"},
		{"-n", v.ns, "addr", "add", v.peerIP + "/30", "dev", v.peer},
		{"-n", v.ns, "link", "set", v.peer, "up"},
		{"-n", v.ns, "link", "set", "lo", "up"},
	} {
		if err := ipRun(c...); err != nil {
			return nil, err
		}
	}
	mtu, err := readSysUint("/sys/class/net/" + v.here + "/mtu")
	if err != nil {
		return nil, err
	}
	v.mtu = int(mtu)
	o.logf("veth: %s (%s) here, %s (%s) in namespace %s, MTU %d", v.here, v.hereIP, v.peer, v.peerIP, v.ns, v.mtu)
	return v, nil
}

// addrInUse fails when an interface of this namespace already has one of
// the pair's addresses (another run's pair, a test's).
func addrInUse(ips ...string) error {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("listing this namespace's addresses: %w", err)
	}
	for _, a := range as {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		for _, s := range ips {
			if n.Contains(net.ParseIP(s)) {
				return fmt.Errorf("address %s is already on an interface here (%s)", s, n)
			}
		}
	}
	return nil
}

// removeStaleVeth deletes namespaces of this scenario whose creating
// process is gone (a run killed with SIGKILL, which runs no exit
// handler); deleting a namespace deletes the veth end in it, and with it
// the pair.
func removeStaleVeth(o *options) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], vethNSPrefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(f[0], vethNSPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // its run is alive
		}
		if err := ipRun("netns", "del", f[0]); err != nil {
			o.logf("veth: leftover namespace %s: %v", f[0], err)
		} else {
			o.logf("veth: removed leftover namespace %s (process %d is gone)", f[0], pid)
		}
	}
}

// readSysUint reads a decimal number from a sysfs file.
func readSysUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// txBytes is how many bytes this end of the pair has sent.
func (v *vethPair) txBytes() (uint64, error) {
	n, err := readSysUint("/sys/class/net/" + v.here + "/statistics/tx_bytes")
	if err != nil {
		return 0, fmt.Errorf("veth counters: %w", err)
	}
	return n, nil
}

// crossed checks that at least want bytes left through this end of the
// pair since the counter read tx0: what a put measurement moved went over
// the veth, not another device.
func (v *vethPair) crossed(what string, tx0 uint64, want int64) error {
	tx, err := v.txBytes()
	if err != nil {
		return err
	}
	if tx-tx0 < uint64(want) {
		return fmt.Errorf("%s moved %d bytes but only %d left through %s: the transfers took another path", what, want, tx-tx0, v.here)
	}
	return nil
}

// inNS is the command that runs name with args in the pair's namespace.
// ip netns exec execs the program, so the process started is the
// program's: a signal reaches it, and its exit status is the program's.
func (v *vethPair) inNS(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", v.ns, name}, args...)...)
}

// describe names the device for the table.
func (v *vethPair) describe() string {
	return fmt.Sprintf("a veth pair, %s %s ↔ %s %s in network namespace %s, MTU %d", v.here, v.hereIP, v.peer, v.peerIP, v.ns, v.mtu)
}

// close removes the pair and the namespace, and unregisters the exit
// handler.
func (v *vethPair) close() error {
	if v.undo != nil {
		v.undo() // runs teardown once
		v.undo = nil
		return v.err
	}
	return v.teardown()
}

// teardown deletes the link (one end takes the pair with it) and the
// namespace (it goes with its last process: the peers, whose standard
// input closed, exit); what is already gone is skipped.
func (v *vethPair) teardown() error {
	var errs []error
	if v.created {
		if err := ipRun("link", "del", v.here); err != nil && !strings.Contains(err.Error(), "Cannot find") {
			errs = append(errs, err)
		} else {
			v.created = false
		}
	}
	if v.nsMade {
		if err := ipRun("netns", "del", v.ns); err != nil {
			errs = append(errs, err)
		} else {
			v.nsMade = false
		}
	}
	v.err = errors.Join(errs...)
	return v.err
}
