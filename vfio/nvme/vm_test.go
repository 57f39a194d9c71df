package nvme_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/internal/vfiotest"
	"github.com/hcomm-go/hcomm/vfio"
	"github.com/hcomm-go/hcomm/vfio/nvme"
	"github.com/hcomm-go/hcomm/vfio/nvme/spec"
)

// These tests drive QEMU's NVMe controller (1b36:0010, NVMe 1.4, a 1 GiB
// namespace of zeros, a 16 MiB CMB) through kernel VFIO and the vIOMMU:
// they run in the VM guest (make test-vm) and skip on the host ("no VFIO
// in this kernel").

const (
	qemuVendor = 0x1b36
	qemuNVMe   = 0x0010
)

func TestMain(m *testing.M) { os.Exit(testutil.RunCheckingFDs(m)) }

// env is one opened controller with a data arena mapped for DMA.
type env struct {
	addr  string
	dev   *vfio.KernelDevice
	space *vfio.DMASpace
	data  *hugepage.Arena
	iova  uint64 // of data
	c     *nvme.Controller
}

func openEnv(t *testing.T, cfg nvme.Config) *env {
	t.Helper()
	e := &env{addr: vfiotest.FindDevice(t, qemuVendor, qemuNVMe)}
	t.Cleanup(func() { e.close(t) })
	e.open(t, cfg)
	return e
}

func (e *env) open(t *testing.T, cfg nvme.Config) {
	t.Helper()
	var err error
	if e.dev, err = vfio.OpenPCI(e.addr); err != nil {
		t.Fatalf("open %s: %v", e.addr, err)
	}
	if e.space, err = vfio.NewDMASpace(e.dev, vfio.DMAConfig{}); err != nil {
		t.Fatal(err)
	}
	if e.data, err = hugepage.NewArena(hugepage.ArenaConfig{Size: 8 << 20, Populate: true}); err != nil {
		t.Fatal(err)
	}
	if e.iova, err = e.space.MapArena(e.data, vfio.DMAReadWrite); err != nil {
		t.Fatal(err)
	}
	cfg.DMA = e.space
	if e.c, err = nvme.Open(e.dev, cfg); err != nil {
		t.Fatalf("nvme.Open: %v", err)
	}
}

func (e *env) close(t *testing.T) {
	t.Helper()
	if e.c != nil {
		if err := e.c.Close(); err != nil {
			t.Errorf("close controller: %v", err)
		}
		e.c = nil
	}
	if e.space != nil {
		if err := e.space.Close(); err != nil {
			t.Errorf("unmap: %v", err)
		}
		e.space = nil
	}
	if e.dev != nil {
		if m := e.dev.DMAMappings(); len(m) != 0 {
			t.Errorf("DMA mappings left: %#x", m)
		}
		if err := e.dev.Close(); err != nil {
			t.Errorf("close device: %v", err)
		}
		e.dev = nil
	}
	if e.data != nil {
		if err := e.data.Close(); err != nil {
			t.Errorf("close arena: %v", err)
		}
		e.data = nil
	}
}

