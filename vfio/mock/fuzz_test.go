package mock_test

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"runtime"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/hdma/model"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// The fuzz harness's address space. Host memory is one CPU allocation of
// eight pages; the IOMMU maps some of them, the others are guard pages that
// the device must never touch:
//
//	page 0  guard
//	page 1  IOVA fuzzA      RW  ┐ IOVA-contiguous, two mappings
//	page 2  IOVA fuzzA+4K   RW  │ (A is one 2-page mapping)
//	page 3  IOVA fuzzA+8K   R   ┘ (B)
//	page 4  guard           (IOVA fuzzA+12K is a hole)
//	page 5  IOVA fuzzA+16K  W   (C)
//	page 6  guard
//	page 7  guard
//
// plus the rings: the SQ page device-read-only, the CQ page device-write-only.
const (
	fuzzA       = 0x100000
	fuzzDevMem  = 64 << 10
	fuzzMaxLen  = 128 << 10 // above the device-memory size, so bounds checks are reachable
	fuzzEntries = 64
)

type fuzzPage struct {
	iova uint64
	page int // index in host memory
	acc  vfio.Access
}

var fuzzPages = []fuzzPage{
	{fuzzA, 1, vfio.DMAReadWrite},
	{fuzzA + 0x1000, 2, vfio.DMAReadWrite},
	{fuzzA + 0x2000, 3, vfio.DMARead},
	{fuzzA + 0x4000, 5, vfio.DMAWrite},
}

// fuzzRig is one device and its memory, shared by every input of a fuzzing
// process, with shadow copies that an independent oracle keeps up to date.
type fuzzRig struct {
	d                *mock.Device
	q                *rawQueue
	bar0             vfio.Region
	host, devmem     []byte
	shHost, shDevmem []byte
	tag              uint64
}

func newFuzzRig(t testing.TB) *fuzzRig {
	d := newDevice(t, mock.Config{DevMemSize: fuzzDevMem, MaxTransfer: fuzzMaxLen, Queues: 1})
	r := &fuzzRig{d: d, q: newRawQueue(t, d, 0, fuzzEntries)}
	r.bar0, _ = d.Region(vfio.RegionBAR0)
	bar2, _ := d.Region(vfio.RegionBAR2)
	r.devmem = bar2.Mapped()
	r.host = hostMem(t, 8*4096)
	for i := range r.host {
		r.host[i] = byte(i*13 + i>>12)
	}
	for i := range r.devmem {
		r.devmem[i] = byte(i * 7)
	}
	must(t, d.MapDMA(fuzzA, r.host[4096:3*4096], vfio.DMAReadWrite))
	must(t, d.MapDMA(fuzzA+0x2000, r.host[3*4096:4*4096], vfio.DMARead))
	must(t, d.MapDMA(fuzzA+0x4000, r.host[5*4096:6*4096], vfio.DMAWrite))
	r.shHost = append([]byte(nil), r.host...)
	r.shDevmem = append([]byte(nil), r.devmem...)
	enable(t, d)
	return r
}

// oraclePage returns what the IOMMU should allow at addr, written apart from
// the mock's table walk: a page-by-page lookup in fuzzPages and the rings.
// mem is nil for ring pages (the oracle reads the SQ from the queue memory).
func (r *fuzzRig) oraclePage(addr uint64) (mem []byte, acc vfio.Access) {
	page := addr &^ 0xfff
	for _, p := range fuzzPages {
		if p.iova == page {
			return r.shHost[p.page*4096 : (p.page+1)*4096], p.acc
		}
	}
	if page == sqIOVA(0) {
		return r.q.sq, vfio.DMARead
	}
	if page == cqIOVA(0) {
		return nil, vfio.DMAWrite
	}
	return nil, 0
}

// oracleCheck returns the first address of [addr, addr+n) the IOMMU must
// refuse for access acc, if any.
func (r *fuzzRig) oracleCheck(addr, n uint64, acc vfio.Access) (uint64, bool) {
	end := addr + n
	for a := addr; a < end; a = (a &^ 0xfff) + 0x1000 {
		if _, pa := r.oraclePage(a); pa&acc != acc {
			return a, false
		}
		if a&^0xfff == ^uint64(0)&^0xfff {
			break
		}
	}
	return 0, true
}

