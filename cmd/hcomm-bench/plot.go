package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlots draws the run's charts into dir as SVG files (-plot) and
// returns their names: bars of engine vs the traditional path vs fio per
// scenario, the latency percentiles, CPU per GiB and the memory footprint
// against the transfers in flight. Everything comes from the report's
// entries, so a chart shows exactly what the tables and the JSON say.
func writePlots(dir string, rep report) (files []string, err error) {
	// The plotting library panics on data it cannot draw; a chart must
	// never cost the run its results.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("drawing a chart: %v", r)
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Each chart as SVG (for the docs) and PNG (for viewers without SVG).
	save := func(p *plot.Plot, name string, w vg.Length) error {
		for _, n := range []string{name, strings.TrimSuffix(name, ".svg") + ".png"} {
			path := filepath.Join(dir, n)
			if err := p.Save(w, 10*vg.Centimeter, path); err != nil {
				return fmt.Errorf("plot %s: %w", n, err)
			}
			files = append(files, path)
		}
		return nil
	}
	bars := func(file, title, ylabel, name, metric, prefix string) error {
		p, n, err := barPlot(rep, title, ylabel, name, metric, prefix)
		if p == nil || err != nil {
			return err
		}
		return save(p, file, vg.Length(n)*1.6*vg.Centimeter+6*vg.Centimeter)
	}
	var errs []error
	for _, op := range fileOps {
		errs = append(errs,
			bars("file-4k-"+op+"-iops.svg", "4 KiB "+op+", O_DIRECT: IOPS (higher is better)", "IOPS", "file-4k", "iops", op+"/"),
			bars("file-4k-"+op+"-cpu-per-gib.svg", "4 KiB "+op+": CPU seconds per GiB moved (lower is better)", "CPU-s/GiB", "file-4k", "cpu_per_gib", op+"/"))
	}
	for _, s := range []string{"4096/", "4096-inline/"} {
		mode := "device model on its own thread"
		if strings.Contains(s, "inline") {
			mode = "device model inline"
		}
		errs = append(errs, bars("device-small-"+strings.TrimSuffix(s, "/")+".svg", "4 KiB host→device, "+mode+": ns per transfer (lower is better)",
			"ns/transfer", "device-small", "time", s))
	}
	errs = append(errs, latencyPlot(rep, save), footprintPlot(rep, save), remotePlot(rep, save))
	for _, err := range errs {
		if err != nil {
			return files, err
		}
	}
	return files, nil
}

// plotValues collects one metric of one scenario by variant (engine
// variants from Engine, baselines from Baseline), in first-seen order.
func plotValues(rep report, name, metric, prefix string) ([]string, []float64) {
	var names []string
	var vals []float64
	add := func(v string, x *float64) {
		if x == nil || !strings.HasPrefix(v, prefix) || slices.Contains(names, v) {
			return
		}
		names = append(names, v)
		vals = append(vals, *x)
	}
	for _, e := range rep.Scenarios {
		if e.Name == name && e.Metric == metric {
			add(e.Variant, e.Engine)
			add(e.BaselineVariant, e.Baseline)
		}
	}
	return names, vals
}

// barPlot is a bar chart of one metric of the variants under prefix: the
// engine's bars first, then the peers', then the traditional path's; one
// colour per kind, named in the legend; n bars. nil when nothing was
// measured.
func barPlot(rep report, title, ylabel, name, metric, prefix string) (p *plot.Plot, n int, err error) {
	names, vals := plotValues(rep, name, metric, prefix)
	if len(vals) == 0 {
		return nil, 0, nil
	}
	p = plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return barKind(names[a]) - barKind(names[b]) })
	short := make([]string, len(names))
	seen := map[int]bool{}
	for x, i := range idx {
		short[x] = strings.TrimPrefix(names[i], prefix)
		bc, err := plotter.NewBarChart(plotter.Values{vals[i]}, vg.Points(18))
		if err != nil {
			return nil, 0, err
		}
		k := barKind(names[i])
		bc.Color = barColors[k]
		bc.XMin = float64(x)
		p.Add(bc)
		if !seen[k] {
			seen[k] = true
			p.Legend.Add(barKindNames[k], bc)
		}
	}
	p.Legend.Top = true
	p.Y.Min = 0
	p.Y.Max = slices.Max(vals) * 1.35 // room for the legend above the bars
	p.NominalX(short...)
	p.X.Tick.Label.Rotation = 0.6
	p.X.Tick.Label.XAlign = -0.9
	return p, len(vals), nil
}

