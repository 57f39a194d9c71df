package main

import (
	"bytes"
	"math"
	"testing"
)

// The parsers read other programs' output: whatever they are given, they
// return counts or an error, never panic, and never a negative or NaN count.
func FuzzParseStrace(f *testing.F) {
	f.Add("% time     seconds  usecs/call     calls    errors syscall\n------ ----------- ----------- --------- --------- ----------------\n 60.00    0.006000           1      4000           pwrite64\n 35.00    0.003500           0      4001         1 read\n------ ----------- ----------- --------- --------- ----------------\n100.00    0.010000           1      8001         1 total\n")
	f.Add("")
	f.Add("a b c -1 e f\n")
	f.Add("1 2 3 NaN x\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseStrace(bytes.NewReader([]byte(s)))
		if err != nil {
			return
		}
		for k, v := range m {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%s: %v", k, v)
			}
		}
	})
}

func FuzzParseFio(f *testing.F) {
	f.Add([]byte(`{"jobs": [{"read": {"iops": 1234.5, "total_ios": 999}, "write": {"iops": 77.0, "total_ios": 11}}]}`), true)
	f.Add([]byte(`warning {"jobs": []}`), false)
	f.Add([]byte(`{`), true)
	f.Fuzz(func(t *testing.T, b []byte, read bool) {
		op := "randwrite"
		if read {
			op = "randread"
		}
		iops, _, err := parseFio(b, op)
		if err == nil && !(iops > 0) {
			t.Fatalf("accepted IOPS %v", iops)
		}
	})
}
