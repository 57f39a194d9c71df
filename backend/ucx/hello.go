package ucx

/*
#include "hc.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// helloTable is a hello's arena table as hc_parse_hello read it (tests).
type helloTable struct {
	start, len, base []uint64
	keys             [][2]int // offset and length of each key in the message
	addr             [2]int   // the worker address's
}

// parseHello checks a peer's hello as hc_import does before any UCX call
// (hc_parse_hello): a well-formed one gives its table, anything else an
// error wrapping ErrProtocol. FuzzHello's entry point.
func parseHello(msg []byte) (helloTable, error) {
	var h C.hc_hello
	var p *C.uint8_t
	if len(msg) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&msg[0]))
	}
	if st := C.hc_parse_hello(p, C.size_t(len(msg)), &h); st != 0 {
		return helloTable{}, fmt.Errorf("ucx: hello of %d bytes: %s: %w", len(msg), ucsString(st), ErrProtocol)
	}
	var t helloTable
	for i := 0; i < int(h.narenas); i++ {
		t.start = append(t.start, uint64(h.start[i]))
		t.len = append(t.len, uint64(h.len[i]))
		t.base = append(t.base, uint64(h.base[i]))
		t.keys = append(t.keys, [2]int{int(h.keyoff[i]), int(h.keylen[i])})
	}
	t.addr = [2]int{int(h.addroff), int(h.addrlen)}
	return t, nil
}

// mangleHello makes this backend send broken hellos from now on (kind is
// one of C's HC_MANGLE_*): a lying peer, for tests.
func (b *Backend) mangleHello(kind int) {
	b.mu.Lock()
	b.be.hello_mangle = C.int(kind)
	b.mu.Unlock()
}

// mangleKinds is how many kinds of broken hello mangleHello knows, plus one.
const mangleKinds = C.HC_MANGLE_N
