#!/bin/sh
# The exporter's throughput, two streams at once and one, in alternation (ROUNDS rounds,
# default 3), GOMAXPROCS=1; then its idle cost, its lag at given rates and under the simulator's
# default day.
# docs/BENCHMARKS.md, "The spend ledger export", has the figures.
set -eu
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
bin=$(mktemp -d)/export.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" ./export/
cd export
i=0
while [ "$i" -lt "$rounds" ]; do
	for streams in 2 1; do
		GOMAXPROCS=1 "$bin" -test.run '^$' -test.bench "Export\$/streams=$streams\$" -test.benchtime 1x -test.v -test.timeout 30m |
			grep -E 'load average|events/s'
	done
	i=$((i + 1))
done
"$bin" -test.run '^$' -test.bench 'ExportIdle' -test.benchtime 1x -test.v -test.timeout 30m | grep -E 'load average|cmds/s'
"$bin" -test.run '^$' -test.bench 'ExportLagAtRate' -test.benchtime 1x -test.v -test.timeout 60m | grep -E 'load average|lag-p99'
"$bin" -test.run '^$' -test.bench 'ExportLagSimulatedDay' -test.benchtime 1x -test.v -test.timeout 60m | grep -E 'load average|lag-p99'
