// Command remoteload runs the engine on backend/ucx (a cgo package: this
// helper is built with cgo, unlike trace's other helpers) for the tracer's
// remote-path test (trace/remote_linux_test.go).
//
//	remoteload peer            an engine whose pool peers reach: prints "ADDR ip:port",
//	                           serves until standard input closes
//	remoteload remote ADDR B   connects to ADDR and submits B engine batches of i%7+1
//	                           transfers of 4096 B (puts and gets alternating), draining
//	                           after each; prints the engine's batches transfers bytes
//	                           completed reap_batches remote_transfers
//
// UCX_TLS comes from the environment (the test sets tcp).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/hcomm-go/hcomm/backend/ucx"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/hugepage"
)

func main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == "peer":
		peer()
	case len(os.Args) == 4 && os.Args[1] == "remote":
		b, err := strconv.Atoi(os.Args[3])
		if err != nil {
			fail("bad number %q", os.Args[3])
		}
		remote(os.Args[2], b)
	default:
		fail("usage: remoteload peer | remoteload remote ADDR B")
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "remoteload: "+format+"\n", a...)
	os.Exit(1)
}

// open opens an engine with an 8 MiB pool (no hugepages needed) on a new
// UCX backend listening on listen ("" for none).
func open(listen string) (*engine.Engine, *ucx.Backend) {
	b, err := ucx.New(ucx.Config{Listen: listen})
	if err != nil {
		fail("ucx.New: %v", err)
	}
	eng, err := engine.Open(engine.Config{
		Backend: b, PoolSize: 8 << 20, QueueDepth: 64,
		Backings: []hugepage.Backing{hugepage.BackingTHP, hugepage.Backing4K},
	})
	if err != nil {
		fail("engine.Open: %v", err)
	}
	return eng, b
}

func peer() {
	eng, b := open("127.0.0.1:0")
	fmt.Printf("ADDR %s\n", b.Addr())
	io.Copy(io.Discard, os.Stdin)
	if err := eng.Close(); err != nil {
		fail("Close: %v", err)
	}
}

func remote(addr string, batches int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eng, b := open("")
	p, err := b.Connect(ctx, addr)
	if err != nil {
		fail("Connect: %v", err)
	}
	buf, err := eng.Alloc(7 * 4096)
	if err != nil {
		fail("Alloc: %v", err)
	}
	batch := make([]engine.Transfer, 7)
	for i := 0; i < batches; i++ {
		c := i%7 + 1
		for j := 0; j < c; j++ {
			host, rem := engine.HostAt(buf, j*4096), engine.Remote(p, uint64(j)*4096)
			if j%2 == 0 {
				batch[j] = engine.Transfer{Src: host, Dst: rem, Len: 4096}
			} else {
				batch[j] = engine.Transfer{Src: rem, Dst: host, Len: 4096}
			}
		}
		if n, err := eng.SubmitBatchContext(ctx, batch[:c], nil); err != nil || n != c {
			fail("SubmitBatch %d: %d, %v", i, n, err)
		}
		if err := eng.Drain(ctx); err != nil {
			fail("Drain: %v", err)
		}
	}
	st := eng.Stats()
	if err := eng.Shutdown(ctx); err != nil {
		fail("Shutdown: %v", err)
	}
	fmt.Printf("%d %d %d %d %d %d\n", st.Batches, st.Transfers, st.Bytes, st.Completed, st.ReapBatches,
		st.Paths[engine.PathRemote].Transfers)
}