// findCtx bounds one wait for a kernel log record, apart from the test's
// own deadline.
func findCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run submits the transfers (split at MaxTransfer) as one batch: one
// doorbell, then reaps until every one completed, exactly once. It returns
// each transfer's error.
func run(t *testing.T, ctx context.Context, c *nvme.Controller, q *nvme.Queue, ts []nvme.Transfer) []error {
	t.Helper()
	errs := make([]error, len(ts))
	seen := map[uint64]int{}
	want := 0
	pending := []nvme.Transfer{}
	tags := []uint64{}
	for i, tr := range ts {
		for off := 0; off < tr.Len; off += c.MaxTransfer() {
			part := tr
			part.Len = min(tr.Len-off, c.MaxTransfer())
			part.Offset += uint64(off)
			part.IOVA += uint64(off)
			pending = append(pending, part)
			tags = append(tags, uint64(i))
		}
	}
	out := make([]nvme.Completion, q.Depth())
	for len(pending) > 0 || want > 0 {
		for len(pending) > 0 && q.Free() > 0 {
			if _, err := q.SubmitTransfer(pending[0], tags[0]<<32|uint64(len(pending))); err != nil {
				t.Fatalf("submit %+v: %v", pending[0], err)
			}
			pending, tags = pending[1:], tags[1:]
			want++
		}
		if err := q.Ring(); err != nil {
			t.Fatal(err)
		}
		if err := q.Wait(ctx); err != nil {
			t.Fatalf("%d outstanding: %v", q.Outstanding(), err)
		}
		n, err := q.Reap(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range out[:n] {
			seen[cp.Tag]++
			if seen[cp.Tag] > 1 {
				t.Fatalf("tag %#x completed twice", cp.Tag)
			}
			if err := cp.Err(); err != nil && errs[cp.Tag>>32] == nil {
				errs[cp.Tag>>32] = err
			}
			want--
		}
	}
	return errs
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

func TestVMIdentify(t *testing.T) {
	e := openEnv(t, nvme.Config{Interrupts: true})
	c := e.c
	id, ns, cp := c.Identify(), c.Namespace(), c.Cap()
	t.Logf("controller %s: VS %s, CAP %#x (MQES %d, TO %v, DSTRD %d, MPS %d..%d, CMBS %v), MSI-X vectors %d",
		e.addr, c.Version(), uint64(cp), cp.MQES(), c.ReadyTimeout(), cp.DSTRD(), cp.MPSMin(), cp.MPSMax(), cp.CMBS(), e.dev.IRQCount(vfio.IRQMSIX))
	t.Logf("identify: model %q serial %q firmware %q, MDTS %d (max transfer %d bytes), ONCS %#x, VWC %d, SGLS %#x, NN %d, SQES %#x CQES %#x",
		id.Model, id.Serial, id.Firmware, id.MDTS, c.MaxTransfer(), id.ONCS, id.VWC, id.SGLS, id.NN, id.SQES, id.CQES)
	t.Logf("namespace %d: %d blocks of %d bytes (%d MiB), format %d", ns.ID, ns.Blocks, ns.LBASize, ns.Bytes()>>20, ns.Format)
	if c.Version() < 0x10000 {
		t.Errorf("version %s", c.Version())
	}
	if id.Serial != "hcomm0" {
		t.Errorf("serial %q, want hcomm0 (tests/vm/exec.sh)", id.Serial)
	}
	if ns.LBASize != 512 || ns.Bytes() != 1<<30 {
		t.Errorf("namespace %d x %d bytes, want 1 GiB of 512-byte blocks (exec.sh's default)", ns.Blocks, ns.LBASize)
	}
	if c.MaxTransfer() < 4096 {
		t.Errorf("max transfer %d", c.MaxTransfer())
	}
}

// TestVMRoundTrip writes patterns of 512 B .. 1 MiB in one batch (PRP1
// only, PRP1+PRP2, PRP lists, a transfer over MDTS split in two), reads
// them back in another batch and compares byte for byte; guard bytes
// around each read buffer stay untouched. Interrupt-driven and polled.
func TestVMRoundTrip(t *testing.T) {
	for _, irq := range []bool{true, false} {
		name := map[bool]string{true: "MSI-X", false: "polled"}[irq]
		t.Run(name, func(t *testing.T) {
			e := openEnv(t, nvme.Config{Interrupts: irq, QueueDepth: 32})
			c, q := e.c, e.c.Queue(0)
			if irq != (q.EventFD() != nil) {
				t.Fatalf("queue eventfd %v with interrupts %v", q.EventFD(), irq)
			}
			mem := e.data.Bytes()
			cases := []struct{ n, memOff int }{
				{512, 0},
				{4096, 4096},
				{4096, 3*4096 + 4},   // dword offset: PRP1 + PRP2
				{8192, 4*4096 + 512}, // three pages: a PRP list
				{12288, 8 * 4096},    // three pages, aligned
				{64<<10 + 512, 16*4096 + 2048},
				{128 << 10, 40 * 4096},
				{512 << 10, 80 * 4096},
				{1 << 20, 256 * 4096}, // over MDTS when it is 512 KiB: two commands
			}
			half := len(mem) / 2
			var writes, reads []nvme.Transfer
			nsOff := uint64(1 << 20)
			for i, cs := range cases {
				fill(mem[cs.memOff:cs.memOff+cs.n], uint64(i+1)*0x1234+map[bool]uint64{true: 1}[irq])
				writes = append(writes, nvme.Transfer{Opcode: spec.OpWrite, Offset: nsOff, IOVA: e.iova + uint64(cs.memOff), Len: cs.n})
				reads = append(reads, nvme.Transfer{Opcode: spec.OpRead, Offset: nsOff, IOVA: e.iova + uint64(half+cs.memOff), Len: cs.n})
				nsOff += uint64(cs.n+4095) &^ 4095
			}
			ctx := ctxT(t)
			for i, err := range run(t, ctx, c, q, writes) {
				if err != nil {
					t.Fatalf("write %d (%d bytes): %v", i, cases[i].n, err)
				}
			}
			for i := half; i < len(mem); i++ {
				mem[i] = 0xa5
			}
			for i, err := range run(t, ctx, c, q, reads) {
				if err != nil {
					t.Fatalf("read %d (%d bytes): %v", i, cases[i].n, err)
				}
			}
			for _, cs := range cases {
				src, dst := mem[cs.memOff:cs.memOff+cs.n], mem[half+cs.memOff:half+cs.memOff+cs.n]
				if !bytes.Equal(src, dst) {
					at := 0
					for at < len(src) && src[at] == dst[at] {
						at++
					}
					t.Fatalf("%d bytes at memory offset %d: differ from byte %d", cs.n, cs.memOff, at)
				}
				if g := mem[half+cs.memOff-1]; cs.memOff > 0 && g != 0xa5 && !inCase(cases, cs.memOff-1) {
					t.Fatalf("guard byte before %d-byte read changed: %#x", cs.n, g)
				}
				if end := half + cs.memOff + cs.n; mem[end] != 0xa5 && !inCase(cases, cs.memOff+cs.n) {
					t.Fatalf("guard byte after %d-byte read changed: %#x", cs.n, mem[end])
				}
				t.Logf("%s: %7d bytes, memory offset %#x (IOVA %#x): written, read back, equal",
					name, cs.n, cs.memOff, e.iova+uint64(cs.memOff))
			}
			if c.Stray() != 0 {
				t.Fatalf("%d stray completions", c.Stray())
			}
		})
	}
}

func inCase(cases []struct{ n, memOff int }, off int) bool {
	for _, c := range cases {
		if off >= c.memOff && off < c.memOff+c.n {
			return true
		}
	}
	return false
}

// TestVMValidation: the driver refuses what the controller must not see.
func TestVMValidation(t *testing.T) {
	e := openEnv(t, nvme.Config{})
	c, q := e.c, e.c.Queue(0)
	size := c.Namespace().Bytes()
	ro, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	roIOVA, err := e.space.MapArena(ro, vfio.DMARead) // the device may read it, not write
	if err != nil {
		t.Fatal(err)
	}
	defer e.space.UnmapArena(ro)
	for _, tc := range []struct {
		name string
		tr   nvme.Transfer
		want error
	}{
		{"length not whole blocks", nvme.Transfer{Opcode: spec.OpRead, IOVA: e.iova, Len: 100}, nvme.ErrBadTransfer},
		{"offset not LBA aligned", nvme.Transfer{Opcode: spec.OpRead, Offset: 7, IOVA: e.iova, Len: 512}, nvme.ErrBadTransfer},
		{"beyond the namespace", nvme.Transfer{Opcode: spec.OpRead, Offset: size, IOVA: e.iova, Len: 512}, nvme.ErrBadTransfer},
		{"over MDTS", nvme.Transfer{Opcode: spec.OpRead, IOVA: e.iova, Len: c.MaxTransfer() + 512}, nvme.ErrBadTransfer},
		{"buffer not dword aligned", nvme.Transfer{Opcode: spec.OpRead, IOVA: e.iova + 2, Len: 512}, nvme.ErrBadTransfer},
		{"buffer outside the mappings", nvme.Transfer{Opcode: spec.OpRead, IOVA: 1 << 38, Len: 512}, vfio.ErrNotMapped},
		{"buffer in the driver's own queue memory", nvme.Transfer{Opcode: spec.OpRead, IOVA: c.QueueMemory().Start, Len: 512}, nvme.ErrBadTransfer},
		{"buffer running off the data arena into the queues", nvme.Transfer{Opcode: spec.OpWrite, IOVA: e.iova + 8<<20 - 512, Len: 4096}, nvme.ErrBadTransfer},
		{"read into memory the device may not write", nvme.Transfer{Opcode: spec.OpRead, IOVA: roIOVA, Len: 4096}, vfio.ErrNotMapped},
	} {
		if _, err := q.SubmitTransfer(tc.tr, 0); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	if q.Outstanding() != 0 || q.Free() != q.Depth()-1 {
		t.Fatalf("refused transfers left %d outstanding, %d free", q.Outstanding(), q.Free())
	}
	// The read-only memory is fine as a write's source.
	if _, err := q.SubmitTransfer(nvme.Transfer{Opcode: spec.OpWrite, IOVA: roIOVA, Len: 4096}, 0); err != nil {
		t.Fatalf("write from read-only memory: %v", err)
	}
	if cp := reapOne(t, ctxT(t), q); cp.Err() != nil {
		t.Fatal(cp.Err())
	}
}

// TestVMStatusErrors: error completions from the controller map to the
// sentinels.
func TestVMStatusErrors(t *testing.T) {
	e := openEnv(t, nvme.Config{Interrupts: true})
	c, q := e.c, e.c.Queue(0)
	ctx := ctxT(t)
	blocks := c.Namespace().Blocks
	beyond, _ := spec.ReadWrite(spec.OpRead, 1, blocks, 1, false)
	beyond.PRP1 = e.iova
	for _, tc := range []struct {
		name string
		cmd  spec.Command
		want error
	}{
		{"read past the last LBA", beyond, nvme.ErrLBAOutOfRange},
		{"unknown opcode 0x7e", spec.Command{Opcode: 0x7e, NSID: 1}, nvme.ErrInvalidOpcode},
		{"namespace 0", spec.Command{Opcode: spec.OpRead, NSID: 0, PRP1: e.iova}, nvme.ErrInvalidNamespace},
	} {
		if _, err := q.Submit(&tc.cmd, 1); err != nil {
			t.Fatal(err)
		}
		cp := reapOne(t, ctx, q)
		err := cp.Err()
		if !errors.Is(err, tc.want) || !errors.Is(err, nvme.ErrStatus) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	// An admin command with an invalid queue ID.
	if _, err := c.AdminCommand(ctx, spec.CreateSQ(9, 16, e.iova, 9)); !errors.Is(err, nvme.ErrCommandSpecific) {
		t.Errorf("create SQ on a missing CQ: %v, want a command specific error", err)
	} else {
		t.Logf("create SQ 9 on missing CQ 9: %v", err)
	}
}

func reapOne(t *testing.T, ctx context.Context, q *nvme.Queue) nvme.Completion {
	t.Helper()
	if err := q.Ring(); err != nil {
		t.Fatal(err)
	}
	var out [1]nvme.Completion
	for {
		if err := q.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := q.Reap(out[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return out[0]
		}
	}
}

// TestVMFlushZeroesDeallocate: Flush, Write Zeroes and Dataset Management
// when the controller offers them.
func TestVMFlushZeroesDeallocate(t *testing.T) {
	e := openEnv(t, nvme.Config{Interrupts: true})
	c, q := e.c, e.c.Queue(0)
	ctx := ctxT(t)
	mem := e.data.Bytes()
	fill(mem[:64<<10], 99)
	const off = 32 << 20
	if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpWrite, Offset: off, IOVA: e.iova, Len: 64 << 10}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, err := q.SubmitFlush(7); err != nil {
		t.Fatal(err)
	}
	if cp := reapOne(t, ctx, q); cp.Err() != nil || cp.Tag != 7 {
		t.Fatalf("flush: %+v %v", cp, cp.Err())
	}
	oncs := c.Identify().ONCS
	t.Logf("ONCS %#x: write zeroes %v, DSM %v", oncs, oncs&spec.ONCSWriteZeroes != 0, oncs&spec.ONCSDSM != 0)
	if oncs&spec.ONCSWriteZeroes != 0 {
		if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpWriteZeroes, Offset: off + 4096, Len: 8192}}); errs[0] != nil {
			t.Fatalf("write zeroes: %v", errs[0])
		}
		back := mem[1<<20 : 1<<20+64<<10]
		if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpRead, Offset: off, IOVA: e.iova + 1<<20, Len: 64 << 10}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		want := append([]byte(nil), mem[:64<<10]...)
		clear(want[4096 : 4096+8192])
		if !bytes.Equal(back, want) {
			t.Fatalf("after Write Zeroes of blocks 8..23 the data differs")
		}
		t.Logf("write zeroes: 8 KiB zeroed inside a 64 KiB pattern, the rest intact")
	}
	if oncs&spec.ONCSDSM != 0 {
		if _, err := q.SubmitDeallocate(off, 64<<10, 8); err != nil {
			t.Fatal(err)
		}
		if cp := reapOne(t, ctx, q); cp.Err() != nil {
			t.Fatalf("deallocate: %v", cp.Err())
		}
		t.Logf("dataset management (deallocate 64 KiB): success")
	}
}

