package trace_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/hcomm-go/hcomm/trace"
	"github.com/hcomm-go/hcomm/trace/report"
)

// Trace a command from its first instruction and print the syscount-style
// table (what `hcomm-trace run -- ls /` does). Needs root.
func ExampleStartCommand() {
	s, err := trace.StartCommand([]string{"ls", "/"}, trace.CommandIO{Stdout: os.Stdout}, trace.Options{})
	if errors.Is(err, trace.ErrNotPrivileged) {
		fmt.Println(err) // names the missing capabilities
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	code, err := s.Wait(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		log.Fatal(err)
	}
	s.Close() // detach and collect the last events before building the report
	r := report.New(snap, s.Meta(&code))
	report.WriteTable(os.Stdout, r, report.TableOptions{Top: 10, Header: true})
}

// Count an engine's batches in a running process for ten seconds.
func ExampleAttach() {
	s, err := trace.Attach(12345, trace.Options{})
	if err != nil {
		log.Fatal(err) // ErrProcessGone, ErrNotPrivileged, ...
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Wait(ctx)
	snap, err := s.Snapshot()
	if err != nil {
		log.Fatal(err)
	}
	if !s.Engine().Present {
		fmt.Println("engine absent:", s.Engine().Reason)
	}
	fmt.Println(snap.Engine.SubmitBatches, "batches,", snap.Engine.SubmitTransfers, "transfers")
}
