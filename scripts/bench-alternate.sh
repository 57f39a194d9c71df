#!/bin/sh
# Runs two hcomm-bench binaries alternately on the same machine and puts
# their goals side by side (hcomm-bench -compare-old/-compare-new): medians
# per goal over each binary's runs, which goals hold on each.
#
#   scripts/bench-alternate.sh OLD_BIN NEW_BIN ROUNDS OUTDIR [hcomm-bench flags...]
#
# Each round runs both binaries with the same flags, old first in odd
# rounds and new first in even ones (a drift in the machine's load falls
# on both alike), each writing OUTDIR/{old,new}-N.json and .log; every run's
# start and end time and load average go to OUTDIR/runs.txt. OLD_FLAGS and
# NEW_FLAGS add flags to one binary only (a flag the other does not know).
# With LOCK=FILE each round holds flock(1) on FILE, so that nothing else
# that takes the same lock runs meanwhile.
#
# Example (the goal scenarios at reduced duration, 3 rounds):
#   NEW_FLAGS='-file-targets disk' scripts/bench-alternate.sh ./hcomm-bench-old ./hcomm-bench-new 3 /tmp/cmp \
#       -quick -scenarios latency,device-small,file-4k,bulk,footprint,remote
set -eu
OLD_FLAGS=${OLD_FLAGS:-} NEW_FLAGS=${NEW_FLAGS:-} LOCK=${LOCK:-}

# one WHICH N OLD_BIN NEW_BIN OUTDIR flags...: one binary's run.
one() {
	w=$1 n=$2 bin=$3 extra=$OLD_FLAGS
	if [ "$w" = new ]; then bin=$4 extra=$NEW_FLAGS; fi
	dir=$5
	shift 5
	echo "$(date -u +%FT%TZ) start $w round $n load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$dir/runs.txt"
	rc=0
	# shellcheck disable=SC2086 # extra is a list of flags
	"$bin" "$@" $extra -json-out "$dir/$w-$n.json" >"$dir/$w-$n.log" 2>&1 || rc=$?
	echo "$(date -u +%FT%TZ) end $w round $n rc $rc load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$dir/runs.txt"
}

# --round N OLD_BIN NEW_BIN OUTDIR flags...: one round (what runs under LOCK).
if [ "${1:-}" = --round ]; then
	n=$2
	shift 2
	if [ $((n % 2)) -eq 1 ]; then
		one old "$n" "$@"
		one new "$n" "$@"
	else
		one new "$n" "$@"
		one old "$n" "$@"
	fi
	exit 0
fi

if [ $# -lt 4 ]; then
	sed -n '2,18p' "$0" >&2
	exit 2
fi
old=$1 new=$2 rounds=$3 out=$4
shift 4
mkdir -p "$out"
olds= news=
i=1
while [ "$i" -le "$rounds" ]; do
	if [ -n "$LOCK" ]; then
		flock "$LOCK" "$0" --round "$i" "$old" "$new" "$out" "$@"
	else
		"$0" --round "$i" "$old" "$new" "$out" "$@"
	fi
	olds=$olds${olds:+,}$out/old-$i.json
	news=$news${news:+,}$out/new-$i.json
	i=$((i + 1))
done
"$new" -compare-old "$olds" -compare-new "$news" | tee "$out/compare.txt"
