package uring

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpPair returns a connected loopback TCP pair: client as a raw fd for
// io_uring (a dup, closed at cleanup), server as a net.Conn.
func tcpPair(t *testing.T) (clientFd int, client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.FailNow()
	}
	f, err := client.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); client.Close(); server.Close() })
	return int(f.Fd()), client, server
}

// TestSocket: SEND, RECV, SEND_ZC (both completions; the receiver gets
// exactly the payload, which proves the kernel read the payload's address),
// SEND_ZC from a fixed buffer, and POLL_ADD over loopback TCP.
func TestSocket(t *testing.T) {
	u := newTestRing(t, Config{Entries: 32})
	fd, client, server := tcpPair(t)

	// SEND: 1 KiB, read by the Go side.
	payload := bytes.Repeat([]byte("hcomm-send "), 100)
	e, _ := u.NextSQE()
	e.PrepSend(fd, payload, 0)
	e.SetUserData(1)
	if c := reap(t, u, 1)[0]; int(c.Res()) != len(payload) {
		t.Fatalf("SEND: res %d (%v), want %d", c.Res(), c.Err(), len(payload))
	}
	got := make([]byte, len(payload))
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(server, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("server read after SEND: %v, equal %v", err, bytes.Equal(got, payload))
	}

	// RECV: the Go side writes, io_uring receives.
	msg := []byte("reply from the server side")
	recvBuf := make([]byte, 256)
	e, _ = u.NextSQE()
	e.PrepRecv(fd, recvBuf, 0)
	e.SetUserData(2)
	if _, err := u.Submit(); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write(msg); err != nil {
		t.Fatal(err)
	}
	if c := reap(t, u, 1)[0]; int(c.Res()) != len(msg) || !bytes.Equal(recvBuf[:c.Res()], msg) {
		t.Fatalf("RECV: res %d (%v), data %q", c.Res(), c.Err(), recvBuf[:max(c.Res(), 0)])
	}

	// SEND_ZC: 256 KiB from a long-lived buffer; two completions.
	zc := make([]byte, 256<<10)
	for i := range zc {
		zc[i] = byte(i*31 + i>>10)
	}
	received := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(zc))
		server.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := io.ReadFull(server, b)
		if err != nil {
			t.Errorf("server read after SEND_ZC: %v", err)
		}
		received <- b
	}()
	sent := 0
	for sent < len(zc) {
		e, _ = u.NextSQE()
		e.PrepSendZC(fd, zc[sent:], 0, SendZCReportUsage)
		e.SetUserData(3)
		res, notif := 0, false
		for _, c := range reap(t, u, 2) {
			if c.UserData() != 3 {
				t.Fatalf("SEND_ZC completion with user data %d", c.UserData())
			}
			switch {
			case c.Notif():
				notif = true
				t.Logf("SEND_ZC notification: res %#x (copied: %v)", uint32(c.Res()), uint32(c.Res())&NotifUsageZCCopied != 0)
			case c.More():
				if c.Res() < 0 {
					t.Fatalf("SEND_ZC: %v", c.Err())
				}
				res = int(c.Res())
			default:
				t.Fatalf("SEND_ZC: completion without MORE or NOTIF: res %d flags %#x", c.Res(), c.Flags())
			}
		}
		if !notif || res == 0 {
			t.Fatalf("SEND_ZC: result %d, notification %v", res, notif)
		}
		sent += res
	}
	if b := <-received; !bytes.Equal(b, zc) {
		t.Fatal("SEND_ZC: the receiver got different bytes than the payload")
	}

	// SEND_ZC from a registered (fixed) buffer.
	if err := u.RegisterBuffers([][]byte{zc}); err != nil {
		t.Fatal(err)
	}
	go func() {
		b := make([]byte, 4096)
		server.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(server, b); err != nil {
			t.Errorf("server read after SEND_ZC fixed: %v", err)
		}
		received <- b
	}()
	e, _ = u.NextSQE()
	e.PrepSendZCFixed(fd, zc[8192:8192+4096], 0, 0, 0)
	e.SetUserData(5)
	for _, c := range reap(t, u, 2) {
		if !c.Notif() && int(c.Res()) != 4096 {
			t.Fatalf("SEND_ZC fixed: res %d (%v)", c.Res(), c.Err())
		}
	}
	if b := <-received; !bytes.Equal(b, zc[8192:8192+4096]) {
		t.Fatal("SEND_ZC fixed: the receiver got different bytes than the payload")
	}

	// POLL_ADD: POLLIN fires once the server writes.
	e, _ = u.NextSQE()
	e.PrepPollAdd(fd, unix.POLLIN)
	e.SetUserData(4)
	if _, err := u.Submit(); err != nil {
		t.Fatal(err)
	}
	if n, _ := u.PeekCQEs(make([]CQE, 1)); n != 0 {
		t.Fatal("POLL_ADD completed before any data arrived")
	}
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if c := reap(t, u, 1)[0]; c.Res() < 0 || uint32(c.Res())&unix.POLLIN == 0 {
		t.Fatalf("POLL_ADD: res %#x (%v), want POLLIN", c.Res(), c.Err())
	}
	_ = client
}