// TestVMUnmappedPRP: a PRP the IOMMU does not map is blocked by the
// vIOMMU. A PRP list pointer at a stale IOVA: the controller cannot read
// the list, completes the command with an error, and writes no byte of
// host memory. A data pointer at a stale IOVA: the controller's write is
// dropped by the vIOMMU (DMAR fault) and the memory behind it is
// unchanged.
func TestVMUnmappedPRP(t *testing.T) {
	e := openEnv(t, nvme.Config{Interrupts: true})
	c, q := e.c, e.c.Queue(0)
	ctx := ctxT(t)
	mem := e.data.Bytes()
	// Known data on the namespace.
	fill(mem[:16384], 5)
	if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpWrite, Offset: 0, IOVA: e.iova, Len: 16384}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// A second arena, mapped and unmapped again: a stale IOVA, and memory
	// that must not change.
	b, err := hugepage.NewArena(hugepage.ArenaConfig{Size: 2 << 20, Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range b.Bytes() {
		b.Bytes()[i] = 0x5a
	}
	stale, err := e.space.MapArena(b, vfio.DMAReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.space.UnmapArena(b); err != nil {
		t.Fatal(err)
	}
	// The driver refuses the stale buffer itself.
	if _, err := q.SubmitTransfer(nvme.Transfer{Opcode: spec.OpRead, IOVA: stale, Len: 4096}, 0); !errors.Is(err, vfio.ErrNotMapped) {
		t.Fatalf("read into stale IOVA %#x: %v, want vfio.ErrNotMapped", stale, err)
	}

	faults := vfiotest.OpenFaultLog(t)
	// 1. PRP list at the stale IOVA; PRP1 is a good page holding a canary.
	canary := mem[1<<20 : 1<<20+4096]
	for i := range canary {
		canary[i] = 0xee
	}
	cmd, _ := spec.ReadWrite(spec.OpRead, 1, 0, 24, false) // 12 KiB: PRP1 + a list of two
	cmd.PRP1, cmd.PRP2 = e.iova+1<<20, stale
	if _, err := q.Submit(&cmd, 1); err != nil {
		t.Fatal(err)
	}
	cp := reapOne(t, ctx, q)
	if cp.Err() == nil {
		t.Fatalf("read with its PRP list at unmapped IOVA %#x completed successfully", stale)
	}
	t.Logf("PRP list at unmapped IOVA %#x: error completion: %v", stale, cp.Err())
	if !bytes.Equal(canary, bytes.Repeat([]byte{0xee}, 4096)) {
		t.Fatalf("the PRP1 page changed although the command failed")
	}
	if line, err := faults.Find(findCtx(t), e.addr, stale); err == nil {
		t.Logf("kernel: %s", line)
	} else {
		t.Errorf("the vIOMMU's fault for the PRP list: %v", err)
	}

	// 2. A data pointer at the stale IOVA (+8 KiB, another page). QEMU 7.2
	// completes this read with success: its DMA helpers drop a write the
	// IOMMU refuses (the spec would have a Data Transfer Error); the
	// vIOMMU's fault and the untouched memory are what show the block.
	bad := stale + 8192
	// The PRP list's fault alone fills the kernel's burst of fault
	// records (QEMU reads the list in 4-byte steps, each one an SMMUv3
	// event): let its rate-limit window pass.
	faults.WaitRateLimit()
	cmd, _ = spec.ReadWrite(spec.OpRead, 1, 0, 8, false)
	cmd.PRP1 = bad
	if _, err := q.Submit(&cmd, 2); err != nil {
		t.Fatal(err)
	}
	cp = reapOne(t, ctx, q)
	t.Logf("read into unmapped IOVA %#x: completion status %#x (%v)", bad, uint16(cp.Status), cp.Err())
	if line, err := faults.Find(findCtx(t), e.addr, bad); err == nil {
		t.Logf("kernel: %s", line)
	} else {
		t.Errorf("the vIOMMU's fault for the data page: %v", err)
	}
	if i := bytes.IndexFunc(b.Bytes(), func(r rune) bool { return r != 0x5a }); i >= 0 {
		t.Fatalf("memory behind the unmapped IOVA changed at byte %d", i)
	}
	// The controller still works.
	if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpRead, Offset: 0, IOVA: e.iova + 2<<20, Len: 16384}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if !bytes.Equal(mem[2<<20:2<<20+16384], mem[:16384]) {
		t.Fatal("read after the faults differs")
	}
}

// TestVMResetInFlight: a controller reset with writes in flight completes
// each exactly once (success before the reset, ErrReset after), and the
// queue works afterwards.
func TestVMResetInFlight(t *testing.T) {
	for _, irq := range []bool{true, false} {
		t.Run(map[bool]string{true: "MSI-X", false: "polled"}[irq], func(t *testing.T) {
			e := openEnv(t, nvme.Config{Interrupts: irq, QueueDepth: 64})
			c, q := e.c, e.c.Queue(0)
			ctx := ctxT(t)
			fill(e.data.Bytes()[:4<<20], 11)
			// The first half is rung (the controller works on it), the
			// second half is written into the ring but not rung yet: the
			// reset must end those with ErrReset, whatever the timing.
			n := q.Free()
			for i := range n {
				if i == n/2 {
					if err := q.Ring(); err != nil {
						t.Fatal(err)
					}
				}
				tr := nvme.Transfer{Opcode: spec.OpWrite, Offset: uint64(i) * 512 << 10, IOVA: e.iova + uint64(i%8)*512<<10, Len: 512 << 10}
				if _, err := q.SubmitTransfer(tr, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Reset(); err != nil {
				t.Fatalf("reset: %v", err)
			}
			seen := make([]int, n)
			ok, reset := 0, 0
			out := make([]nvme.Completion, 16)
			for q.Outstanding() > 0 {
				k, err := q.Reap(out)
				if err != nil {
					t.Fatal(err)
				}
				if k == 0 {
					t.Fatalf("%d outstanding after the reset, none to reap", q.Outstanding())
				}
				for _, cp := range out[:k] {
					seen[cp.Tag]++
					switch err := cp.Err(); {
					case err == nil:
						ok++
					case errors.Is(err, nvme.ErrReset):
						reset++
					default:
						t.Errorf("tag %d: %v", cp.Tag, err)
					}
				}
			}
			for tag, k := range seen {
				if k != 1 {
					t.Fatalf("tag %d completed %d times", tag, k)
				}
			}
			t.Logf("%d writes of 512 KiB outstanding at the reset (%d rung): %d completed, %d ended by the reset (ErrReset); each exactly once; resets %d",
				n, n/2, ok, reset, c.Resets())
			if reset < n-n/2 {
				t.Fatalf("%d ended by the reset, but %d were never rung", reset, n-n/2)
			}
			// No late completion from before the reset turns up.
			time.Sleep(50 * time.Millisecond)
			if q.Pending() {
				t.Fatal("a completion appeared after the reset")
			}
			// The queue works after the reset.
			mem := e.data.Bytes()
			if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpRead, Offset: 0, IOVA: e.iova + 4<<20, Len: 64 << 10}}); errs[0] != nil {
				t.Fatalf("read after reset: %v", errs[0])
			}
			// (Two batches: commands of one batch have no order.)
			if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpWrite, Offset: 512 << 20, IOVA: e.iova, Len: 64 << 10}}); errs[0] != nil {
				t.Fatalf("write after reset: %v", errs[0])
			}
			if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpRead, Offset: 512 << 20, IOVA: e.iova + 5<<20, Len: 64 << 10}}); errs[0] != nil {
				t.Fatalf("read after reset: %v", errs[0])
			}
			if !bytes.Equal(mem[5<<20:5<<20+64<<10], mem[:64<<10]) {
				t.Fatal("round trip after the reset differs")
			}
			if c.Stray() != 0 {
				t.Fatalf("%d stray completions", c.Stray())
			}
		})
	}
}

