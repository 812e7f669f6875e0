#!/usr/bin/env bash
# Runs a scenario over several seeds and says which keep every pacing
# invariant: a scenario's committed seed is one draw of its traffic, and a
# pacing limit shows on others (issue 35: the tiny scenario's 20-bid
# budgets). Each seed's results go to OUT/seed-N/; a seed that breaks an
# invariant is listed with its violations, and the script exits 1 if any
# did. About 15 s a seed for tiny.yaml on 2 quiet cores.
# Usage: scripts/sim-seeds.sh [SCENARIO] [FIRST] [LAST] [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
scenario=${1:-configs/scenarios/tiny.yaml}
first=${2:-1}
last=${3:-10}
out=${4:-sim-out/seeds}
command -v redis-server >/dev/null || { echo "redis-server not found: sudo apt-get install redis-server" >&2; exit 1; }
go build -o bin/pacersim ./cmd/pacersim || exit 1
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
failed=()
for seed in $(seq "$first" "$last"); do
	mkdir -p "$out/seed-$seed"
	if bin/pacersim "$scenario" --seed "$seed" --out "$out/seed-$seed" --quiet > /dev/null 2> "$out/seed-$seed/stderr.txt"; then
		echo "seed $seed: every invariant kept"
	else
		failed+=("$seed")
		echo "seed $seed: broken"
		sed 's/^/  /' "$out/seed-$seed/stderr.txt"
	fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ ${#failed[@]} -gt 0 ]; then
	echo "$scenario: seeds ${failed[*]} of $first-$last broke an invariant (results in $out/)" >&2
	exit 1
fi
echo "$scenario: seeds $first-$last keep every invariant (results in $out/)" >&2