// oracle computes the expected completion of a descriptor and applies its
// expected effect to the shadows.
func (r *fuzzRig) oracle(raw []byte) (status uint16, n uint32, faultAddr uint64) {
	op, flags := raw[0], raw[1]
	rsvd := binary.LittleEndian.Uint16(raw[2:])
	l := uint64(binary.LittleEndian.Uint32(raw[4:]))
	src := binary.LittleEndian.Uint64(raw[16:])
	dst := binary.LittleEndian.Uint64(raw[24:])
	if rsvd != 0 || flags > 1 || !bytes.Equal(raw[32:64], make([]byte, 32)) {
		return model.StatusBadDesc, 0, 0
	}
	if op == model.OpFence {
		if l != 0 || src != 0 || dst != 0 {
			return model.StatusBadDesc, 0, 0
		}
		return model.StatusOK, 0, 0
	}
	if op < model.OpH2D || op > model.OpD2D || l == 0 || l > fuzzMaxLen {
		return model.StatusBadDesc, 0, 0
	}
	if _, c := bits.Add64(src, l, 0); c != 0 {
		return model.StatusBadDesc, 0, 0
	}
	if _, c := bits.Add64(dst, l, 0); c != 0 {
		return model.StatusBadDesc, 0, 0
	}
	inDev := func(off uint64) bool { return off < fuzzDevMem && off+l <= fuzzDevMem }
	switch op {
	case model.OpH2D:
		if !inDev(dst) {
			return model.StatusDevMemBound, 0, 0
		}
		if fa, ok := r.oracleCheck(src, l, vfio.DMARead); !ok {
			return model.StatusIOMMUFault, 0, fa
		}
		for i := uint64(0); i < l; i++ {
			mem, _ := r.oraclePage(src + i)
			r.shDevmem[dst+i] = mem[(src+i)&0xfff]
		}
	case model.OpD2H:
		if !inDev(src) {
			return model.StatusDevMemBound, 0, 0
		}
		if fa, ok := r.oracleCheck(dst, l, vfio.DMAWrite); !ok {
			return model.StatusIOMMUFault, 0, fa
		}
		for i := uint64(0); i < l; i++ {
			if mem, _ := r.oraclePage(dst + i); mem != nil && (dst+i)&^0xfff != sqIOVA(0) {
				mem[(dst+i)&0xfff] = r.shDevmem[src+i]
			}
		}
	case model.OpD2D:
		if !inDev(src) || !inDev(dst) {
			return model.StatusDevMemBound, 0, 0
		}
		copy(r.shDevmem[dst:dst+l], r.shDevmem[src:src+l])
	}
	return model.StatusOK, uint32(l), 0
}

// run submits one descriptor through the device's ring and checks the
// completion and every byte of host and device memory against the oracle.
func (r *fuzzRig) run(t *testing.T, raw []byte) {
	r.q.t = t
	r.tag++
	binary.LittleEndian.PutUint64(raw[8:], r.tag)
	before := r.d.QueueCounters(0).Completions
	r.q.putRaw(raw)
	// The oracle runs after the descriptor is in the SQ: a descriptor may
	// read the (device-readable) SQ page, itself included.
	status, n, fa := r.oracle(raw)
	r.q.doorbell()
	deadline := time.Now().Add(20 * time.Second)
	for r.d.QueueCounters(0).Completions == before {
		if time.Now().After(deadline) {
			t.Fatalf("no completion in 20s for %x", raw)
		}
		runtime.Gosched()
	}
	c, ok := r.q.poll()
	if !ok {
		t.Fatalf("completion counted but not visible in the ring")
	}
	if c.Tag != r.tag || c.Status != status || c.Len != n {
		t.Fatalf("descriptor %x: completion %+v, oracle says status %d len %d", raw, c, status, n)
	}
	if status == model.StatusIOMMUFault {
		got, err := r.bar0.Read64(model.RegFaultAddr)
		must(t, err)
		if got != fa {
			t.Fatalf("descriptor %x: FAULT_ADDR %#x, oracle %#x", raw, got, fa)
		}
	}
	if !bytes.Equal(r.host, r.shHost) {
		for i := range r.host {
			if r.host[i] != r.shHost[i] {
				t.Fatalf("descriptor %x: host byte %#x (page %d) is %#x, oracle %#x", raw, i, i/4096, r.host[i], r.shHost[i])
			}
		}
	}
	if !bytes.Equal(r.devmem, r.shDevmem) {
		t.Fatalf("descriptor %x: device memory differs from the oracle", raw)
	}
	if st, _ := r.bar0.Read32(model.RegStatus); st != model.StatusReady {
		t.Fatalf("descriptor %x: device STATUS %#x", raw, st)
	}
}

