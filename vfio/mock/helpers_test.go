package mock_test

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// hostMem maps n bytes of anonymous memory off the Go heap, unmapped at the
// end of the test (after the device is closed: cleanups run last-in first-out
// and the device is always created after its memory).
func hostMem(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", n, err)
	}
	t.Cleanup(func() {
		if err := unix.Munmap(b); err != nil {
			t.Errorf("munmap: %v", err)
		}
	})
	return b
}

func newDevice(t testing.TB, cfg mock.Config) *mock.Device {
	t.Helper()
	d, err := mock.New(cfg)
	if err != nil {
		t.Fatalf("mock.New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// cpl is a decoded completion entry.
type cpl struct {
	Tag    uint64
	Status uint16
	Len    uint32
}

// rawQueue drives one queue of the mock directly through registers and ring
// memory, without the driver, so the mock's tests do not trust the driver.
type rawQueue struct {
	t       testing.TB
	bar0    vfio.Region
	q       int
	sq, cq  []byte
	entries uint32
	tail    uint32 // next SQ slot
	head    uint32 // next CQ slot
	phase   uint32
}

// Ring IOVAs of the raw queues: queue q's SQ at sqIOVA(q), CQ at cqIOVA(q).
func sqIOVA(q int) uint64 { return 0x1000_0000 + uint64(q)<<20 }
func cqIOVA(q int) uint64 { return 0x2000_0000 + uint64(q)<<20 }

// newRawQueue maps rings for queue q (SQ device-read-only, CQ
// device-write-only) and programs its registers. The device is not enabled.
func newRawQueue(t testing.TB, d *mock.Device, q int, entries uint32) *rawQueue {
	t.Helper()
	bar0, err := d.Region(vfio.RegionBAR0)
	must(t, err)
	sqLen := roundPage(int(entries) * model.DescSize)
	cqLen := roundPage(int(entries) * model.CplSize)
	sq, cq := hostMem(t, sqLen), hostMem(t, cqLen)
	must(t, d.MapDMA(sqIOVA(q), sq, vfio.DMARead))
	must(t, d.MapDMA(cqIOVA(q), cq, vfio.DMAWrite))
	must(t, bar0.Write64(model.QueueReg(q, model.QSQBase), sqIOVA(q)))
	must(t, bar0.Write32(model.QueueReg(q, model.QSQSize), entries))
	must(t, bar0.Write64(model.QueueReg(q, model.QCQBase), cqIOVA(q)))
	must(t, bar0.Write32(model.QueueReg(q, model.QCQSize), entries))
	return &rawQueue{t: t, bar0: bar0, q: q, sq: sq, cq: cq, entries: entries, phase: 1}
}

func roundPage(n int) int { return (n + 4095) &^ 4095 }

func enable(t testing.TB, d *mock.Device) {
	t.Helper()
	bar0, err := d.Region(vfio.RegionBAR0)
	must(t, err)
	must(t, bar0.Write32(model.RegControl, model.ControlEnable))
	st, err := bar0.Read32(model.RegStatus)
	must(t, err)
	if st != model.StatusReady {
		t.Fatalf("STATUS after enable = %#x, want ready", st)
	}
}

// reinit returns the host side of the queue to its initial state after a
// device reset and reprograms the queue registers.
func (r *rawQueue) reinit(sqBase, cqBase uint64) {
	clear(r.cq)
	r.tail, r.head, r.phase = 0, 0, 1
	must(r.t, r.bar0.Write64(model.QueueReg(r.q, model.QSQBase), sqBase))
	must(r.t, r.bar0.Write32(model.QueueReg(r.q, model.QSQSize), r.entries))
	must(r.t, r.bar0.Write64(model.QueueReg(r.q, model.QCQBase), cqBase))
	must(r.t, r.bar0.Write32(model.QueueReg(r.q, model.QCQSize), r.entries))
}

// put writes a descriptor into the next SQ slot without ringing.
func (r *rawQueue) put(desc model.Descriptor) {
	desc.Encode(r.sq[int(r.tail)*model.DescSize:])
	r.tail = (r.tail + 1) % r.entries
}

// putRaw writes 64 raw bytes into the next SQ slot without ringing.
func (r *rawQueue) putRaw(b []byte) {
	copy(r.sq[int(r.tail)*model.DescSize:(int(r.tail)+1)*model.DescSize], b)
	r.tail = (r.tail + 1) % r.entries
}

func (r *rawQueue) doorbell() {
	must(r.t, r.bar0.Write32(model.QueueReg(r.q, model.QSQTail), r.tail))
}

// submit writes descs and rings the doorbell once.
func (r *rawQueue) submit(descs ...model.Descriptor) {
	for _, d := range descs {
		r.put(d)
	}
	r.doorbell()
}

// poll returns the next completion if one is ready (and releases it).
func (r *rawQueue) poll() (cpl, bool) {
	e := r.cq[int(r.head)*model.CplSize:]
	w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&e[model.CplStatus])))
	if w>>16&1 != r.phase {
		return cpl{}, false
	}
	c := cpl{Tag: binary.LittleEndian.Uint64(e), Status: uint16(w), Len: binary.LittleEndian.Uint32(e[model.CplLen:])}
	r.head = (r.head + 1) % r.entries
	if r.head == 0 {
		r.phase ^= 1
	}
	must(r.t, r.bar0.Write32(model.QueueReg(r.q, model.QCQHead), r.head))
	return c, true
}

// reap waits (generously: -race on a shared 2-core machine) for n completions.
func (r *rawQueue) reap(n int) []cpl {
	r.t.Helper()
	out := make([]cpl, 0, n)
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n {
		if c, ok := r.poll(); ok {
			out = append(out, c)
			continue
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("queue %d: %d of %d completions after 20s", r.q, len(out), n)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return out
}

// none asserts that no completion arrives within d.
func (r *rawQueue) none(d time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if c, ok := r.poll(); ok {
			r.t.Fatalf("queue %d: unexpected completion %+v", r.q, c)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func allBytes(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}
