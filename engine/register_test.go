package engine_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

// callerMem maps n bytes the way a caller would (not from any pool).
func callerMem(t testing.TB, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	t.Cleanup(func() { _ = unix.Munmap(m) })
	return m
}

func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

// TestRegisterRoundTrip: registered caller memory is an ordinary host
// block, used in place (same address, no copy), on the memory and the
// HDMA backend, and the caller's memory survives Unregister and Close.
func TestRegisterRoundTrip(t *testing.T) {
	const n = 64 << 10
	for _, tc := range []struct {
		name string
		be   func(t *testing.T) backend.Backend
	}{
		{"memory", func(t *testing.T) backend.Backend { return memory.New() }},
		{"hdma", func(t *testing.T) backend.Backend { return hdmaBE(t, nil, hdmadev.Config{}) }},
		{"file", func(t *testing.T) backend.Backend {
			f, err := os.OpenFile(filepath.Join(t.TempDir(), "data"), os.O_RDWR|os.O_CREATE, 0o600)
			must(t, err)
			t.Cleanup(func() { f.Close() })
			return fileBE(t, f)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := open(t, engine.Config{Backend: tc.be(t)})
			src, dst := callerMem(t, n), callerMem(t, n)
			pattern(src, 3)
			rs, err := e.Register(src)
			must(t, err)
			rd, err := e.Register(dst)
			must(t, err)
			if rs.Addr() != uintptr(unsafe.Pointer(&src[0])) || &rs.Bytes()[0] != &src[0] || rs.Len() != n {
				t.Fatalf("registered block at %#x+%d, caller memory at %p: not the same memory", rs.Addr(), rs.Len(), &src[0])
			}
			ctx := ctxT(t, 10*time.Second)
			if tc.name == "memory" {
				id, err := e.Submit(engine.Transfer{Src: engine.Host(rs), Dst: engine.Host(rd), Len: n})
				must(t, err)
				must(t, e.Wait(ctx, id))
			} else if tc.name == "file" {
				// Host → file → host, both ends the caller's memory (a
				// fixed buffer of its own when io_uring grants it).
				id, err := e.Submit(engine.Transfer{Src: engine.Host(rs), Dst: engine.FileAt(0), Len: n})
				must(t, err)
				must(t, e.Wait(ctx, id))
				id, err = e.Submit(engine.Transfer{Src: engine.FileAt(0), Dst: engine.Host(rd), Len: n})
				must(t, err)
				must(t, e.Wait(ctx, id))
			} else {
				// Host → device → host, both ends the caller's memory.
				id, err := e.Submit(engine.Transfer{Src: engine.Host(rs), Dst: engine.DeviceAt(0), Len: n})
				must(t, err)
				must(t, e.Wait(ctx, id))
				id, err = e.Submit(engine.Transfer{Src: engine.DeviceAt(0), Dst: engine.Host(rd), Len: n})
				must(t, err)
				must(t, e.Wait(ctx, id))
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("round trip through registered memory: bytes differ")
			}
			// A part of a registered block, at an offset.
			pattern(src[4096:8192], 9)
			if tc.name == "memory" {
				id, err := e.Submit(engine.Transfer{Src: engine.HostAt(rs, 4096), Dst: engine.HostAt(rd, 4096), Len: 4096})
				must(t, err)
				must(t, e.Wait(ctx, id))
				if !bytes.Equal(src, dst) {
					t.Fatal("transfer at an offset of registered memory: bytes differ")
				}
			}
			must(t, e.Unregister(rs))
			must(t, e.Unregister(rd))
			if rs.Bytes() != nil {
				t.Error("Bytes of an unregistered block: want nil")
			}
			if _, err := e.Submit(engine.Transfer{Src: engine.Host(rs), Dst: engine.Host(rd), Len: n}); !errors.Is(err, engine.ErrFreedBlock) {
				t.Errorf("submit over unregistered memory: %v, want ErrFreedBlock", err)
			}
			src[0] = 42 // still mapped: the engine unmapped nothing of the caller's
			// Registering again after Unregister works (the slot is reused).
			rs2, err := e.Register(src)
			must(t, err)
			must(t, e.Unregister(rs2))
		})
	}
}