// FuzzDescriptor throws hostile descriptors at the device — any opcode,
// flags, reserved bits, lengths up to 4 GiB, addresses anywhere including
// ranges that wrap 2^64 or straddle the end of a mapping or a permission
// boundary — and checks each against an independent oracle: the right
// status, the right FAULT_ADDR, and not one byte of host memory (mapped or
// guard) or device memory different from what the oracle predicts. A read
// outside the map shows up as wrong data in device memory, a write as a
// changed guard byte; a bounds bug panics.
func FuzzDescriptor(f *testing.F) {
	type seed struct {
		op, flags uint8
		rsvd      uint16
		n         uint32
		src, dst  uint64
		reserved  []byte
	}
	for _, s := range []seed{
		{model.OpH2D, 0, 0, 64, fuzzA, 0, nil},
		{model.OpH2D, 1, 0, 3 * 4096, fuzzA, 100, nil},               // spans A and B
		{model.OpH2D, 0, 0, 4096, fuzzA + 0x2800, 0, nil},            // straddles B's end into the hole
		{model.OpD2H, 0, 0, 8192, 0, fuzzA + 0x1000, nil},            // into read-only B
		{model.OpD2H, 0, 0, 64, 0, fuzzA + 0x4fe0, nil},              // straddles C's end
		{model.OpD2H, 0, 0, 64, 0, cqIOVA(0) + 2048, nil},            // into the CQ page
		{model.OpD2H, 0, 0, 64, 0, sqIOVA(0), nil},                   // into the read-only SQ
		{model.OpH2D, 0, 0, 64, sqIOVA(0), 0, nil},                   // reads the SQ
		{model.OpD2D, 0, 0, 4096, 0, 100, nil},                       // overlapping
		{model.OpD2D, 0, 0, fuzzDevMem, 0, 1, nil},                   // one past the end
		{model.OpH2D, 0, 0, ^uint32(0), fuzzA, 0, nil},               // huge
		{model.OpH2D, 0, 0, 64, ^uint64(0) - 31, 0, nil},             // wraps
		{model.OpD2H, 0, 0, 16, 0, ^uint64(0) - 15, nil},             // ends exactly at 2^64
		{model.OpFence, 0, 0, 0, 0, 0, nil},                          // fence
		{model.OpFence, 0, 0, 1, 0, 0, nil},                          // fence with length
		{9, 0, 0, 64, fuzzA, 0, nil},                                 // unknown opcode
		{model.OpH2D, 0x80, 0, 64, fuzzA, 0, nil},                    // unknown flag
		{model.OpH2D, 0, 1, 64, fuzzA, 0, nil},                       // reserved u16
		{model.OpH2D, 0, 0, 64, fuzzA, 0, []byte{0, 0, 0, 1}},        // reserved bytes
		{model.OpH2D, 0, 0, fuzzMaxLen, fuzzA, 0, nil},               // max length, past devmem
		{model.OpD2H, 0, 0, 0x1001, fuzzDevMem - 0x1001, fuzzA, nil}, // last bytes of devmem
	} {
		f.Add(s.op, s.flags, s.rsvd, s.n, s.src, s.dst, s.reserved)
	}
	// One device per fuzzing process, shared by every input (inputs run
	// one at a time in a process).
	rig := newFuzzRig(f)
	f.Fuzz(func(t *testing.T, op, flags uint8, rsvd uint16, n uint32, src, dst uint64, reserved []byte) {
		var raw [model.DescSize]byte
		d := model.Descriptor{Opcode: op, Flags: flags, Rsvd: rsvd, Len: n, Src: src, Dst: dst}
		d.Encode(raw[:])
		copy(raw[model.DescReserved:], reserved)
		rig.run(t, raw[:])
	})
}
