// Command hcomm-demo shows hcomm at work. For now it shows the hugepage
// arenas: which backing each policy obtains (and, never silently, why a
// preferred one was refused), the proof from /proc/self/smaps and pagemap,
// the page faults hugepages save when memory is first touched, and the pool
// handing out aligned blocks. As root it reserves the hugepages it needs and
// gives them back; unprivileged it runs what it can and says what it skipped.
//
// Each part of the demo is one section function; later the engine demo adds
// its own sections to the list in main.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// demo carries what the sections share: where to print, the hugepage
// reservations to give back at the end, and what was skipped and why.
type demo struct {
	out     io.Writer
	root    bool
	touchGB int // GiB touched in the fault comparison
	cleanup []func()
	skipped []string
}

type section struct {
	title string
	run   func(*demo) error
}

func main() {
	touch := flag.Int("touch-gib", 1, "GiB of memory each backing touches in the page-fault comparison")
	flag.Parse()
	d := &demo{out: os.Stdout, root: os.Geteuid() == 0, touchGB: max(*touch, 1)}

	sections := []section{
		{"Machine: hugepages, THP, privileges", (*demo).machine},
		{"Arenas: backing policies and fallbacks", (*demo).arenas},
		{"Page faults to touch memory: 4 KiB vs hugepages", (*demo).faults},
		{"Pool: aligned blocks over an arena", (*demo).pool},
	}

	// Give reservations back on Ctrl-C too: the demo must leave the
	// machine as it found it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		d.release()
		os.Exit(130)
	}()

	start := time.Now()
	failed := false
	for i, s := range sections {
		fmt.Fprintf(d.out, "\n== %d. %s\n", i+1, s.title)
		if err := s.run(d); err != nil {
			fmt.Fprintf(d.out, "   FAILED: %v\n", err)
			failed = true
		}
	}
	d.release()
	fmt.Fprintf(d.out, "\n== Summary\n")
	if len(d.skipped) == 0 {
		fmt.Fprintf(d.out, "   everything ran (%.1fs)\n", time.Since(start).Seconds())
	} else {
		fmt.Fprintf(d.out, "   skipped, and why:\n")
		for _, s := range d.skipped {
			fmt.Fprintf(d.out, "   - %s\n", s)
		}
		fmt.Fprintf(d.out, "   (%.1fs)\n", time.Since(start).Seconds())
	}
	if failed {
		os.Exit(1)
	}
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.out, "   "+format+"\n", args...) }

func (d *demo) skip(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.printf("SKIPPED: %s", msg)
	d.skipped = append(d.skipped, msg)
}

// release undoes the sections' reservations, last first.
func (d *demo) release() {
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i]()
	}
	d.cleanup = nil
}
