package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummarizeRuns: three runs' goals lined up by ID — every run's value
// in order, the range, the runs that met it — and the goals not met in
// every run named; a goal missing from a run, or not measured in it,
// counts against it.
func TestSummarizeRuns(t *testing.T) {
	g := func(id string, v float64, verdict string) goal {
		return goal{ID: id, Target: "≥ 1×", Unit: "×", Value: ptr(v), Verdict: verdict}
	}
	rs := []report{
		{Goals: []goal{g("a", 1.2, "met"), g("b", 0.9, "missed"), {ID: "c", Target: "< 1 %", Verdict: "not measured"}}},
		{Goals: []goal{g("a", 1.1, "met"), g("b", 1.3, "met")}},
		{Goals: []goal{g("a", 1.4, "met"), g("b", 1.0, "met"), g("d", 2, "met")}},
	}
	rows := summarizeRuns(rs)
	byID := map[string]*runsRow{}
	var order []string
	for _, r := range rows {
		byID[r.id] = r
		order = append(order, r.id)
	}
	if got := strings.Join(order, ","); got != "a,b,c,d" {
		t.Fatalf("rows %s, want a,b,c,d (first run's order, later goals appended)", got)
	}
	for _, tc := range []struct {
		id     string
		met    int
		values []float64 // NaN: none
		cells  []string  // substrings of the row's Markdown line
	}{
		{"a", 3, []float64{1.2, 1.1, 1.4}, []string{"| 1.20 | 1.10 | 1.40 |", "| 1.10–1.40 | 3/3 |"}},
		{"b", 2, []float64{0.9, 1.3, 1.0}, []string{"| 0.900 ✗ | 1.30 | 1.00 |", "| 0.900–1.30 | 2/3 |"}},
		{"c", 0, []float64{math.NaN(), math.NaN(), math.NaN()}, []string{"| not measured | not in run | not in run |", "| — | 0/3 |"}},
		{"d", 1, []float64{math.NaN(), math.NaN(), 2}, []string{"| not in run | not in run | 2.00 |", "| 2.00–2.00 | 1/3 |"}},
	} {
		r := byID[tc.id]
		if r.met() != tc.met {
			t.Errorf("%s: met %d, want %d", tc.id, r.met(), tc.met)
		}
		for i, want := range tc.values {
			if got := r.values[i]; got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Errorf("%s: run %d value %v, want %v", tc.id, i+1, got, want)
			}
		}
		var out strings.Builder
		printRuns(&out, rs, []*runsRow{r})
		for _, c := range tc.cells {
			if !strings.Contains(out.String(), c) {
				t.Errorf("%s: output lacks %q:\n%s", tc.id, c, out.String())
			}
		}
	}
	var out strings.Builder
	printRuns(&out, rs, rows)
	if !strings.Contains(out.String(), "3 of 4 goals not met in every run: b (2/3), c (0/3), d (1/3)") {
		t.Errorf("the last line does not name the goals short of 3/3:\n%s", out.String())
	}
	out.Reset()
	printRuns(&out, rs[1:2], summarizeRuns(rs[1:2]))
	if !strings.Contains(out.String(), "every goal met in all 1 runs") {
		t.Errorf("one run, all met:\n%s", out.String())
	}
}

// TestRunsMain: the files are read; one that cannot be is an error (1),
// a missed goal is not.
func TestRunsMain(t *testing.T) {
	dir := t.TempDir()
	missed := report{Goals: []goal{{ID: "a", Target: "≥ 1×", Unit: "×", Value: ptr(0.5), Verdict: "missed"}}}
	b, err := json.Marshal(missed)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "run-1.json")
	if err := os.WriteFile(good, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		list string
		code int
	}{
		{good, 0},
		{good + "," + good, 0},
		{good + "," + filepath.Join(dir, "absent.json"), 1},
	} {
		var out strings.Builder
		if code := runsMain(&out, tc.list); code != tc.code {
			t.Errorf("runsMain(%s) = %d, want %d\n%s", tc.list, code, tc.code, out.String())
		}
	}
}