// TestVMAbort sends Abort for an outstanding command: whatever the
// controller answers, the command completes exactly once.
func TestVMAbort(t *testing.T) {
	e := openEnv(t, nvme.Config{Interrupts: true})
	c, q := e.c, e.c.Queue(0)
	ctx := ctxT(t)
	cid, err := q.SubmitTransfer(nvme.Transfer{Opcode: spec.OpRead, Offset: 0, IOVA: e.iova, Len: 512 << 10}, 42)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ring(); err != nil {
		t.Fatal(err)
	}
	aborted, err := c.Abort(ctx, q, cid)
	if err != nil {
		t.Fatalf("abort: %v", err)
	}
	cp := reapOne(t, ctx, q)
	if cp.Tag != 42 || q.Outstanding() != 0 {
		t.Fatalf("completion %+v, %d outstanding", cp, q.Outstanding())
	}
	t.Logf("abort of CID %d: controller says aborted=%v; the command completed once with %v", cid, aborted, cp.Err())
	if aborted && !errors.Is(cp.Err(), nvme.ErrAborted) {
		t.Errorf("aborted, but the command completed with %v", cp.Err())
	}
}

// TestVMCMB: the Controller Memory Buffer, enabled the NVMe 1.4 way, holds
// data the CPU wrote and the controller writes to the namespace, and
// receives data the controller reads from the namespace.
func TestVMCMB(t *testing.T) {
	e := openEnv(t, nvme.Config{Interrupts: true})
	c, q := e.c, e.c.Queue(0)
	ctx := ctxT(t)
	if !c.Cap().CMBS() {
		t.Fatalf("CAP.CMBS clear: QEMU was started with cmb_size_mb=16 (tests/vm/exec.sh)")
	}
	m, err := c.EnableCMB()
	if err != nil {
		t.Fatal(err)
	}
	sq, cq, lists, rds, wds := m.Supports()
	t.Logf("CMB: %d MiB in BAR%d at bus address %#x; SQS %v CQS %v LISTS %v RDS %v WDS %v",
		m.Size()>>20, m.BAR(), m.Addr(0), sq, cq, lists, rds, wds)
	if m.Size() != 16<<20 || len(m.Bytes()) != 16<<20 {
		t.Fatalf("CMB size %d, mapped %d", m.Size(), len(m.Bytes()))
	}
	const n = 256 << 10
	cmb := m.Bytes()
	src := make([]byte, n)
	fill(src, 77)
	copy(cmb[1<<20:], src) // CPU → CMB
	mem := e.data.Bytes()
	// CMB → namespace (the controller reads its own memory), then
	// namespace → host memory through the IOMMU.
	errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpWrite, Offset: 256 << 20, IOVA: m.Addr(1 << 20), Len: n}})
	if errs[0] != nil {
		t.Fatalf("write from the CMB: %v", errs[0])
	}
	if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpRead, Offset: 256 << 20, IOVA: e.iova, Len: n}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if !bytes.Equal(mem[:n], src) {
		t.Fatal("CMB → namespace → host: data differs")
	}
	// namespace → CMB, read by the CPU.
	clear(cmb[4<<20 : 4<<20+n])
	if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpRead, Offset: 256 << 20, IOVA: m.Addr(4 << 20), Len: n}}); errs[0] != nil {
		t.Fatalf("read into the CMB: %v", errs[0])
	}
	if !bytes.Equal(cmb[4<<20:4<<20+n], src) {
		t.Fatal("namespace → CMB: data differs")
	}
	// A reset keeps the CMB usable.
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	clear(cmb[4<<20 : 4<<20+n])
	if errs := run(t, ctx, c, q, []nvme.Transfer{{Opcode: spec.OpRead, Offset: 256 << 20, IOVA: m.Addr(4 << 20), Len: n}}); errs[0] != nil {
		t.Fatalf("read into the CMB after a reset: %v", errs[0])
	}
	if !bytes.Equal(cmb[4<<20:4<<20+n], src) {
		t.Fatal("namespace → CMB after reset: data differs")
	}
	t.Logf("%d KiB: CPU → CMB → namespace → host RAM, namespace → CMB → CPU (also after a reset): equal", n>>10)
}

