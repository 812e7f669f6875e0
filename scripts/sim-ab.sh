#!/usr/bin/env bash
# Runs a simulated day with pacersim built at two revisions, side by side:
# BASE (a git revision, built in a temporary worktree) and the working tree
# run at the same time, each against its own redis-server, so that both see
# the same machine load. Prints, per side, the wall time, pacersim's own
# user+sys CPU seconds, the redis-server's CPU seconds, its ledger script
# calls (EVALSHA and FCALL) and their mean cost (INFO commandstats), and the
# load average before and after.
# CPU seconds are the steadier figure on a shared machine. SIM_AB_SEQUENTIAL=1
# runs base, then new, each alone (for wall times on a quiet machine: at
# once, each side gets about one core). Each side's
# results.json, results.md and plots are kept in $SIM_AB_OUT/base and
# $SIM_AB_OUT/new (default: a new directory under /tmp, named at the end).
# Usage: scripts/sim-ab.sh BASE [SCENARIO] [extra pacersim flags]
# e.g.   scripts/sim-ab.sh main configs/scenarios/default.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
base=$1
scenario=${2:-configs/scenarios/default.yaml}
shift $(( $# < 2 ? $# : 2 ))
command -v redis-server >/dev/null || { echo "redis-server not found: sudo apt-get install redis-server" >&2; exit 1; }
tmp=$(mktemp -d /tmp/sim-ab.XXXXXX)
out=${SIM_AB_OUT:-$(mktemp -d /tmp/sim-ab-out.XXXXXX)}
cleanup() {
	for side in base new; do
		[ -f "$tmp/$side/redis.pid" ] && kill "$(cat "$tmp/$side/redis.pid")" 2>/dev/null || true
	done
	git worktree remove --force "$tmp/src" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add --detach "$tmp/src" "$base" >/dev/null 2>&1
(cd "$tmp/src" && go build -o "$tmp/base.bin" ./cmd/pacersim)
go build -o "$tmp/new.bin" ./cmd/pacersim
for side in base new; do
	mkdir -p "$tmp/$side"
	redis-server --port 0 --unixsocket "$tmp/$side/redis.sock" --save '' --appendonly no \
		--daemonize yes --pidfile "$tmp/$side/redis.pid" --logfile "$tmp/$side/redis.log"
done
for side in base new; do
	for _ in $(seq 50); do [ -S "$tmp/$side/redis.sock" ] && break; sleep 0.1; done
done
echo "# $(date -u +%FT%TZ) $scenario $*; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for side in base new; do
	(
		start=$(date +%s.%N)
		/usr/bin/time -f '%U %S' -o "$tmp/$side/cpu" "$tmp/$side.bin" "$scenario" --quiet \
			--redis "$tmp/$side/redis.sock" --out "$out/$side" "$@" >/dev/null ||
			echo "# $side: pacersim exited non-zero (pacing invariants broken, or an error: see above)"
		echo "$start $(date +%s.%N)" >"$tmp/$side/wall"
	) &
	[ "${SIM_AB_SEQUENTIAL:-0}" = 1 ] && wait
done
wait
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %8s %14s %12s %12s %13s\n' side wall_s pacersim_cpu_s redis_cpu_s script_calls usec_per_call
for side in base new; do
	s=$tmp/$side/redis.sock
	read -r t0 t1 <"$tmp/$side/wall"
	read -r u sy < <(tail -1 "$tmp/$side/cpu") # after time's "Command exited with non-zero status" line, if any
	rcpu=$(redis-cli -s "$s" info cpu | awk -F: '/^used_cpu_(user|sys):/ { c += $2 } END { printf "%.1f", c }')
	ev=$(redis-cli -s "$s" info commandstats | awk -F'[:=,]' '/^cmdstat_(evalsha|fcall):/ { n += $3; us += $5 } END { printf "%d %.2f", n, n ? us / n : 0 }')
	printf '%-5s %8.1f %14.1f %12s %12s %13s\n' "$side" "$(echo "$t1 - $t0" | bc)" "$(echo "$u + $sy" | bc)" "$rcpu" $ev
done
echo "# results: $out/base, $out/new"