// latencyPlot draws each latency table's percentiles (p50 … max) per
// variant: a percentile curve, the latency CDF turned on its side.
func latencyPlot(rep report, save func(*plot.Plot, string, vg.Length) error) error {
	qs := []string{"p50", "p90", "p99", "p99.9", "max"}
	// ref → variant → percentile values
	type curve struct {
		name string
		v    [5]float64
	}
	tables := map[string][]*curve{}
	var refs []string
	get := func(ref, name string) *curve {
		for _, c := range tables[ref] {
			if c.name == name {
				return c
			}
		}
		if _, ok := tables[ref]; !ok {
			refs = append(refs, ref)
		}
		c := &curve{name: name}
		tables[ref] = append(tables[ref], c)
		return c
	}
	for _, e := range rep.Scenarios {
		if e.Name != "latency" || e.Engine == nil || e.Baseline == nil {
			continue
		}
		i := slices.Index(qs, e.Metric)
		ref, name, _ := strings.Cut(e.Variant, "→")
		if i < 0 {
			continue
		}
		get(ref, ref).v[i] = *e.Baseline / 1e3
		get(ref, name).v[i] = *e.Engine / 1e3
	}
	for _, ref := range refs {
		p := plot.New()
		what := "4 KiB host→device (vfio-mock)"
		switch {
		case ref == "readat":
			what = "4 KiB O_DIRECT read"
		case strings.HasPrefix(ref, loadedPrefix):
			what += ", other vCPU busy"
		}
		p.Title.Text = "Latency of one synchronous " + what + ": percentiles"
		p.Y.Label.Text = "µs (log)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{}
		p.NominalX(qs...)
		var args []any
		for _, c := range tables[ref] {
			xy := make(plotter.XYs, 0, len(qs))
			for i, v := range c.v {
				if v > 0 {
					xy = append(xy, plotter.XY{X: float64(i), Y: v})
				}
			}
			args = append(args, c.name, xy)
		}
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return err
		}
		p.Legend.Top = true
		p.Legend.Left = true
		if err := save(p, "latency-"+ref+".svg", 16*vg.Centimeter); err != nil {
			return err
		}
	}
	return nil
}

// footprintPlot draws RSS and pinned bytes against the transfers in flight.
func footprintPlot(rep report, save func(*plot.Plot, string, vg.Length) error) error {
	series := map[string]plotter.XYs{}
	for _, e := range rep.Scenarios {
		if e.Name != "footprint" || e.Engine == nil || e.Baseline == nil || (e.Metric != "rss" && e.Metric != "pinned") {
			continue
		}
		var n float64
		if _, err := fmt.Sscanf(e.Variant, "inflight=%g/", &n); err != nil {
			continue
		}
		series["engine "+e.Metric] = append(series["engine "+e.Metric], plotter.XY{X: n, Y: *e.Engine / (1 << 20)})
		series["traditional "+e.Metric] = append(series["traditional "+e.Metric], plotter.XY{X: n, Y: *e.Baseline / (1 << 20)})
	}
	if len(series) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Memory with N 4 KiB reads in flight"
	p.X.Label.Text = "reads in flight (log)"
	p.Y.Label.Text = "MiB"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	var args []any
	for _, k := range []string{"engine rss", "traditional rss", "engine pinned", "traditional pinned"} {
		if xy := series[k]; len(xy) > 0 {
			args = append(args, k, xy)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return save(p, "footprint.svg", 14*vg.Centimeter)
}

// barKind sorts and colours a bar: 0 the engine, 1 a peer (fio, UCX's
// perftest, the bare driver, copy()), 2 the traditional path.
func barKind(variant string) int {
	_, v, _ := strings.Cut(variant, "/")
	switch {
	case strings.HasPrefix(v, "engine"):
		return 0
	case strings.HasPrefix(v, "fio") || strings.HasPrefix(v, "floor") || strings.HasPrefix(v, "copy") || strings.HasPrefix(v, "ucx"):
		return 1
	}
	return 2
}

var (
	barColors    = []color.Color{color.RGBA{R: 40, G: 100, B: 180, A: 255}, color.RGBA{R: 230, G: 140, B: 30, A: 255}, color.RGBA{R: 180, G: 50, B: 50, A: 255}}
	barKindNames = []string{"engine", "peer (fio, bare driver, copy)", "traditional path"}
)

// remotePlot draws, per transport, put bandwidth against the transfer
// size: the engine at batches of 1 and 64, ucx_perftest, the TCP socket.
func remotePlot(rep report, save func(*plot.Plot, string, vg.Length) error) error {
	series := map[string]map[string]plotter.XYs{} // tls → series → points
	var tlss []string
	add := func(tls, name string, size, v float64) {
		if series[tls] == nil {
			series[tls] = map[string]plotter.XYs{}
			tlss = append(tlss, tls)
		}
		for _, p := range series[tls][name] {
			if p.X == size {
				return
			}
		}
		series[tls][name] = append(series[tls][name], plotter.XY{X: size, Y: v})
	}
	for _, e := range rep.Scenarios {
		f := strings.Split(e.Variant, "/")
		if e.Name != "remote" || e.Metric != "bandwidth" || len(f) != 5 || f[1] != "put" || e.Engine == nil || e.Baseline == nil {
			continue
		}
		size, err := strconv.ParseFloat(f[2], 64)
		if err != nil || *e.Engine <= 0 || *e.Baseline <= 0 {
			continue
		}
		add(f[0], "engine "+f[3], size, *e.Engine)
		if strings.HasSuffix(e.BaselineVariant, "/ucx_perftest") {
			add(f[0], "ucx_perftest", size, *e.Baseline)
		} else if f[3] == "b1" {
			add(f[0], "tcp socket", size, *e.Baseline)
		}
	}
	for _, tls := range tlss {
		p := plot.New()
		p.Title.Text = "Remote put over UCX " + tls + ": bandwidth by transfer size (higher is better)"
		p.X.Label.Text = "bytes per transfer (log)"
		p.Y.Label.Text = "MiB/s (log)"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{}, plot.LogTicks{}
		var args []any
		for _, k := range []string{"engine b1", "engine b64", "ucx_perftest", "tcp socket"} {
			if xy := series[tls][k]; len(xy) > 0 {
				slices.SortFunc(xy, func(a, b plotter.XY) int { return cmpFloat(a.X, b.X) })
				args = append(args, k, xy)
			}
		}
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return err
		}
		p.Legend.Top = true
		p.Legend.Left = true
		if err := save(p, "remote-"+tls+"-put.svg", 14*vg.Centimeter); err != nil {
			return err
		}
	}
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
