// Command hcommload runs hcomm's own packages under the tracer: the
// accuracy tests compare what they claim (their own counters, printed on
// standard output) with what the kernel saw.
//
//	hcommload ring-nop N B       N NOPs in batches of B through uring.Ring; prints enters and completions
//	hcommload engine B           B engine batches (vfio-mock device, DMA path) of i%7+1 transfers
//	                             of 4096 B; prints the engine's batches transfers bytes completed reap_batches
//	hcommload engine-time B      B engine batches of 64 transfers of 4096 B; prints ns per batch
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
	"github.com/hcomm-go/hcomm/internal/uring"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func main() {
	if len(os.Args) < 3 {
		fail("usage: hcommload MODE ARGS...")
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "ring-nop":
		if len(args) < 2 {
			fail("usage: hcommload ring-nop N B")
		}
		ringNop(atoi(args[0]), atoi(args[1]))
	case "engine":
		engineBatches(atoi(args[0]), false)
	case "engine-time":
		engineBatches(atoi(args[0]), true)
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "hcommload: "+format+"\n", a...)
	os.Exit(1)
}

func atoi(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		fail("bad number %q", s)
	}
	return v
}

// engineBatches submits b batches through the real engine (the HDMA
// backend on a vfio-mock device, DMA path only), draining after each, and prints the
// engine's own counters: batches transfers bytes completed reap_batches.
// timed: every batch has 64 transfers and it prints the ns per batch.
func engineBatches(b int, timed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := mock.New(mock.Config{})
	if err != nil {
		fail("mock.New: %v", err)
	}
	be, err := hdmadev.New(dev, hdmadev.Config{CPUThreshold: -1, CloseDevice: true})
	if err != nil {
		fail("hdmadev.New: %v", err)
	}
	eng, err := engine.Open(engine.Config{
		Backend: be, PoolSize: 8 << 20, QueueDepth: 64,
		Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K},
	})
	if err != nil {
		fail("engine.Open: %v", err)
	}
	buf, err := eng.Alloc(64 * 4096)
	if err != nil {
		fail("Alloc: %v", err)
	}
	batch := make([]engine.Transfer, 64)
	start := time.Now()
	for i := 0; i < b; i++ {
		c := i%7 + 1
		if timed {
			c = 64
		}
		for j := 0; j < c; j++ {
			batch[j] = engine.Transfer{Src: engine.HostAt(buf, j*4096), Dst: engine.DeviceAt(uint64(j) * 4096), Len: 4096}
		}
		if n, err := eng.SubmitBatchContext(ctx, batch[:c], nil); err != nil || n != c {
			fail("SubmitBatch %d: %d, %v", i, n, err)
		}
		if err := eng.Drain(ctx); err != nil {
			fail("Drain: %v", err)
		}
	}
	elapsed := time.Since(start)
	st := eng.Stats()
	if err := eng.Shutdown(ctx); err != nil {
		fail("Close: %v", err)
	}
	if timed {
		fmt.Printf("%.1f\n", float64(elapsed.Nanoseconds())/float64(b))
		return
	}
	fmt.Printf("%d %d %d %d %d\n", st.Batches, st.Transfers, st.Bytes, st.Completed, st.ReapBatches)
}

func ringNop(n, batch int) {
	u, err := uring.New(uring.Config{Entries: 128})
	if err != nil {
		fail("uring.New: %v", err)
	}
	defer u.Close()
	cqes := make([]uring.CQE, batch)
	before := u.Stats()
	for done := 0; done < n; {
		k := min(batch, n-done)
		for i := 0; i < k; i++ {
			e := u.GetSQE()
			e.PrepNop()
			e.SetUserData(uint64(done + i))
		}
		if _, err := u.Submit(); err != nil {
			fail("submit: %v", err)
		}
		for got := 0; got < k; {
			m, err := u.PeekCQEs(cqes[got:k])
			if err != nil {
				fail("peek: %v", err)
			}
			got += m
			if got < k {
				if _, err := u.SubmitAndWait(k - got); err != nil {
					fail("wait: %v", err)
				}
			}
		}
		done += k
	}
	st := u.Stats()
	fmt.Printf("%d %d\n", st.Enters-before.Enters, st.Completions-before.Completions)
}
