package main

import (
	"io"
	"strings"
	"testing"
)

// TestParseArgs: what the command line cannot honour is refused with a
// message, not silently changed or ignored: `hcomm-demo extra -n 64` must
// not stop parsing at "extra" and run 6400 round trips, nor `-n 0` become 64.
func TestParseArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		n    int
		err  string
	}{
		{nil, 6400, ""},
		{[]string{"-n", "128"}, 128, ""},
		{[]string{"-n", "64", "-hugepages"}, 64, ""},
		{[]string{"extra", "-n", "64"}, 0, `unexpected argument "extra"`},
		{[]string{"-n", "64", "extra"}, 0, `unexpected argument "extra"`},
		{[]string{"-n", "0"}, 0, "-n 0: want a positive multiple of 64"},
		{[]string{"-n", "-64"}, 0, "-n -64"},
		{[]string{"-n", "100"}, 0, "-n 100"},
		{[]string{"-touch-gib", "0"}, 0, "-touch-gib 0"},
		{[]string{"-worker", "pigeon"}, 0, `-worker "pigeon"`},
		{[]string{"-nope"}, 0, "not defined"},
	} {
		o, err := parseArgs(c.args, io.Discard)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.err == "" && o.n != c.n:
			t.Errorf("%q: n = %d, want %d", c.args, o.n, c.n)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want an error with %q", c.args, err, c.err)
		}
	}
}
