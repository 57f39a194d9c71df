package soak_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// memDiag logs, every interval until the returned stop is called, where
// the resident memory is (memBreakdown) and what the side lanes hold: the
// diagnosis behind an RSS slope (-memdiag).
func memDiag(t *testing.T, every time.Duration, sides []sideLane) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	t0 := time.Now()
	line := func() {
		m := memBreakdown()
		s := fmt.Sprintf("memdiag %6.1fs: %s", time.Since(t0).Seconds(), m)
		for _, l := range sides {
			s += "; " + l.diag()
		}
		t.Log(s)
	}
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		line()
		for {
			select {
			case <-done:
				line()
				return
			case <-tick.C:
				line()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// memUse is the resident memory by where it is mapped (/proc/self/smaps,
// KiB) and what the Go runtime says of its own (runtime/metrics, bytes).
type memUse struct {
	rss       int // every mapping's Rss
	brk       int // [heap]: glibc's main malloc arena
	arenas    int // glibc's other malloc arenas (64 MiB reserved at a 64 MiB boundary)
	goArena   int // anonymous mappings in the Go heap's address range
	anonOther int // other anonymous mappings: large mallocs, UCX's pools, thread stacks, the runtime's off-heap
	file      int // file-backed
	huge      int // hugetlb
	nArenas   int
	// The Go runtime: mapped and not released, live heap after the last GC.
	goMapped, goLive uint64
}

func (m memUse) String() string {
	return fmt.Sprintf("RSS %d KiB = brk %d + malloc arenas %d (%d) + Go range %d + other anon %d + file %d + hugetlb %d; Go mapped %d KiB, live heap %d KiB",
		m.rss, m.brk, m.arenas, m.nArenas, m.goArena, m.anonOther, m.file, m.huge, m.goMapped>>10, m.goLive>>10)
}

// goHeapLo, goHeapHi: where the Go runtime put its heap: from the 64 MiB
// heap arena of an object allocated at start-up (the runtime's first
// arena: its heap grows up from there) and 16 GiB on (a heap beyond counts
// as other anonymous memory). The runtime picks the first arena's address
// at random.
var goHeapLo, goHeapHi = func() (uint64, uint64) {
	p := uint64(uintptr(unsafe.Pointer(firstObject)))
	lo := p &^ (64<<20 - 1)
	return lo, lo + 16<<30
}()

var firstObject = new([64]byte)

func memBreakdown() memUse {
	var m memUse
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return m
	}
	type vma struct {
		start, end uint64
		perm, name string
		rss        int
		huge       bool
	}
	var vs []vma
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if se := strings.SplitN(f[0], "-", 2); len(se) == 2 && len(f) >= 5 && !strings.HasSuffix(f[0], ":") {
			s, err1 := strconv.ParseUint(se[0], 16, 64)
			e, err2 := strconv.ParseUint(se[1], 16, 64)
			if err1 == nil && err2 == nil {
				v := vma{start: s, end: e, perm: f[1]}
				if len(f) >= 6 {
					v.name = f[5]
				}
				vs = append(vs, v)
				continue
			}
		}
		if len(vs) == 0 || len(f) < 2 {
			continue
		}
		v := &vs[len(vs)-1]
		switch f[0] {
		case "Rss:":
			v.rss, _ = strconv.Atoi(f[1])
		case "KernelPageSize:":
			v.huge = f[1] != "4"
		}
	}
	const arena = 64 << 20
	for i, v := range vs {
		m.rss += v.rss
		switch {
		case v.huge:
			m.huge += v.rss
		case v.name == "[heap]":
			m.brk += v.rss
		case v.name != "" && !strings.HasPrefix(v.name, "["):
			m.file += v.rss
		case v.name != "":
			m.anonOther += v.rss // [stack], [vdso], [vvar]
		case v.start >= goHeapLo && v.start < goHeapHi:
			m.goArena += v.rss
		case v.start%arena == 0 && v.perm == "rw-p" && (v.end-v.start == arena ||
			i+1 < len(vs) && vs[i+1].start == v.end && vs[i+1].perm == "---p" && vs[i+1].end-v.start == arena):
			m.arenas += v.rss
			m.nArenas++
		default:
			m.anonOther += v.rss
		}
	}
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	m.goMapped = s[0].Value.Uint64() - s[1].Value.Uint64()
	m.goLive = s[2].Value.Uint64()
	return m
}
