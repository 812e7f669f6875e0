#!/bin/sh
# The exporter's throughput against the statement schema version 2 used, side by side
# (BenchmarkExportThroughput: three alternating rounds, GOMAXPROCS=1), a fixed batch against the
# adaptive one (BenchmarkExportBatchSize, rotating rounds), where PostgreSQL's time
# goes in a batch's transaction (BenchmarkExportStatement); then its idle cost, its lag at given
# rates and under the simulator's default day.
# docs/BENCHMARKS.md, "The spend ledger export", has the figures.
set -eu
cd "$(dirname "$0")/.."
bin=$(mktemp -d)/export.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" ./export/
cd export
GOMAXPROCS=1 "$bin" -test.run '^$' -test.bench 'ExportThroughput' -test.benchtime 1x -test.v -test.timeout 30m |
	grep -E 'round|events/s|new/old'
GOMAXPROCS=1 "$bin" -test.run '^$' -test.bench 'ExportBatchSize' -test.benchtime 1x -test.v -test.timeout 30m |
	grep -E 'round|events/s'
"$bin" -test.run '^$' -test.bench 'ExportStatement' -test.benchtime 1x -test.v -test.timeout 30m | grep -E 'load average|an event'
"$bin" -test.run '^$' -test.bench 'ExportIdle' -test.benchtime 1x -test.v -test.timeout 30m | grep -E 'load average|cmds/s'
"$bin" -test.run '^$' -test.bench 'ExportLagAtRate' -test.benchtime 1x -test.v -test.timeout 60m | grep -E 'load average|lag-p99'
"$bin" -test.run '^$' -test.bench 'ExportLagSimulatedDay' -test.benchtime 1x -test.v -test.timeout 60m | grep -E 'load average|lag-p99'
