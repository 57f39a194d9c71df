#!/usr/bin/env bash
# check-lib-deps.sh — `make check-lib-deps` (part of make test): a program
# that imports only the library (engine and a backend) gets only the
# library's dependencies. It builds a throwaway module outside the tree that
# imports engine and backend/uringfile (the local checkout, by a replace
# directive) and fails when its module graph (`go list -m all`) holds the
# tools' dependencies — gonum's plotting, Prometheus — which live in the
# tools' own module, cmd/go.mod.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/go.mod" <<MOD
module example.com/libonly

go $(sed -n 's/^go //p' "$root/go.mod")

require github.com/hcomm-go/hcomm v0.1.0

replace github.com/hcomm-go/hcomm => $root
MOD
cat >"$tmp/main.go" <<'SRC'
package main

import (
	"fmt"
	"os"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
)

func main() {
	be, err := uringfile.New(os.Stdin, uringfile.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	eng, err := engine.Open(engine.Config{Backend: be})
	if err == nil {
		eng.Close()
	}
}
SRC
cd "$tmp"
export GOWORK=off GOFLAGS=-mod=mod
$GO mod tidy
$GO build -o /dev/null .
mods=$($GO list -m all)
if bad=$(grep -E '^(github\.com/prometheus/|gonum\.org/)' <<<"$mods"); then
	echo "check-lib-deps: a program importing engine and backend/uringfile gets the tools' dependencies:" >&2
	echo "$bad" >&2
	exit 1
fi
echo "check-lib-deps: engine + backend/uringfile: $(wc -l <<<"$mods") modules, no gonum, no Prometheus"