// TestRegisterMisuse: every misuse is refused with its sentinel and
// changes nothing.
func TestRegisterMisuse(t *testing.T) {
	e := open(t, engine.Config{Backend: memory.New()})
	mem := callerMem(t, 16<<10)
	for _, tc := range []struct {
		name string
		mem  []byte
	}{
		{"empty", nil},
		{"unaligned start", mem[64:8256]},
		{"partial page", mem[:4097]},
	} {
		if _, err := e.Register(tc.mem); !errors.Is(err, hugepage.ErrBadAlign) && !errors.Is(err, hugepage.ErrInvalidSize) {
			t.Errorf("%s: Register: %v, want ErrBadAlign or ErrInvalidSize", tc.name, err)
		}
	}
	r, err := e.Register(mem)
	must(t, err)
	if err := e.Free(r); !errors.Is(err, engine.ErrForeignBlock) {
		t.Errorf("Free(registered): %v, want ErrForeignBlock", err)
	}
	pb := alloc(t, e, 4096)
	if err := e.Unregister(pb); !errors.Is(err, engine.ErrForeignBlock) {
		t.Errorf("Unregister(pool block): %v, want ErrForeignBlock", err)
	}
	if err := e.Unregister(engine.Block{}); !errors.Is(err, engine.ErrForeignBlock) {
		t.Errorf("Unregister(zero Block): %v, want ErrForeignBlock", err)
	}
	other := open(t, engine.Config{Backend: memory.New()})
	if err := other.Unregister(r); !errors.Is(err, engine.ErrForeignBlock) {
		t.Errorf("Unregister on another engine: %v, want ErrForeignBlock", err)
	}
	must(t, e.Unregister(r))
	if err := e.Unregister(r); !errors.Is(err, engine.ErrFreedBlock) {
		t.Errorf("Unregister twice: %v, want ErrFreedBlock", err)
	}
	// Still usable: the pool block and a new registration.
	r, err = e.Register(mem)
	must(t, err)
	id, err := e.Submit(engine.Transfer{Src: engine.Host(pb), Dst: engine.Host(r), Len: 4096})
	must(t, err)
	must(t, e.Wait(ctx(t), id))
	// After Close every registration is gone.
	must(t, e.Close())
	if err := e.Unregister(r); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Unregister after Close: %v, want ErrClosed", err)
	}
	mem[0] = 1 // the caller's memory is still mapped
}

func ctx(t testing.TB) context.Context { return ctxT(t, 10*time.Second) }

// TestUnregisterBusy: a transfer in flight over registered memory makes
// Unregister refuse (ErrBusy, nothing changed); once it completed,
// Unregister succeeds. Poll mode holds completions until Poll; the HDMA
// case stalls the device.
func TestUnregisterBusy(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		e := open(t, engine.Config{Backend: memory.New(), Mode: engine.ModePoll})
		mem := callerMem(t, 8192)
		r, err := e.Register(mem)
		must(t, err)
		pb := alloc(t, e, 8192)
		done := 0
		_, err = e.Submit(engine.Transfer{Src: engine.Host(r), Dst: engine.Host(pb), Len: 8192,
			Callback: func(engine.Result) {
				done++
				// The memory is free for the callback to unregister.
				if err := e.Unregister(r); err != nil {
					t.Errorf("Unregister in the callback: %v", err)
				}
			}})
		must(t, err)
		if err := e.Unregister(r); !errors.Is(err, engine.ErrBusy) {
			t.Fatalf("Unregister with a transfer in flight: %v, want ErrBusy", err)
		}
		for done == 0 {
			e.Poll()
		}
		if err := e.Unregister(r); !errors.Is(err, engine.ErrFreedBlock) {
			t.Errorf("Unregister after the callback's: %v, want ErrFreedBlock", err)
		}
	})
	t.Run("hdma", func(t *testing.T) {
		dev := newMock(t, mock.Config{})
		e := open(t, engine.Config{Backend: hdmaBE(t, dev, hdmadev.Config{})})
		mem := callerMem(t, 1<<20) // above the CPU-path threshold: DMA
		r, err := e.Register(mem)
		must(t, err)
		must(t, dev.InjectFault(mock.Fault{Kind: mock.FaultStall, Nth: 1}))
		var wg sync.WaitGroup
		wg.Add(1)
		var res error
		_, err = e.Submit(engine.Transfer{Src: engine.Host(r), Dst: engine.DeviceAt(0), Len: len(mem),
			Callback: func(x engine.Result) { res = x.Err; wg.Done() }})
		must(t, err)
		if err := e.Unregister(r); !errors.Is(err, engine.ErrBusy) {
			t.Fatalf("Unregister with a stalled transfer in flight: %v, want ErrBusy", err)
		}
		wg.Wait() // the backend times the stall out (or recovers); it ends once
		t.Logf("stalled transfer ended: %v", res)
		must(t, e.Unregister(r))
	})
}

// TestRegisterRace: submitters hammer registered memory while it is
// unregistered and registered again: every submit either runs on mapped
// memory (counted in flight, so Unregister refused meanwhile) or is refused;
// the race detector watches the bookkeeping.
func TestRegisterRace(t *testing.T) {
	e := open(t, engine.Config{Backend: memory.New(), QueueDepth: 64})
	mem := callerMem(t, 4096)
	pb := alloc(t, e, 4096)
	var cur sync.Map // "r" → engine.Block
	r, err := e.Register(mem)
	must(t, err)
	cur.Store("r", r)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, _ := cur.Load("r")
				_, err := e.Submit(engine.Transfer{Src: engine.Host(v.(engine.Block)), Dst: engine.Host(pb), Len: 4096})
				if err != nil && !errors.Is(err, engine.ErrFreedBlock) && err != engine.ErrQueueFull {
					t.Errorf("submit: %v", err)
					return
				}
			}
		}()
	}
	unregs := 0
	for i := 0; i < 200; i++ {
		v, _ := cur.Load("r")
		err := e.Unregister(v.(engine.Block))
		if errors.Is(err, engine.ErrBusy) {
			continue
		}
		must(t, err)
		unregs++
		r, err := e.Register(mem)
		must(t, err)
		cur.Store("r", r)
	}
	close(stop)
	wg.Wait()
	must(t, e.Drain(ctx(t)))
	v, _ := cur.Load("r")
	must(t, e.Unregister(v.(engine.Block)))
	t.Logf("%d of 200 unregisters went through under load", unregs)
}
