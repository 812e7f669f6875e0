#!/usr/bin/env bash
# `make bench` (after `make build`): SPEND over pacerd's Unix socket next to
# redis-server running the seed article's Lua check-and-decrement via EVALSHA,
# with the same redis-benchmark flags, interleaved in one run, plus each
# server's CPU time per call from /proc/<pid>/stat. Prints machine info and a
# Markdown table (see docs/BENCHMARKS.md).
#
# Environment:
#   BENCH_SECONDS  target length of each redis-benchmark run (default 3)
#   BENCH_ROUNDS   how many times to repeat the whole set, alternating which
#                  server goes first (default 1)
#   BIN            where pacerd and pacerctl are (default: <repo>/bin)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/bin}
seconds=${BENCH_SECONDS:-3}
rounds=${BENCH_ROUNDS:-1}
budget=1000000000000000 # 1e15 micros, the largest daily budget: SPEND 1 is always allowed

for tool in redis-server redis-cli redis-benchmark awk getconf; do
  command -v "$tool" >/dev/null || { echo "bench-resp: $tool not found (make deps installs redis)" >&2; exit 1; }
done
[ -x "$bin/pacerd" ] || { echo "bench-resp: $bin/pacerd not built (make build)" >&2; exit 1; }

# Short path: Unix socket paths are limited to ~104 bytes.
tmp=$(mktemp -d /tmp/pacer-bench.XXXXXX)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ledger_sock=$tmp/ledger.sock # redis-server A: pacerd's ledger
lua_sock=$tmp/lua.sock       # redis-server B: the Lua baseline
pacer_sock=$tmp/pacer.sock

wait_ping() { # socket name
  local _
  for _ in $(seq 200); do
    [ "$(redis-cli -s "$1" PING 2>/dev/null)" = PONG ] && return 0
    sleep 0.05
  done
  echo "bench-resp: $2 did not answer PING on $1; its log:" >&2
  cat "$tmp/$2.log" >&2 || true
  exit 1
}

start_redis() { # name socket
  mkdir -p "$tmp/$1"
  redis-server --port 0 --unixsocket "$2" --unixsocketperm 700 --dir "$tmp/$1" \
    --appendonly no --save '' --logfile "$tmp/$1.log" --daemonize no &
  pids+=($!)
  wait_ping "$2" "$1"
}

