#!/usr/bin/env bash
# Runs Go benchmarks at two revisions side by side: the package's test
# binary is built at BASE (a git revision, in a temporary worktree) and from
# the working tree, and the two run in alternation, ROUNDS times each, so
# that both see the same machine load. Prints every run's lines tagged base
# or new, the load average before each round, and for each benchmark and
# metric the medians and the new/base ratio.
# Usage: scripts/bench-ab.sh BASE PACKAGE BENCH [ROUNDS] [go test -test.* flags]
# e.g.   scripts/bench-ab.sh main ./lease/ 'LeaseCallRedisCPU/aof/32' 3 -test.benchtime=3000x
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
base=$1 pkg=$2 bench=$3 rounds=${4:-3}
shift $(( $# < 4 ? $# : 4 ))
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1
(cd "$tmp/base" && go test -c -o "$tmp/base.test" "$pkg")
go test -c -o "$tmp/new.test" "$pkg"
out=$tmp/runs.txt
for r in $(seq "$rounds"); do
	echo "# round $r: $(cut -d' ' -f1-3 /proc/loadavg) (load average 1, 5, 15 min)" | tee -a "$out"
	for side in base new; do
		dir=$([ "$side" = base ] && echo "$tmp/base/$pkg" || echo "$pkg")
		(cd "$dir" && "$tmp/$side.test" -test.run '^$' -test.bench "$bench" "$@") |
			awk -v side="$side" '/^Benchmark/ { print side, $0 }' | tee -a "$out"
	done
done
echo "# medians over $rounds rounds: benchmark, metric, base, new, new/base"
awk '$1 == "base" || $1 == "new" {
	for (i = 4; i < NF; i += 2) { k = $2 SUBSEP $(i + 1); v[$1, k, ++n[$1, k]] = $i; keys[k] = 1 }
}
function median(side, k,   m, a, i, j, t) {
	m = n[side, k]
	for (i = 1; i <= m; i++) a[i] = v[side, k, i]
	for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
	for (k in keys) {
		split(k, p, SUBSEP)
		b = median("base", k); w = median("new", k)
		printf "%s %s %.4g %.4g %.3f\n", p[1], p[2], b, w, (b ? w / b : 0)
	}
}' "$out" | sort
