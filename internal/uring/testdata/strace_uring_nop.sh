#!/usr/bin/env bash
# strace_uring_nop.sh — checks that BenchmarkNop's enters/op (the
# layer's own count of io_uring_enter calls) agrees with what strace sees.
# strace only counts here (-c): never time anything under it, it inflates
# syscall costs tenfold.
#
#   internal/uring/testdata/strace_uring_nop.sh [NOPS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
N="${1:-640000}"
command -v strace >/dev/null || { echo "strace missing (apt-get install strace)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"${GO:-go}" test -c -o "$tmp/uring.test" ./internal/uring/
status=0
for b in 1 8 64; do
	line=$(strace -c -f -o "$tmp/strace.$b" "$tmp/uring.test" -test.run '^$' \
		-test.bench "^BenchmarkNop/batch=$b\$" -test.benchtime="${N}x" | grep '^BenchmarkNop')
	reported=$(awk '{for (i = 2; i <= NF; i++) if ($i == "enters/op") print $(i-1)}' <<<"$line")
	seen=$(awk '$NF == "io_uring_enter" {print $4}' "$tmp/strace.$b")
	# One enter per batch; the testing package first runs the benchmark
	# once with b.N = 1: one more enter.
	expect=$(( (N + b - 1) / b + 1 ))
	verdict=agree
	[ "$seen" = "$expect" ] || { verdict=DISAGREE; status=1; }
	# The reported metric is printed with 4 significant digits.
	awk -v r="$reported" -v n="$N" -v s="$seen" 'BEGIN {d = r * n - (s - 1); if (d < 0) d = -d; exit (d > 0.001 * s)}' ||
		{ verdict="$verdict, but enters/op disagrees"; status=1; }
	echo "batch=$b: benchmark reports $reported enters/op for $N NOPs; expected $expect io_uring_enter (one per batch, +1 for the b.N=1 run); strace counted $seen: $verdict"
done
exit $status
