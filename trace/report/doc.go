// Package report turns the counters package trace collects into what people
// and programs read: a Report (New, from a trace.Snapshot or the delta of
// two, and the session's trace.Meta), written as hcomm-trace's syscount-style
// table with log2 histograms (WriteTable, WriteHistogram) or as JSON
// (WriteJSON, schema SchemaVersion, described in docs/tracing.md), and the
// compact change over one live interval (NewInterval, Interval.WriteLine).
// Package trace is the mechanism (eBPF programs, attaching, reading the
// maps); this package only presents what it read.
package report