// TestVMKernelCrossCheck hands the controller to the kernel's nvme driver
// and back: what the userspace driver wrote, the kernel reads from
// /dev/nvme0n1 with O_DIRECT, and what the kernel wrote, the userspace
// driver reads.
func TestVMKernelCrossCheck(t *testing.T) {
	addr := vfiotest.FindDevice(t, qemuVendor, qemuNVMe)
	e := &env{addr: addr}
	t.Cleanup(func() { e.close(t) })
	e.open(t, nvme.Config{Interrupts: true})
	ctx := ctxT(t)
	const n = 1 << 20
	const ours, theirs = 64 << 20, 128 << 20
	mem := e.data.Bytes()
	fill(mem[:n], 2024)
	want := append([]byte(nil), mem[:n]...)
	if errs := run(t, ctx, e.c, e.c.Queue(0), []nvme.Transfer{{Opcode: spec.OpWrite, Offset: ours, IOVA: e.iova, Len: n}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	e.close(t)

	var sys vfio.Sysfs
	if _, err := sys.Bind(addr, "nvme"); err != nil {
		t.Fatalf("hand %s to the kernel's nvme driver: %v", addr, err)
	}
	defer func() {
		if _, err := sys.Bind(addr, "vfio-pci"); err != nil {
			t.Errorf("give %s back to vfio-pci: %v", addr, err)
		}
	}()
	blk := waitBlock(t, addr)
	f := openBlock(t, blk)
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	if k, err := f.ReadAt(buf, ours); err != nil || k != n {
		t.Fatalf("kernel read of %s: %d, %v", blk, k, err)
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("the kernel reads other bytes than the userspace driver wrote")
	}
	t.Logf("userspace driver → kernel: 1 MiB written through VFIO at %d MiB, read by the kernel from %s (O_DIRECT): equal", ours>>20, blk)
	fill(buf, 4048)
	want2 := append([]byte(nil), buf...)
	if k, err := f.WriteAt(buf, theirs); err != nil || k != n {
		t.Fatalf("kernel write: %d, %v", k, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Bind(addr, "vfio-pci"); err != nil {
		t.Fatalf("give %s back to vfio-pci: %v", addr, err)
	}
	e.open(t, nvme.Config{Interrupts: true})
	mem = e.data.Bytes()
	clear(mem[:n])
	if errs := run(t, ctx, e.c, e.c.Queue(0), []nvme.Transfer{{Opcode: spec.OpRead, Offset: theirs, IOVA: e.iova, Len: n}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if !bytes.Equal(mem[:n], want2) {
		t.Fatal("the userspace driver reads other bytes than the kernel wrote")
	}
	t.Logf("kernel → userspace driver: 1 MiB written by the kernel (O_DIRECT) at %d MiB, read through VFIO: equal", theirs>>20)
}

// waitBlock waits for the kernel's namespace block device of the
// controller at addr.
func waitBlock(t *testing.T, addr string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/sys/bus/pci/devices/" + addr + "/nvme")
		for _, c := range ents {
			blocks, _ := os.ReadDir("/sys/bus/pci/devices/" + addr + "/nvme/" + c.Name())
			for _, b := range blocks {
				if strings.HasPrefix(b.Name(), c.Name()+"n") {
					dev := "/dev/" + b.Name()
					if _, err := os.Stat(dev); err == nil {
						return dev
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no namespace block device for %s after 60 s", addr)
	return ""
}

// openBlock opens the block device with O_DIRECT, retrying while the
// kernel is still adding the disk (ENXIO).
func openBlock(t *testing.T, blk string) *os.File {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		f, err := os.OpenFile(blk, os.O_RDWR|unix.O_DIRECT, 0)
		if err == nil {
			return f
		}
		if !errors.Is(err, unix.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("open %s: %v", blk, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestVMTeardown: closing leaves no mapping, no fd, no interrupt, and the
// controller opens again at once.
func TestVMTeardown(t *testing.T) {
	before := testutil.SnapshotFDs(t)
	addr := vfiotest.FindDevice(t, qemuVendor, qemuNVMe)
	e := &env{addr: addr}
	t.Cleanup(func() { e.close(t) })
	for i := range 3 {
		e.open(t, nvme.Config{Interrupts: i%2 == 0, IOQueues: 2})
		ctx := ctxT(t)
		for qi := range e.c.Queues() {
			if errs := run(t, ctx, e.c, e.c.Queue(qi), []nvme.Transfer{{Opcode: spec.OpRead, Offset: 0, IOVA: e.iova, Len: 8192}}); errs[0] != nil {
				t.Fatalf("cycle %d queue %d: %v", i, qi, errs[0])
			}
		}
		if err := e.c.Close(); err != nil {
			t.Fatal(err)
		}
		e.c = nil
		// The driver's own arena is gone from the DMA space; only the
		// test's data arena is left.
		if m := e.dev.DMAMappings(); len(m) != 1 {
			t.Fatalf("cycle %d: %d mappings after the controller closed, want the data arena only: %#x", i, len(m), m)
		}
		e.close(t)
		if leaked := before.Leaked(testutil.SnapshotFDs(t)); len(leaked) > 0 {
			t.Fatalf("cycle %d: leaked fds: %v", i, leaked)
		}
	}
	t.Logf("3 open/transfer/close cycles (MSI-X and polled, 2 I/O queues): no mapping, no fd left, reopened at once")
}

// TestVMHotPathAllocs: submitting, ringing and reaping allocate nothing.
func TestVMHotPathAllocs(t *testing.T) {
	e := openEnv(t, nvme.Config{})
	q := e.c.Queue(0)
	out := make([]nvme.Completion, 4)
	tr := nvme.Transfer{Opcode: spec.OpRead, Offset: 0, IOVA: e.iova, Len: 16384}
	var failed error
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := q.SubmitTransfer(tr, 1); err != nil {
			failed = err
			return
		}
		if err := q.Ring(); err != nil {
			failed = err
			return
		}
		for {
			n, err := q.Reap(out)
			if err != nil || n == 1 {
				failed = err
				return
			}
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs != 0 {
		t.Fatalf("SubmitTransfer + Ring + Reap: %v allocations per I/O", allocs)
	}
	t.Logf("SubmitTransfer (PRP list) + Ring + Reap, polled: 0 allocations per I/O")
}