# utime+stime of a process, in clock ticks (fields 14 and 15 of
# /proc/<pid>/stat, counted after the ")" that ends the command name).
cpu_ticks() {
  local stat
  stat=$(</proc/"$1"/stat)
  stat=${stat##*) }
  awk '{ print $12 + $13 }' <<<"$stat"
}

echo "## Machine"
echo
echo "- nproc: $(nproc)"
echo "- CPU: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
echo "- kernel: $(uname -srm)"
echo "- $(redis-server --version)"
echo "- $(redis-benchmark --version 2>/dev/null || echo 'redis-benchmark (version unknown)')"
echo "- $(go version 2>/dev/null || echo 'go: not on PATH')"
echo "- pacerd: $("$bin/pacerd" --version 2>/dev/null || echo unknown)"
echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo

start_redis ledger "$ledger_sock"
start_redis lua "$lua_sock"
ledger_pid=${pids[0]}
lua_pid=${pids[1]}

# The campaign: pacerctl if it is built and works, else the ledger's hash
# directly (the layout lease.PutCampaign writes).
if ! { [ -x "$bin/pacerctl" ] && "$bin/pacerctl" --redis "$ledger_sock" \
  campaign set demo --daily "$budget" --tz UTC --curve flat --shards 8 >/dev/null 2>&1; }; then
  echo "(pacerctl unavailable: campaign created with redis-cli)" >&2
  redis-cli -s "$ledger_sock" HSET pacer:campaign:demo daily "$budget" tz UTC curve flat \
    shards 8 state active version 1 >/dev/null
  redis-cli -s "$ledger_sock" SADD pacer:campaigns demo >/dev/null
fi

mkdir -p "$tmp/state"
cat >"$tmp/pacerd.yaml" <<YAML
socket: $pacer_sock
redis: ["$ledger_sock"]
admin: ""
holder: bench
curves_dir: $root/configs/curves
state_dir: $tmp/state
log:
  format: console
  level: warn
YAML
"$bin/pacerd" --config "$tmp/pacerd.yaml" >"$tmp/pacerd.log" 2>&1 &
pids+=($!)
pacer_pid=$!
wait_ping "$pacer_sock" pacerd

# Warm-up: the first SPEND loads the campaign and its first lease; then a burst
# so the demand estimate and the leases are those of a busy host.
for _ in $(seq 100); do
  [ "$(redis-cli -s "$pacer_sock" SPEND demo 1)" = 1 ] && break
  sleep 0.05
done
[ "$(redis-cli -s "$pacer_sock" SPEND demo 1)" = 1 ] || {
  echo "bench-resp: pacerd does not allow SPEND demo 1; its log:" >&2
  cat "$tmp/pacerd.log" >&2
  exit 1
}

lua='local b = tonumber(redis.call('"'"'GET'"'"', KEYS[1]) or '"'"'0'"'"') if b >= tonumber(ARGV[1]) then redis.call('"'"'DECRBY'"'"', KEYS[1], ARGV[1]) return 1 end return 0'
sha=$(redis-cli -s "$lua_sock" SCRIPT LOAD "$lua")
redis-cli -s "$lua_sock" SET 'budget:{demo}:0' "$budget" >/dev/null
[ "$(redis-cli -s "$lua_sock" EVALSHA "$sha" 1 'budget:{demo}:0' 1)" = 1 ]

pacer_cmd=(SPEND demo 1)
lua_cmd=(EVALSHA "$sha" 1 'budget:{demo}:0' 1)

# One redis-benchmark run; prints "rps avg p50 p95 p99 max server_cpu_us_per_call
# client_cpu_us_per_call". The CSV's last line is the one result: "test","rps",
# "avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
# "p99_latency_ms","max_latency_ms".
bench() { # pid socket n flags... -- command...
  local pid=$1 sock=$2 n=$3
  shift 3
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  local t0 t1 TIMEFORMAT='%3U %3S'
  t0=$(cpu_ticks "$pid")
  { time redis-benchmark -s "$sock" -n "$n" "${flags[@]}" --csv "$@" >"$tmp/out.csv" 2>/dev/null; } 2>"$tmp/time"
  t1=$(cpu_ticks "$pid")
  awk -v line="$(tail -n 1 "$tmp/out.csv")" -v client="$(cat "$tmp/time")" -v ticks=$((t1 - t0)) \
    -v hz="$(getconf CLK_TCK)" -v n="$n" 'BEGIN {
    nf = split(line, f, "\",\"")
    if (nf < 8) { print "bad redis-benchmark output: " line > "/dev/stderr"; exit 1 }
    gsub(/"/, "", f[8])
    split(client, c, " ")
    printf "%s %s %s %s %s %s %.2f %.2f\n", f[2], f[3], f[5], f[6], f[7], f[8], ticks / hz * 1e6 / n, (c[1] + c[2]) * 1e6 / n
  }'
}

rps_of() { awk '{ printf "%d", $1 }' <<<"$1"; }

spend_counter() { # INFO field of pacerd
  redis-cli -s "$pacer_sock" INFO | tr -d '\r' | awk -F: -v k="$1" '$1 == k { print $2 }'
}

flagsets=("-c 1" "-c 50" "-c 50 -P 16")

# Warm both servers (and the page cache, the CPU frequency, pacerd's demand
# estimate) with a short run of the heaviest flags.
bench "$pacer_pid" "$pacer_sock" 500000 -c 50 -P 16 -- "${pacer_cmd[@]}" >/dev/null
bench "$lua_pid" "$lua_sock" 500000 -c 50 -P 16 -- "${lua_cmd[@]}" >/dev/null

paced0=$(spend_counter spend_paced)
allowed0=$(spend_counter spend_allowed)
for round in $(seq "$rounds"); do
  for fs in "${flagsets[@]}"; do
    # shellcheck disable=SC2206 # the flags are meant to split
    flags=($fs)
    # Size -n so each run lasts about $seconds: a short calibration of both,
    # then the geometric mean of their rates, the same n for both.
    calib=20000
    [[ $fs == *-P* ]] && calib=200000
    rp=$(rps_of "$(bench "$pacer_pid" "$pacer_sock" "$calib" "${flags[@]}" -- "${pacer_cmd[@]}")")
    rl=$(rps_of "$(bench "$lua_pid" "$lua_sock" "$calib" "${flags[@]}" -- "${lua_cmd[@]}")")
    n=$(awk -v a="$rp" -v b="$rl" -v s="$seconds" 'BEGIN { printf "%d", sqrt(a * b) * s }')
    # Interleaved, alternating which server goes first from round to round.
    if ((round % 2)); then
      p=$(bench "$pacer_pid" "$pacer_sock" "$n" "${flags[@]}" -- "${pacer_cmd[@]}")
      l=$(bench "$lua_pid" "$lua_sock" "$n" "${flags[@]}" -- "${lua_cmd[@]}")
    else
      l=$(bench "$lua_pid" "$lua_sock" "$n" "${flags[@]}" -- "${lua_cmd[@]}")
      p=$(bench "$pacer_pid" "$pacer_sock" "$n" "${flags[@]}" -- "${pacer_cmd[@]}")
    fi
    echo "$fs|$n|$p|$l" >>"$tmp/raw"
  done
done
paced=$(($(spend_counter spend_paced) - paced0))
allowed=$(($(spend_counter spend_allowed) - allowed0))

# The table: one row per flag set, the median over the rounds of each column
# (with one round, the figures themselves).
table() {
  awk -F'|' -v rounds="$rounds" '
    function median(v, k,   t, i, j, x) {
      for (i = 1; i <= k; i++) t[i] = v[i]
      for (i = 2; i <= k; i++) { x = t[i]; for (j = i - 1; j >= 1 && t[j] > x; j--) t[j + 1] = t[j]; t[j + 1] = x }
      return k % 2 ? t[(k + 1) / 2] : (t[k / 2] + t[k / 2 + 1]) / 2
    }
    {
      if (!($1 in seen)) { seen[$1] = 1; order[++nfs] = $1 }
      k = ++cnt[$1]; ns[$1] = $2
      split($3, a, " "); split($4, b, " ")
      for (i = 1; i <= 8; i++) { P[$1, i, k] = a[i]; L[$1, i, k] = b[i] }
    }
    END {
      print "| flags | pacerd rps | Lua rps | ratio | pacerd p50/p99 ms | Lua p50/p99 ms | pacerd CPU µs/call | Lua CPU µs/call | ratio |"
      print "|---|---|---|---|---|---|---|---|---|"
      for (o = 1; o <= nfs; o++) {
        fs = order[o]; k = cnt[fs]
        for (i = 1; i <= 8; i++) {
          delete v; for (r = 1; r <= k; r++) v[r] = P[fs, i, r]; pm[i] = median(v, k)
          delete v; for (r = 1; r <= k; r++) v[r] = L[fs, i, r]; lm[i] = median(v, k)
          delete v; for (r = 1; r <= k; r++) v[r] = P[fs, 1, r] / L[fs, 1, r]; rr = median(v, k)
          delete v; for (r = 1; r <= k; r++) v[r] = P[fs, 7, r] / L[fs, 7, r]; cr = median(v, k)
        }
        printf "| `%s` | %.0f | %.0f | %.2fx | %.3f / %.3f | %.3f / %.3f | %.2f | %.2f | %.2fx |\n",
          fs, pm[1], lm[1], rr, pm[3], pm[5], lm[3], lm[5], pm[7], lm[7], cr
        client = client sprintf("| `%s` | %.2f | %.2f |\n", fs, pm[8], lm[8])
      }
      print ""
      print "redis-benchmark'"'"'s own CPU per call (user+sys), the client both share:"
      print ""
      print "| flags | client CPU µs/call vs pacerd | client CPU µs/call vs Lua |"
      print "|---|---|---|"
      printf "%s", client
    }' "$tmp/raw"
}

echo "## SPEND over the socket vs. EVALSHA (redis-benchmark, interleaved)"
echo
echo "$rounds round(s) of ~${seconds}s runs, same -n for both servers; median per column."
echo "Latencies as redis-benchmark reports them; CPU is the server's utime+stime per"
echo "call from /proc/<pid>/stat (tick $(getconf CLK_TCK) Hz). Ratios are pacerd / Lua."
echo
table
if ((rounds > 1)); then
  echo
  echo "Every run (flags | n | pacerd: rps avg p50 p95 p99 max cpu client_cpu | Lua: same):"
  echo
  sed 's/^/    /' "$tmp/raw"
fi
echo
echo "pacerd answered $allowed SPENDs allowed and $paced paced during the calibration and measured runs."
if grep -qiE 'error|panic' "$tmp/pacerd.log"; then
  echo
  echo "pacerd log (errors):"
  grep -iE 'error|panic' "$tmp/pacerd.log" | tail -n 5
fi
