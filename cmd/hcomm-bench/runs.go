package main

// -runs: the goals of several runs of one binary (the -json-out files of
// make bench-report RUNS=n), as the Markdown table BENCHMARKS.md shows —
// per goal every run's value in order, their range, and in how many runs
// it was met. A goal is reproducible when every run measured and met it;
// the last line names those that are not.

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// runsRow is one goal over the runs: values[i] is run i's (NaN: not
// measured in that run), verdicts[i] its verdict.
type runsRow struct {
	id, target string
	values     []float64
	verdicts   []string
}

// met counts the runs that met the goal.
func (r *runsRow) met() int {
	n := 0
	for _, v := range r.verdicts {
		if v == "met" {
			n++
		}
	}
	return n
}

// summarizeRuns lines the runs' goals up by ID, in the first run's goal
// order (goals of later runs only appended).
func summarizeRuns(rs []report) []*runsRow {
	var rows []*runsRow
	byID := map[string]*runsRow{}
	for i, r := range rs {
		for _, g := range r.Goals {
			row := byID[g.ID]
			if row == nil {
				row = &runsRow{id: g.ID, target: g.Target, values: make([]float64, len(rs)), verdicts: make([]string, len(rs))}
				for j := range row.values {
					row.values[j] = math.NaN()
					row.verdicts[j] = "not in run"
				}
				byID[g.ID] = row
				rows = append(rows, row)
			}
			row.verdicts[i] = g.Verdict
			if g.Value != nil {
				row.values[i] = *g.Value
			}
		}
	}
	return rows
}

// printRuns writes the Markdown table and the goals not met in every run.
func printRuns(w io.Writer, rs []report, rows []*runsRow) {
	fmt.Fprintf(w, "%d runs:", len(rs))
	for i, r := range rs {
		m := r.Machine
		q := ""
		if m.Quick {
			q = ", -quick"
		}
		fmt.Fprintf(w, " run %d %s (load at start %.2f, %.0f s%s);", i+1, m.Date, m.LoadStart[0], m.Seconds, q)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	fmt.Fprint(w, "| goal | target |")
	for i := range rs {
		fmt.Fprintf(w, " run %d |", i+1)
	}
	fmt.Fprintln(w, " range | met |")
	fmt.Fprint(w, "|---|---|")
	for range rs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w, "---|---|")
	var short []string
	for _, r := range rows {
		fmt.Fprintf(w, "| `%s` | %s |", r.id, r.target)
		var got []float64
		for i, v := range r.values {
			switch {
			case !math.IsNaN(v):
				got = append(got, v)
				mark := ""
				if r.verdicts[i] != "met" {
					mark = " ✗"
				}
				fmt.Fprintf(w, " %s%s |", num(v), mark)
			default:
				fmt.Fprintf(w, " %s |", r.verdicts[i])
			}
		}
		rng := "—"
		if len(got) > 0 {
			rng = num(slices.Min(got)) + "–" + num(slices.Max(got))
		}
		fmt.Fprintf(w, " %s | %d/%d |\n", rng, r.met(), len(rs))
		if r.met() < len(rs) {
			short = append(short, fmt.Sprintf("%s (%d/%d)", r.id, r.met(), len(rs)))
		}
	}
	fmt.Fprintln(w)
	if len(short) == 0 {
		fmt.Fprintf(w, "every goal met in all %d runs\n", len(rs))
	} else {
		fmt.Fprintf(w, "%d of %d goals not met in every run: %s\n", len(short), len(rows), strings.Join(short, ", "))
	}
}

// runsMain is -runs: prints the summary; 1 when a file cannot be read. A
// goal missed is no failure of the command (nor is it of a single run): the
// summary's last line names those not met in every run.
func runsMain(w io.Writer, list string) int {
	var paths []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			paths = append(paths, p)
		}
	}
	rs, err := loadRuns(paths)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hcomm-bench -runs:", err)
		return 1
	}
	printRuns(w, rs, summarizeRuns(rs))
	return 0
}
