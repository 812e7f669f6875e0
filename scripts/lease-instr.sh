#!/usr/bin/env bash
# Counts what a ledger script call costs redis-server in instructions, a
# measure the machine's load does not change: BenchmarkLeaseCallRedisCPU's
# CASE runs OPS times against a redis-server under valgrind's callgrind, and
# the instructions inside fcallCommand (the scripts and the commands they
# run; not the socket, the request parsing or serverCron) are divided by the
# FCALLs made. BASE (a git revision, built in a temporary worktree) and the
# working tree are measured one after the other; repeats agree within ~0.2%.
# PACER_LEASE_PACKED=1 in the environment turns ledger.packed_counters on
# (a BASE before it ignores it).
# Usage: scripts/lease-instr.sh BASE [CASE] [OPS]
# e.g.   scripts/lease-instr.sh main none/1-clients/busy 300
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
base=$1 case=${2:-none/1-clients/busy} ops=${3:-300}
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
	{ echo "valgrind not found: sudo apt-get install valgrind" >&2; exit 1; }
server=$(command -v "${PACER_REDIS_SERVER:-redis-server}") ||
	{ echo "redis-server not found: sudo apt-get install redis-server" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1
(cd "$tmp/base" && go test -c -o "$tmp/base.test" ./lease/)
go test -c -o "$tmp/new.test" ./lease/
for side in base new; do
	out=$tmp/$side
	mkdir -p "$out"
	printf '#!/bin/sh\nexec valgrind -q --tool=callgrind --callgrind-out-file=%s/cg.%%p %s "$@"\n' "$out" "$server" >"$out/redis.sh"
	chmod +x "$out/redis.sh"
	dir=$([ "$side" = base ] && echo "$tmp/base/lease" || echo lease)
	(cd "$dir" && PACER_REDIS_SERVER=$out/redis.sh "$tmp/$side.test" -test.run '^$' \
		-test.bench "LeaseCallRedisCPU/$case\$" -test.benchtime "${ops}x" >/dev/null)
	f=$(ls -S "$out"/cg.* | sed -n 1p) # the OPS run's server (the benchmark's first, 1x run is smaller)
	calls=$(callgrind_annotate --tree=caller "$f" | grep -B3 '\*  ???:fcallCommand \[' | grep -o '([0-9,]*x)' | tr -d '(),x' | sed -n 1p)
	instr=$(callgrind_annotate --inclusive=yes "$f" | awk '!n && / \?\?\?:fcallCommand \[/ { gsub(",", "", $1); print $1; n = 1 }')
	echo "$side $case: $((instr / calls)) instructions per script call ($calls FCALLs)"
done
