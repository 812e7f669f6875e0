#!/usr/bin/env bash
# Runs the simulator's default scenario and writes the plots to docs/img/ and
# the results table to docs/img/sim-results.md (to paste into
# docs/BENCHMARKS.md; its image links are relative to docs/).
# Usage: scripts/sim-bench.sh [SCENARIO] [extra pacersim flags]
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:-configs/scenarios/default.yaml}
shift || true
command -v redis-server >/dev/null || { echo "redis-server not found: sudo apt-get install redis-server" >&2; exit 1; }
go build -o bin/pacersim ./cmd/pacersim
start=$(date +%s)
bin/pacersim "$scenario" --out docs/img --img-prefix img "$@" > /dev/null
mv docs/img/results.md docs/img/sim-results.md
mv docs/img/results.json docs/img/sim-results.json
echo "wrote docs/img/sim-*.png, docs/img/sim-results.md and docs/img/sim-results.json in $(( $(date +%s) - start ))s" >&2
