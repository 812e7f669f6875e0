#!/usr/bin/env bash
# The long tail (issue 10): runs the committed sparse scenario and a seeded
# family of generated campaigns (budgets of 20 to 10^6 bids, demand 1x-3x,
# irregular traffic), writing each run's results and plots under
# docs/img/tail-sparse/, docs/img/tail-tiny/, docs/img/tail-family/ and, the family on curve:
# auto, docs/img/tail-family-auto/. Each results.md ends with the worst case per
# metric. About 8 minutes on 2 quiet cores.
# Usage: scripts/sim-tail.sh [FAMILY_SIZE] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
seed=${2:-7}
command -v redis-server >/dev/null || { echo "redis-server not found: sudo apt-get install redis-server" >&2; exit 1; }
go build -o bin/pacersim ./cmd/pacersim
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
start=$(date +%s)
bin/pacersim configs/scenarios/sparse.yaml --out docs/img/tail-sparse --img-prefix img/tail-sparse --quiet > /dev/null
bin/pacersim configs/scenarios/tiny.yaml --out docs/img/tail-tiny --img-prefix img/tail-tiny --quiet > /dev/null
mkdir -p docs/img/tail-family
bin/pacersim --family "$n" --seed "$seed" --write-scenario docs/img/tail-family/scenario.yaml \
	--out docs/img/tail-family --img-prefix img/tail-family --quiet > /dev/null
# The same family on curve: auto, after a warm-up day that records the demand
# its curves are fitted to.
mkdir -p docs/img/tail-family-auto
bin/pacersim --family "$n" --seed "$seed" --curve auto --warmup 24h \
	--out docs/img/tail-family-auto --img-prefix img/tail-family-auto --quiet > /dev/null
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "wrote docs/img/tail-sparse/, docs/img/tail-tiny/, docs/img/tail-family/ and docs/img/tail-family-auto/ in $(( $(date +%s) - start ))s" >&2
