#!/usr/bin/env bash
# bench_uring_nop.sh — Go's BenchmarkNop side by side with the C
# liburing program uring_nop.c (same ring set-up, same calls per batch), run
# interleaved (C then Go, per batch, per round) so both see the same machine
# noise; prints per-batch medians of RUNS rounds and the Go/C ratio.
#
#   RUNS=5 internal/uring/testdata/bench_uring_nop.sh     (make bench runs it)
#
# Needs gcc and liburing-dev; installs liburing-dev with apt-get when
# missing and running as root.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS="${RUNS:-5}"
GO="${GO:-go}"

if ! dpkg-query -W -f='${Status}' liburing-dev 2>/dev/null | grep -q "install ok installed"; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "bench_uring_nop.sh: liburing-dev is missing; install it (apt-get install liburing-dev) or run as root" >&2
		exit 1
	fi
	echo "installing liburing-dev (apt-get)" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liburing-dev >&2 ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liburing-dev >&2; }
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cc -O2 -Wall -o "$tmp/uring_nop" internal/uring/testdata/uring_nop.c -luring
"$GO" test -c -o "$tmp/uring.test" ./internal/uring/

# NOPs per run and batch: about a second each on this class of machine.
declare -A NOPS=([1]=2000000 [8]=8000000 [64]=16000000)
declare -A TARGET=([1]=0.60 [8]=0 [64]=0.95)
for round in $(seq 1 "$RUNS"); do
	for b in 1 8 64; do
		c=$("$tmp/uring_nop" "$b" "${NOPS[$b]}" | sed -n 's/.*Mops\/s=\([0-9.]*\).*/\1/p')
		gline=$("$tmp/uring.test" -test.run '^$' -test.bench "^BenchmarkNop/batch=$b\$" \
			-test.benchtime="${NOPS[$b]}x" -test.benchmem | grep '^BenchmarkNop')
		g=$(awk '{for (i = 2; i <= NF; i++) if ($i == "Mops/s") print $(i-1)}' <<<"$gline")
		e=$(awk '{for (i = 2; i <= NF; i++) if ($i == "enters/op") print $(i-1)}' <<<"$gline")
		a=$(awk '{for (i = 2; i <= NF; i++) if ($i == "allocs/op") print $(i-1)}' <<<"$gline")
		echo "round $round batch=$b  C $c Mops/s  Go $g Mops/s  (Go enters/op $e, allocs/op $a)"
		echo "$b $c $g $e $a" >>"$tmp/results"
	done
done

echo
echo "UringNop: medians of $RUNS interleaved rounds (Mops/s, higher is better); Go/C is the"
echo "median of the per-round ratios (each round's C and Go runs share the machine's noise)"
printf '%-6s %10s %10s %8s %12s %10s %9s\n' batch C Go Go/C target enters/op allocs/op
med() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for b in 1 8 64; do
	col() { awk -v b="$b" -v col="$1" '$1 == b {print $col}' "$tmp/results" | med; }
	c=$(col 2); g=$(col 3); e=$(col 4); a=$(col 5)
	ratio=$(awk -v b="$b" '$1 == b {printf "%.4f\n", $3 / $2}' "$tmp/results" | med)
	ratio=$(printf '%.2f' "$ratio")
	t=${TARGET[$b]}
	verdict=$(awk -v r="$ratio" -v t="$t" 'BEGIN {if (t == 0) print "-"; else if (r >= t) print ">=" t " ok"; else print "<" t " BELOW"}')
	printf '%-6s %10s %10s %8s %12s %10s %9s\n' "$b" "$c" "$g" "$ratio" "$verdict" "$e" "$a"
done
