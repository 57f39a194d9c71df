#!/usr/bin/env bash
# insn-per-op.sh — instructions per operation of Go benchmarks, counted by
# valgrind's callgrind: a figure that does not move with the machine's load,
# its other CPU or the disk (it is what QEMU's TCG charges, instruction by
# instruction, and a proxy for CPU time on a real core, not a measure of it:
# cache misses and locked instructions cost more than others).
#
#   scripts/insn-per-op.sh TESTBIN BENCH...
#
# Each benchmark (a -test.bench pattern that matches one benchmark) runs
# twice under callgrind, with -test.benchtime N1x and N2x; the difference of
# the two runs' instruction counts over N2 − N1 is the cost of one operation,
# without the set-up and tear-down both runs share. N1 and N2 (defaults
# 19200 and 57600, multiples of 64 so that batched benchmarks run whole
# batches) come from INSN_N1 and INSN_N2. GODEBUG turns off the RDTSCP the Go
# runtime would use (valgrind 3.19 does not decode it) and asynchronous
# preemption (its signals only add noise). Prints one line per benchmark:
#
#   BENCH <tab> instructions per op
set -euo pipefail
if [ $# -lt 2 ]; then
	echo "usage: $0 TESTBIN BENCH..." >&2
	exit 2
fi
command -v valgrind >/dev/null || { echo "insn-per-op: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
bin=$1
shift
n1=${INSN_N1:-19200}
n2=${INSN_N2:-57600}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # count BENCH N: instructions of the whole run
	GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
		"$bin" -test.run '^$' -test.bench "$1" -test.benchtime "$2x" -test.cpu 1 >"$tmp/log" 2>&1 ||
		{ cat "$tmp/log" >&2; echo "insn-per-op: $1 failed under callgrind" >&2; exit 1; }
	grep -q '^Benchmark' "$tmp/log" || { cat "$tmp/log" >&2; echo "insn-per-op: $1 matched no benchmark" >&2; exit 1; }
	awk '/Collected :/ {print $NF}' "$tmp/log"
}
for b in "$@"; do
	a=$(count "$b" "$n1")
	c=$(count "$b" "$n2")
	printf '%s\t%d\n' "$b" $(((c - a) / (n2 - n1)))
done
