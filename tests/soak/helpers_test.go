package soak_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// settle waits up to 5 s for the goroutine count to come down to want.
func settle(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// hugetlbKiB is how much hugetlb memory this process maps
// (/proc/self/status HugetlbPages: the system-wide free counts move with
// every other process on the machine).
func hugetlbKiB(t *testing.T) int {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Fatal(err)
	}
	return hugeNow()
}

// countMaps counts this process's memory mappings, less those of its
// threads: a thread's stack (with its guard page) and a C malloc arena
// (glibc gives threads that call malloc, through cgo, arenas of their own:
// 64 MiB reserved at a 64 MiB boundary, at most 8 per CPU). Threads stay
// for the process's life once the runtime made them; what the lanes map and
// must unmap (pools, rings, registrations) is counted.
func countMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	type mapping struct {
		start, end uint64
		perm       string
		anon       bool
	}
	var ms []mapping
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		se := strings.SplitN(f[0], "-", 2)
		s, err1 := strconv.ParseUint(se[0], 16, 64)
		e, err2 := strconv.ParseUint(se[len(se)-1], 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		ms = append(ms, mapping{s, e, f[1], len(f) < 6})
	}
	const arena = 64 << 20
	n := 0
	for i := 0; i < len(ms); i++ {
		m := ms[i]
		if i+1 < len(ms) {
			next := ms[i+1]
			adjacent := m.anon && next.anon && m.end == next.start
			// A thread stack: a 4 KiB guard, then the stack.
			if adjacent && m.perm == "---p" && m.end-m.start == 4096 && next.perm == "rw-p" {
				i++
				continue
			}
			// A malloc arena: the part in use, then the rest reserved, 64
			// MiB in all from a 64 MiB boundary.
			if adjacent && m.start%arena == 0 && m.perm == "rw-p" && next.perm == "---p" && next.end-m.start == arena {
				i++
				continue
			}
		}
		n++
	}
	return n
}

// rssSampler reads the resident set size once a second.
type rssSampler struct {
	stopCh  chan struct{}
	done    chan struct{}
	warm    time.Duration
	t0      time.Time
	xs, ys  []float64 // minutes since start, MiB
	hugeMax int       // the most hugetlb KiB mapped at once
}

func hugeNow() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "HugetlbPages:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseFloat(f[1], 64)
	return pages * float64(os.Getpagesize()) / (1 << 20)
}

// startRSS samples RSS for a run of dur; the first quarter (at most a
// minute) is warm-up and not part of the slope.
func startRSS(dur time.Duration) *rssSampler {
	s := &rssSampler{stopCh: make(chan struct{}), done: make(chan struct{}), warm: min(dur/4, time.Minute), t0: time.Now()}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-s.stopCh:
				return
			case now := <-tick.C:
				s.hugeMax = max(s.hugeMax, hugeNow())
				if el := now.Sub(s.t0); el >= s.warm {
					s.xs = append(s.xs, el.Minutes())
					s.ys = append(s.ys, rssMiB())
				}
			}
		}
	}()
	return s
}

// stop ends sampling and returns the least-squares slope in MiB per minute.
func (s *rssSampler) stop() (slope float64, n int) {
	close(s.stopCh)
	<-s.done
	n = len(s.xs)
	if n < 2 {
		return 0, n
	}
	var sx, sy, sxx, sxy float64
	for i := range s.xs {
		sx += s.xs[i]
		sy += s.ys[i]
		sxx += s.xs[i] * s.xs[i]
		sxy += s.xs[i] * s.ys[i]
	}
	fn := float64(n)
	den := fn*sxx - sx*sx
	if den == 0 {
		return 0, n
	}
	return (fn*sxy - sx*sy) / den, n
}
