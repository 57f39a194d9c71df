package main

// -compare-old / -compare-new: the goals of two sets of runs (the -json-out
// files of two binaries, alternated on the same machine) side by side —
// per goal ID the median of each set's values, their range, how many runs
// met the target, and whether the goal holds on each set's median. A goal
// that holds on the old median and not on the new one is a regression.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/hcomm-go/hcomm/cmd/internal/figures"
)

// compareSide is one goal's values over one set of runs.
type compareSide struct {
	values []float64
	met    int // runs whose verdict was "met"
	runs   int // runs that measured it
}

// compareRow is one goal across both sets.
type compareRow struct {
	id, target, unit string
	lim              limit
	limOK            bool
	old, new         compareSide
}

// comparison is what compareRuns found: the rows, in the first run's goal
// order, and each file's load average at start.
type comparison struct {
	rows      []*compareRow
	oldLoads  []string
	newLoads  []string
	regressed []string
}

// loadRuns reads -json-out files.
func loadRuns(paths []string) ([]report, error) {
	var rs []report
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// parseTarget reads a goal's target ("≤ 0.1×", "≥ 1×", "< 0.0001 /byte").
func parseTarget(s string) (limit, bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return limit{}, false
	}
	var v float64
	if _, err := fmt.Sscanf(strings.TrimSuffix(f[1], "×"), "%g", &v); err != nil {
		return limit{}, false
	}
	switch f[0] {
	case "≤", "≥", "<":
		return limit{f[0], v}, true
	}
	return limit{}, false
}

func compareRuns(old, new []report) comparison {
	var c comparison
	byID := map[string]*compareRow{}
	add := func(rs []report, side func(*compareRow) *compareSide, loads *[]string) {
		for _, r := range rs {
			l := r.Machine.LoadStart
			*loads = append(*loads, fmt.Sprintf("%.2f", l[0]))
			for _, g := range r.Goals {
				row := byID[g.ID]
				if row == nil {
					row = &compareRow{id: g.ID, target: g.Target, unit: g.Unit}
					row.lim, row.limOK = parseTarget(g.Target)
					byID[g.ID] = row
					c.rows = append(c.rows, row)
				}
				if g.Value == nil || math.IsNaN(*g.Value) {
					continue
				}
				s := side(row)
				s.values = append(s.values, *g.Value)
				s.runs++
				if g.Verdict == "met" {
					s.met++
				}
			}
		}
	}
	add(old, func(r *compareRow) *compareSide { return &r.old }, &c.oldLoads)
	add(new, func(r *compareRow) *compareSide { return &r.new }, &c.newLoads)
	for _, r := range c.rows {
		if r.holds(r.old) == "met" && r.holds(r.new) == "missed" {
			c.regressed = append(c.regressed, r.id)
		}
	}
	return c
}

// holds judges the side's median against the target.
func (r *compareRow) holds(s compareSide) string {
	if len(s.values) == 0 {
		return "—"
	}
	if !r.limOK {
		return "?"
	}
	if r.lim.ok(figures.Median(s.values)) {
		return "met"
	}
	return "missed"
}

func (s compareSide) cell() string {
	if len(s.values) == 0 {
		return "not measured"
	}
	v := append([]float64(nil), s.values...)
	sort.Float64s(v)
	return fmt.Sprintf("%s [%s–%s] (%d/%d met)", num(figures.Median(v)), num(v[0]), num(v[len(v)-1]), s.met, s.runs)
}

func printComparison(w io.Writer, c comparison) {
	fmt.Fprintf(w, "goals, old runs (load at start %s) against new runs (load %s): median [min–max] of each run's value, runs that met the target; verdicts on the medians\n",
		strings.Join(c.oldLoads, ", "), strings.Join(c.newLoads, ", "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "goal\ttarget\told\tnew\tnew ÷ old\told median\tnew median\t")
	for _, r := range c.rows {
		ratio := "—"
		if len(r.old.values) > 0 && len(r.new.values) > 0 {
			if o := figures.Median(r.old.values); o != 0 {
				ratio = fmt.Sprintf("%.2f", figures.Median(r.new.values)/o)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.id, r.target, r.old.cell(), r.new.cell(), ratio, r.holds(r.old), r.holds(r.new))
	}
	tw.Flush()
	if len(c.regressed) == 0 {
		fmt.Fprintln(w, "no goal that holds on the old median misses on the new one")
	} else {
		fmt.Fprintf(w, "held on the old median, missed on the new: %s\n", strings.Join(c.regressed, ", "))
	}
}

// compareMain is -compare-old/-compare-new: prints the comparison; 1 when
// a file cannot be read.
func compareMain(w io.Writer, oldList, newList string) int {
	split := func(s string) []string {
		var ps []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				ps = append(ps, p)
			}
		}
		return ps
	}
	old, err := loadRuns(split(oldList))
	if err == nil {
		var new []report
		if new, err = loadRuns(split(newList)); err == nil {
			printComparison(w, compareRuns(old, new))
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "hcomm-bench -compare:", err)
	return 1
}
