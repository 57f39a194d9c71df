package main

import (
	"bytes"
	"github.com/hcomm-go/hcomm/backend/ucx"
	"net"
	"strings"
	"testing"
)

// remoteAddr is hcomm_remote_addr of hcomm.h.
func remoteAddr(peer uint32, off uint64) uintptr {
	return remoteAddrBase | uintptr(peer)<<remotePeerShift | uintptr(off)
}

// freePort is a 127.0.0.1 port nobody listens on (bound, then closed).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

// TestRemote drives the remote target's Go half with two handles in this
// process (UCX over tcp on loopback): connect, a put into the other
// handle's pool and a get back, byte for byte, and every refusal with its
// code and a message. tests/capi/test_remote.c does the same from C across
// two processes.
func TestRemote(t *testing.T) {
	t.Setenv("UCX_TLS", "tcp")
	var msgs []string
	detail = func(m string) { msgs = append(msgs, m) }
	defer func() { detail = nil }()
	cs := newCalls()
	srv := openT(t, config{Target: targetRemote, Path: "127.0.0.1:0"}, cs.invoke)
	cli := openT(t, config{Target: targetRemote}, cs.invoke)

	buf := make([]byte, 64)
	if c := srv.listenAddr(buf); c != codeOK {
		t.Fatalf("listenAddr: %d %v", c, msgs)
	}
	addr := string(buf[:bytes.IndexByte(buf, 0)])
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("listen address %q", addr)
	}
	if c := cli.listenAddr(buf); c != codeOK || buf[0] != 0 {
		t.Errorf("listenAddr without a listener: %d, %q", c, buf)
	}
	if c := srv.listenAddr(buf[:len(addr)]); c != codeEINVAL {
		t.Errorf("listenAddr into %d bytes: %d, want EINVAL", len(addr), c)
	}

	// The server's block, and where it lies in its window.
	const n = 100 << 10
	sblk, c := srv.allocHost(n)
	if c != codeOK {
		t.Fatal(c)
	}
	off, c := srv.remoteOffset(sblk + 8)
	if c != codeOK {
		t.Fatalf("remoteOffset: %d %v", c, msgs)
	}
	off -= 8
	if _, c := srv.remoteOffset(uintptr(0x1000)); c != codeEFAULT {
		t.Errorf("remoteOffset of a foreign pointer: %d, want EFAULT", c)
	}

	peer, c := cli.connect(addr, 20000)
	if c != codeOK {
		t.Fatalf("connect %s: %d %v", addr, c, msgs)
	}
	src, _ := cli.allocHost(n)
	dst, _ := cli.allocHost(n)
	sb, _, _ := cli.host.at(src)
	db, _, _ := cli.host.at(dst)
	srvb, _, _ := srv.host.at(sblk)
	for i := range sb.Bytes()[:n] {
		sb.Bytes()[i] = byte(i*7 + i>>9)
	}
	do := func(from, to uintptr, k uintptr) {
		t.Helper()
		id, c := cli.submit(from, to, k, 0, 0)
		if c != codeOK {
			t.Fatalf("submit %#x → %#x: %d %v", from, to, c, msgs)
		}
		if c := cli.wait(id, 20000); c != codeOK {
			t.Fatalf("wait: %d", c)
		}
	}
	do(src, remoteAddr(peer, off), n)
	if !bytes.Equal(srvb.Bytes()[:n], sb.Bytes()[:n]) {
		t.Fatal("the put's bytes are not in the server's block")
	}
	do(remoteAddr(peer, off+1), dst+1, n-1)
	if !bytes.Equal(db.Bytes()[1:n], sb.Bytes()[1:n]) {
		t.Fatal("the get did not bring the bytes back")
	}

	window := cli.ucx.Peers()[peer].Size
	for _, tc := range []struct {
		name     string
		src, dst uintptr
		k        uintptr
		want     int32
	}{
		{"past the window", src, remoteAddr(peer, window-64), 128, codeEFAULT},
		{"get past the window", remoteAddr(peer, window), dst, 1, codeEFAULT},
		{"unknown peer", src, remoteAddr(peer+7, 0), 64, codeENXIO},
		{"host to host", src, dst, 64, codeEOPNOTSUPP},
		{"remote to remote", remoteAddr(peer, 0), remoteAddr(peer, 4096), 64, codeEOPNOTSUPP},
		{"device address", src, devAddrBase, 64, codeEFAULT},
		{"above notification space", src, notifyAddrEnd, 64, codeEFAULT},
		{"notification too large", src, notifyAddrBase | uintptr(peer)<<remotePeerShift, ucx.MaxNotify + 1, codeEINVAL},
		{"inside notification space", src, notifyAddrBase | uintptr(peer)<<remotePeerShift | 8, 8, codeEFAULT},
		{"notification to an unknown peer", src, notifyAddrBase | uintptr(peer+7)<<remotePeerShift, 8, codeENXIO},
		{"get from a notification address", notifyAddrBase | uintptr(peer)<<remotePeerShift, dst, 8, codeEINVAL},
	} {
		msgs = msgs[:0]
		if id, c := cli.submit(tc.src, tc.dst, tc.k, 0, 0); c != tc.want || id != 0 {
			t.Errorf("%s: code %d id %d, want %d (%v)", tc.name, c, id, tc.want, msgs)
		} else if len(msgs) == 0 {
			t.Errorf("%s: no message for hcomm_last_error", tc.name)
		}
	}
	// A batch with one bad remote range: refused whole.
	ts := []cTransfer{
		{Src: src, Dst: remoteAddr(peer, off), Size: 64},
		{Src: src, Dst: remoteAddr(peer, window-1), Size: 2},
	}
	if c := cli.submitBatch(ts); c != codeEFAULT || ts[0].ID != 0 || ts[1].ID != 0 {
		t.Errorf("batch with a bad range: %d, ids %d %d; want EFAULT and nothing submitted", c, ts[0].ID, ts[1].ID)
	}

	// Connect refusals.
	for _, tc := range []struct {
		addr string
		want int32
	}{
		{"nonsense", codeEINVAL},
		{"localhost:1", codeEINVAL},
		{freePort(t), codeECONNREFUSED},
	} {
		if _, c := cli.connect(tc.addr, 20000); c != tc.want {
			t.Errorf("connect(%q): %d, want %d", tc.addr, c, tc.want)
		}
	}
	other := openT(t, config{Target: targetMemory}, cs.invoke)
	for name, c := range map[string]int32{
		"connect":       func() int32 { _, c := other.connect(addr, 1000); return c }(),
		"disconnect":    other.disconnect(0),
		"listen_addr":   other.listenAddr(buf),
		"remote_offset": func() int32 { p, _ := other.allocHost(64); _, c := other.remoteOffset(p); return c }(),
	} {
		if c != codeEOPNOTSUPP {
			t.Errorf("%s on the memory target: %d, want EOPNOTSUPP", name, c)
		}
	}

	// Disconnected: refused with ECONNRESET; an ID never given: ENXIO.
	if c := cli.disconnect(peer + 100); c != codeENXIO {
		t.Errorf("disconnect of an unknown peer: %d, want ENXIO", c)
	}
	if c := cli.disconnect(peer); c != codeOK {
		t.Fatalf("disconnect: %d", c)
	}
	if _, c := cli.submit(src, remoteAddr(peer, off), 64, 0, 0); c != codeECONNRESET {
		t.Errorf("submit to a disconnected peer: %d, want ECONNRESET", c)
	}
	// Reconnect: a new ID, and it works.
	p2, c := cli.connect(addr, 20000)
	if c != codeOK || p2 == peer {
		t.Fatalf("reconnect: %d, peer %d (was %d)", c, p2, peer)
	}
	do(remoteAddr(p2, off), dst, 4096)
	if !bytes.Equal(db.Bytes()[:4096], sb.Bytes()[:4096]) {
		t.Fatalf("get after reconnect: %x", db.Bytes()[:16])
	}
}
