package ucx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"
)

// hc.c's HC_MAGIC and HC_VERSION.
const (
	helloMagic   = 0x58554348
	helloVersion = 1
)

// helloBytes builds a hello as send_hello does: arenas of the given
// lengths laid end to end, a key of keyLen bytes each, a worker address
// of addrLen bytes.
func helloBytes(lens []uint64, keyLen, addrLen int) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, helloMagic)
	b = le.AppendUint32(b, helloVersion)
	b = le.AppendUint32(b, uint32(len(lens)))
	var start uint64
	for i, n := range lens {
		b = le.AppendUint64(b, start)
		b = le.AppendUint64(b, n)
		b = le.AppendUint64(b, 0x7f0000000000+uint64(i)<<32)
		b = le.AppendUint32(b, uint32(keyLen))
		for k := 0; k < keyLen; k++ {
			b = append(b, byte(k))
		}
		start += n
	}
	b = le.AppendUint32(b, uint32(addrLen))
	for k := 0; k < addrLen; k++ {
		b = append(b, byte(k))
	}
	return b
}

// TestParseHello: well-formed hellos parse to their table; truncated,
// oversized and lying ones are refused with ErrProtocol.
func TestParseHello(t *testing.T) {
	good := helloBytes([]uint64{4 << 20, 4 << 20}, 40, 100)
	le := binary.LittleEndian
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		msg  []byte
		ok   bool
	}{
		{"two arenas", good, true},
		{"no arena", helloBytes(nil, 0, 8), true},
		{"64 arenas", helloBytes(make64(), 8, 8), true},
		{"empty", nil, false},
		{"header only", good[:12], false},
		{"truncated in a key", good[:12+28+10], false},
		{"truncated address", good[:len(good)-1], false},
		{"trailing byte", append(append([]byte(nil), good...), 0), false},
		{"bad magic", mut(func(b []byte) []byte { b[0] ^= 1; return b }), false},
		{"bad version", mut(func(b []byte) []byte { le.PutUint32(b[4:], 2); return b }), false},
		{"65 arenas", mut(func(b []byte) []byte { le.PutUint32(b[8:], 65); return b }), false},
		{"count larger than the table", mut(func(b []byte) []byte { le.PutUint32(b[8:], 3); return b }), false},
		{"key longer than the message", mut(func(b []byte) []byte { le.PutUint32(b[12+24:], 1<<31); return b }), false},
		{"empty key", helloBytes([]uint64{4096}, 0, 8), false},
		{"arenas overlap", mut(func(b []byte) []byte { le.PutUint64(b[12:], 8); return b }), false},
		{"second arena inside the first", mut(func(b []byte) []byte { le.PutUint64(b[12+28+40:], 1<<20); return b }), false},
		{"a hole between arenas (one removed)", mut(func(b []byte) []byte { le.PutUint64(b[12+28+40:], 5<<20); return b }), true},
		{"window ends past 2^64", mut(func(b []byte) []byte { le.PutUint64(b[12+28+40:], ^uint64(0)-100); return b }), false},
		{"empty arena", mut(func(b []byte) []byte { le.PutUint64(b[12+8:], 0); return b }), false},
		{"base range wraps", mut(func(b []byte) []byte { le.PutUint64(b[12+16:], ^uint64(0)-10); return b }), false},
		{"window wraps", helloBytes([]uint64{1 << 63, 1 << 63}, 8, 8), false},
		{"empty address", helloBytes([]uint64{4096}, 8, 0), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab, err := parseHello(c.msg)
			if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrProtocol)) {
				t.Fatalf("parseHello: %v (%+v), want ok=%v or ErrProtocol", err, tab, c.ok)
			}
			if err == nil {
				checkTable(t, c.msg, tab)
			}
		})
	}
}

func make64() []uint64 {
	l := make([]uint64, 64)
	for i := range l {
		l[i] = 64 << 10
	}
	return l
}

// checkTable holds what hc_import relies on for an accepted hello.
func checkTable(t *testing.T, msg []byte, tab helloTable) {
	t.Helper()
	if len(tab.start) > 64 {
		t.Fatalf("%d arenas", len(tab.start))
	}
	var start uint64
	for i := range tab.start {
		if tab.start[i] < start || tab.len[i] == 0 || tab.base[i]+tab.len[i] < tab.base[i] || start+tab.len[i] < start {
			t.Fatalf("arena %d: start %d len %d base %#x after %d", i, tab.start[i], tab.len[i], tab.base[i], start)
		}
		start = tab.start[i] + tab.len[i]
		if k := tab.keys[i]; k[1] == 0 || k[0] < 0 || k[0]+k[1] > len(msg) {
			t.Fatalf("arena %d: key %v outside the %d-byte message", i, k, len(msg))
		}
	}
	if a := tab.addr; a[1] == 0 || a[0]+a[1] != len(msg) {
		t.Fatalf("address %v, message %d bytes", a, len(msg))
	}
}

// FuzzHello: whatever a peer sends as its hello, hc_parse_hello either
// refuses it with ErrProtocol or returns a table whose arenas, keys and
// address lie inside the message (never a crash, never a read past it).
func FuzzHello(f *testing.F) {
	f.Add(helloBytes([]uint64{4 << 20, 4 << 20}, 40, 100))
	f.Add(helloBytes(nil, 0, 8))
	f.Add(helloBytes(make64(), 8, 8))
	f.Add(helloBytes([]uint64{4096}, 8, 8)[:30])
	f.Fuzz(func(t *testing.T, msg []byte) {
		tab, err := parseHello(msg)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		checkTable(t, msg, tab)
	})
}

// TestBadHello: peers whose hellos are truncated, claim more arenas than
// exist, lie about a key's length or an arena's offset, or carry trailing
// bytes are refused — Connect fails with ErrProtocol (and ErrConnect), the
// connection is closed — and nothing else is disturbed: a peer connected
// before still transfers, and a good peer connects after.
func TestBadHello(t *testing.T) {
	addr, _ := startPeer(t, "tcp")
	r := newRig(t, "tcp", 8)
	good := connect(t, r.b, addr)
	for kind := 1; kind < mangleKinds; kind++ {
		t.Run(fmt.Sprint("mangle", kind), func(t *testing.T) {
			bad, _ := startPeer(t, "tcp", fmt.Sprintf("HCOMM_UCX_PEER_MANGLE=%d", kind))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := r.b.Connect(ctx, bad)
			if !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrConnect) {
				t.Fatalf("Connect to a peer with a broken hello: %v, want ErrProtocol and ErrConnect", err)
			}
			ps := r.b.Peers()
			if last := ps[len(ps)-1]; last.Ready || !errors.Is(last.Failed, ErrPeerGone) {
				t.Fatalf("the refused peer: %+v", last)
			}
			copy(r.mem, "still here")
			xs := []xfer{{put: true, peer: good, local: 0, remote: 64, n: 10}, {peer: good, local: 100, remote: 64, n: 10}}
			r.mustOK(r.run(xs[:1]), xs[:1])
			r.mustOK(r.run(xs[1:]), xs[1:])
			if string(r.mem[100:110]) != "still here" {
				t.Fatalf("the good peer after a refused one: %q", r.mem[100:110])
			}
		})
	}
	addr2, _ := startPeer(t, "tcp")
	connect(t, r.b, addr2)
}
