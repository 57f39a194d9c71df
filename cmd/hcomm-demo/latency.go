package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/cmd/internal/figures"
	"github.com/hcomm-go/hcomm/engine"
)

// latSamples is how many synchronous transfers one repetition times.
const latSamples = 2000

// syncPath performs one synchronous 4 KiB host→device transfer per call:
// it returns when the bytes are in device memory.
type syncPath struct {
	name  string
	desc  string
	one   func(i int) error
	close func() error
}

// openSyncEngine: the simplest use of the engine — its default mode (a
// reaper for callbacks; the waiter reaps its own completion), Submit of
// one 4 KiB block, then Wait for it.
func openSyncEngine() (*syncPath, error) {
	_, e, closeAll, err := openMockEngine(hdmadev.Config{}, engine.Config{PoolSize: 4 << 20})
	if err != nil {
		return nil, err
	}
	var ts [batch]engine.Transfer
	for i := range ts {
		b, err := e.Alloc(blockSize)
		if err != nil {
			closeAll()
			return nil, err
		}
		ts[i] = engine.Transfer{Src: engine.Host(b), Dst: engine.DeviceAt(uint64(i * blockSize)), Len: blockSize}
	}
	how := "DMA (descriptor, doorbell, completion ring)"
	if t := e.Backend().CPUThreshold; t >= blockSize {
		how = fmt.Sprintf("the CPU copies into device memory (below the %d B threshold the engine measured at Open)", t)
	}
	ctx := context.Background()
	return &syncPath{name: "hcomm engine", close: closeAll,
		desc: "engine.Open with the default mode, Submit of one block, then Wait; " + how,
		one: func(i int) error {
			id, err := e.Submit(ts[i%batch])
			if err != nil {
				return err
			}
			return e.Wait(ctx, id)
		}}, nil
}

// openSyncTraditional: baseline.Device.Write, which returns when the
// device has the bytes (pwrite, doorbell, blocking read of the eventfd).
func openSyncTraditional() (*syncPath, error) {
	m, d, err := openBaseline()
	if err != nil {
		return nil, err
	}
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, blockSize)
	}
	return &syncPath{name: "traditional path", desc: "baseline.Device.Write of one Go heap buffer: pwrite(2), doorbell, blocking read(2) of the completion eventfd",
		one: func(i int) error { return d.Write(bufs[i%batch], uint64(i%batch*blockSize)) },
		close: func() error {
			err := d.Close()
			if cerr := m.Close(); err == nil {
				err = cerr
			}
			return err
		}}, nil
}

// pcts is one distribution's p50 and p99, in ns.
type pcts struct{ p50, p99 float64 }

// pctOf sorts s and returns its p50 and p99.
func pctOf(s []float64) pcts {
	slices.Sort(s)
	return pcts{figures.Quantile(s, 0.50), figures.Quantile(s, 0.99)}
}

// latency prints the second figure: the latency of one synchronous
// transfer, engine (default mode) vs the traditional path, p50 and p99,
// each the median over reps interleaved repetitions of latSamples.
func (d *demo) latency() error {
	var paths []*syncPath
	defer func() {
		for _, p := range paths {
			p.close()
		}
	}()
	for _, open := range []func() (*syncPath, error){openSyncTraditional, openSyncEngine} {
		p, err := open()
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		paths = append(paths, p)
	}
	samples := make([]float64, latSamples)
	res := make([][]pcts, len(paths))
	for _, p := range paths {
		for i := range 500 { // warm up
			if err := p.one(i); err != nil {
				return fmt.Errorf("latency: %s: %w", p.name, err)
			}
		}
	}
	for range reps {
		for k, p := range paths {
			for i := range samples {
				t0 := time.Now()
				if err := p.one(i); err != nil {
					return fmt.Errorf("latency: %s: %w", p.name, err)
				}
				samples[i] = float64(time.Since(t0).Nanoseconds())
			}
			res[k] = append(res[k], pctOf(samples))
		}
	}
	med := func(v []pcts, f func(pcts) float64) float64 {
		x := make([]float64, len(v))
		for i, p := range v {
			x[i] = f(p)
		}
		slices.Sort(x)
		return x[len(x)/2]
	}
	p50 := func(p pcts) float64 { return p.p50 }
	p99 := func(p pcts) float64 { return p.p99 }
	fmt.Fprintln(d.out)
	d.printf("Latency: one synchronous 4 KiB host→device transfer at a time, the call returning when the bytes")
	d.printf("are in device memory (the engine in its default mode: Submit, then Wait); %d repetitions of %d", reps, latSamples)
	d.printf("transfers, interleaved; each percentile the median over the repetitions:")
	fmt.Fprintln(d.out)
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "   \tlatency p50\tlatency p99\t\n")
	var m [2][2]float64
	for k, p := range paths {
		m[k] = [2]float64{med(res[k], p50), med(res[k], p99)}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t\n", p.name, dur(m[k][0]), dur(m[k][1]))
	}
	fmt.Fprintf(tw, "   engine ÷ traditional\t%.3g×\t%.3g×\t\n", m[1][0]/m[0][0], m[1][1]/m[0][1])
	tw.Flush()
	fmt.Fprintln(d.out)
	d.printf("What it means: the pipelined figure above is throughput; this is what one transfer waits. A")
	d.printf("synchronous transfer on the engine takes %.3g× the traditional path's time at the median (p50)", m[1][0]/m[0][0])
	d.printf("and %.3g× at p99: the caller that waits reaps its own completion, where the traditional path", m[1][1]/m[0][1])
	d.printf("copies through the kernel and sleeps in a blocking read until the device's interrupt wakes it.")
	for _, p := range paths {
		d.printf("%-17s %s", p.name+":", p.desc)
	}
	return nil
}
