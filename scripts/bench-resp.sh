#!/usr/bin/env bash
# `make bench` (after `make build`): pacerd's SPEND over its Unix socket, with
# each of its socket servers (socket_server: epoll, hybrid and goroutines),
# next to what it is judged against, all driven by the same redis-benchmark
# flags and interleaved in one run:
#   floor-uring, floor-epoll,      a bare echo server (internal/tools/respfloor)
#   floor-goroutines               built each way: the syscall floor;
#   floor-hybrid                   the epoll floor reading and writing many
#                                  ready connections with one io_uring_enter
#                                  each;
#   redis-decrby                   redis-server's own DECRBY;
#   lua                            redis-server running the seed article's Lua
#                                  check-and-decrement via EVALSHA;
#   pacerd-epoll, pacerd-hybrid, pacerd-goroutines.
# Each at -c 1, -c 50 and -c 50 -P 16, BENCH_ROUNDS rounds (default 5), the
# order of the servers rotated every round. Per run: rps and latencies as
# redis-benchmark reports them, the server's CPU (utime+stime from
# /proc/<pid>/stat) and redis-benchmark's own CPU per call, and the 1-minute
# load average (/proc/loadavg) just before, and how much CPU everything else
# used during the run: the machine's busy time from /proc/stat minus the
# server's and redis-benchmark's own, in cores. A round in which any run saw
# others use more than BENCH_MAX_OTHER cores (default 0.10) is marked "loaded"
# and run again, up to BENCH_RERUNS (default 1) more times. (The load average
# cannot tell: the benchmark's own two processes keep it near 2 on this 2-core
# machine.) the tables use the quiet rounds if there are any, else every
# round, and say which. Then an open-loop latency run (internal/tools/resplat)
# at fixed rates, with coordinated-omission-corrected percentiles. Prints
# Markdown (see docs/BENCHMARKS.md).
#
# Environment:
#   BENCH_SECONDS      target length of each redis-benchmark run (default 2)
#   BENCH_ROUNDS       rounds (default 5)
#   BENCH_RERUNS       extra runs of a loaded round (default 1)
#   BENCH_MAX_OTHER    cores used by other processes during a run above which
#                      its round is "loaded" (default 0.10)
#   BENCH_LAT_SECONDS  length of each resplat run (default 3)
#   BENCH_LAT_RATES    "rate:conns ..." for resplat (default "10000:1 20000:10")
#   BENCH_SERVERS      which of the servers above to run (default: all of them;
#                      also floor-uring-multishot, respfloor's multishot-recv
#                      variant of the io_uring floor). A floor or pacerd name
#                      ending in @N runs N event loops (socket_loops), e.g.
#                      "floor-epoll@1 pacerd-epoll@1 lua"; a floor named
#                      kind+lock (floor-epoll+lock, floor-hybrid+lock@2) locks
#                      its loops to their threads, as io_uring loops must be
#   BIN                where pacerd and pacerctl are (default: <repo>/bin)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/bin}
seconds=${BENCH_SECONDS:-2}
rounds=${BENCH_ROUNDS:-5}
reruns=${BENCH_RERUNS:-1}
max_other=${BENCH_MAX_OTHER:-0.10}
lat_seconds=${BENCH_LAT_SECONDS:-3}
lat_rates=${BENCH_LAT_RATES:-10000:1 20000:10}
budget=1000000000000000 # 1e15 micros, the largest daily budget: SPEND 1 is always allowed

for tool in redis-server redis-cli redis-benchmark awk getconf go; do
  command -v "$tool" >/dev/null || { echo "bench-resp: $tool not found (make deps installs redis)" >&2; exit 1; }
done
read -r -a servers <<<"${BENCH_SERVERS:-floor-uring floor-epoll floor-hybrid floor-goroutines redis-decrby lua pacerd-epoll pacerd-hybrid pacerd-goroutines}"
has() { # server: is it in the run?
  local s
  for s in "${servers[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}
pacerds=()
for srv in "${servers[@]}"; do [[ $srv == pacerd-* ]] && pacerds+=("$srv"); done
if ((${#pacerds[@]} > 0)); then
  [ -x "$bin/pacerd" ] || { echo "bench-resp: $bin/pacerd not built (make build)" >&2; exit 1; }
fi

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

(cd "$root" && go build -trimpath -o "$tmp/" ./internal/tools/respfloor ./internal/tools/resplat)

ledger_sock=$tmp/ledger.sock # redis-server A: pacerd's ledger
lua_sock=$tmp/lua.sock       # redis-server B: the Lua baseline and DECRBY

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

wait_socket() { # socket name
  local _
  for _ in $(seq 200); do
    [ -S "$1" ] && return 0
    sleep 0.05
  done
  echo "bench-resp: $2 did not create $1" >&2
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

load1() { awk '{ print $1 }' /proc/loadavg; }

# The machine's busy time in clock ticks: every state of /proc/stat's "cpu"
# line but idle and iowait (steal included: another tenant's use of our cores).
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

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

declare -A pid_of sock_of
# A server's name may end in @N: run it with N event loops (socket_loops,
# respfloor -loops) instead of the default.
start_pacerd() { # kind[@loops]
  local name=pacerd-$1 sock=$tmp/pacerd-$1.sock kind=${1%@*} loops=0
  [[ $1 == *@* ]] && loops=${1#*@}
  mkdir -p "$tmp/state-$1"
  cat >"$tmp/$name.yaml" <<YAML
socket: $sock
socket_server: $kind
socket_loops: $loops
redis: ["$ledger_sock"]
admin: ""
holder: bench-$1
curves_dir: $root/configs/curves
state_dir: $tmp/state-$1
# The ledger is not on the SPEND path (leases are fetched ahead); the bench
# ledger runs without persistence, so it cannot meet the fsync policy.
ledger:
  durability: none
log:
  format: console
  level: warn
YAML
  "$bin/pacerd" --config "$tmp/$name.yaml" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  pid_of[$name]=$!
  sock_of[$name]=$sock
  wait_ping "$sock" "$name"
  # Warm-up: the first SPEND loads the campaign and its first lease.
  local _
  for _ in $(seq 100); do
    [ "$(redis-cli -s "$sock" SPEND demo 1)" = 1 ] && break
    sleep 0.05
  done
  [ "$(redis-cli -s "$sock" SPEND demo 1)" = 1 ] || {
    echo "bench-resp: $name does not allow SPEND demo 1; its log:" >&2
    cat "$tmp/$name.log" >&2
    exit 1
  }
}

start_floor() { # kind[+lock][@loops]
  local name=floor-$1 sock=$tmp/floor-$1.sock kind=${1%@*} loops=0 lock=()
  [[ $1 == *@* ]] && loops=${1#*@}
  if [[ $kind == *+lock ]]; then
    kind=${kind%+lock}
    lock=(-lock)
  fi
  "$tmp/respfloor" -socket "$sock" -server "$kind" -loops "$loops" "${lock[@]}" 2>"$tmp/$name.log" &
  pids+=($!)
  pid_of[$name]=$!
  sock_of[$name]=$sock
  wait_socket "$sock" "$name"
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
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

for srv in "${servers[@]}"; do
  case $srv in
  pacerd-*) start_pacerd "${srv#pacerd-}" ;;
  floor-*) start_floor "${srv#floor-}" ;;
  esac
done

lua='local b = tonumber(redis.call('"'"'GET'"'"', KEYS[1]) or '"'"'0'"'"') if b >= tonumber(ARGV[1]) then redis.call('"'"'DECRBY'"'"', KEYS[1], ARGV[1]) return 1 end return 0'
sha=$(redis-cli -s "$lua_sock" SCRIPT LOAD "$lua")
redis-cli -s "$lua_sock" SET 'budget:{demo}:0' "$budget" >/dev/null
redis-cli -s "$lua_sock" SET 'decr:{demo}:0' "$budget" >/dev/null
[ "$(redis-cli -s "$lua_sock" EVALSHA "$sha" 1 'budget:{demo}:0' 1)" = 1 ]
pid_of[lua]=$lua_pid
sock_of[lua]=$lua_sock
pid_of[redis-decrby]=$lua_pid
sock_of[redis-decrby]=$lua_sock

cmd_of() { # server: the command redis-benchmark sends it
  case $1 in
  lua) echo "EVALSHA $sha 1 budget:{demo}:0 1" ;;
  redis-decrby) echo "DECRBY decr:{demo}:0 1" ;;
  *) echo "SPEND demo 1" ;; # echoed back by the floors
  esac
}

# One redis-benchmark run; prints "rps avg p50 p95 p99 max server_cpu_us_per_call
# client_cpu_us_per_call others_cores". The CSV's last line is the one result: "test","rps",
# "avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
# "p99_latency_ms","max_latency_ms".
bench() { # server n flags...
  local srv=$1 n=$2
  shift 2
  local pid=${pid_of[$srv]} sock=${sock_of[$srv]} t0 t1 b0 b1 TIMEFORMAT='%3U %3S %3R'
  local cmd
  read -r -a cmd <<<"$(cmd_of "$srv")"
  t0=$(cpu_ticks "$pid")
  b0=$(busy_ticks)
  { time redis-benchmark -s "$sock" -n "$n" "$@" --csv "${cmd[@]}" >"$tmp/out.csv" 2>/dev/null; } 2>"$tmp/time"
  b1=$(busy_ticks)
  t1=$(cpu_ticks "$pid")
  awk -v line="$(tail -n 1 "$tmp/out.csv")" -v client="$(cat "$tmp/time")" -v ticks=$((t1 - t0)) \
    -v busy=$((b1 - b0)) -v hz="$(getconf CLK_TCK)" -v n="$n" 'BEGIN {
    nf = split(line, f, "\",\"")
    if (nf < 8) { print "bad redis-benchmark output: " line > "/dev/stderr"; exit 1 }
    gsub(/"/, "", f[8])
    split(client, c, " ")
    others = (busy - ticks) / hz - (c[1] + c[2])
    if (others < 0) others = 0
    printf "%s %s %s %s %s %s %.2f %.2f %.2f\n", f[2], f[3], f[5], f[6], f[7], f[8], ticks / hz * 1e6 / n, (c[1] + c[2]) * 1e6 / n, others / (c[3] > 0 ? c[3] : 1)
  }'
}

spend_counter() { # pacerd-kind INFO-field
  redis-cli -s "${sock_of[$1]}" INFO | tr -d '\r' | awk -F: -v k="$2" '$1 == k { print $2 }'
}

flagsets=("-c 1" "-c 50" "-c 50 -P 16")

# Warm every server (and the page cache, the CPU frequency, pacerd's demand
# estimate) with a short run of the heaviest flags, then size -n per server
# and flag set so each run lasts about $seconds.
declare -A n_of
for srv in "${servers[@]}"; do
  bench "$srv" 200000 -c 50 -P 16 >/dev/null
done
for fs in "${flagsets[@]}"; do
  # shellcheck disable=SC2206 # the flags are meant to split
  flags=($fs)
  calib=20000
  [[ $fs == *-P* ]] && calib=200000
  for srv in "${servers[@]}"; do
    r=$(bench "$srv" "$calib" "${flags[@]}" | awk '{ printf "%d", $1 }')
    n_of[$srv,$fs]=$(awk -v r="$r" -v s="$seconds" 'BEGIN { printf "%d", r * s }')
  done
done

declare -A allowed0
for srv in "${pacerds[@]}"; do
  allowed0[$srv]=$(spend_counter "$srv" spend_allowed)
done

# One round: every flag set, every server, the servers' order rotated by the
# round's number. Lines: "round|mark|flags|server|load1|n|rps avg p50 p95 p99
# max cpu client_cpu others".
run_round() { # round-number attempt
  local round=$1 attempt=$2 fs flags srv k i others=() lines=() l r
  for fs in "${flagsets[@]}"; do
    # shellcheck disable=SC2206
    flags=($fs)
    for ((k = 0; k < ${#servers[@]}; k++)); do
      i=$(((k + round) % ${#servers[@]}))
      srv=${servers[$i]}
      l=$(load1)
      r=$(bench "$srv" "${n_of[$srv,$fs]}" "${flags[@]}")
      others+=("${r##* }")
      lines+=("$fs|$srv|$l|${n_of[$srv,$fs]}|$r")
    done
  done
  local mark=quiet
  for l in "${others[@]}"; do
    if awk -v l="$l" -v m="$max_other" 'BEGIN { exit !(l > m) }'; then mark=loaded; fi
  done
  for l in "${lines[@]}"; do
    echo "$round.$attempt|$mark|$l" >>"$tmp/raw"
  done
  [ "$mark" = quiet ]
}

for round in $(seq "$rounds"); do
  attempt=0
  until run_round "$round" "$attempt" || ((attempt >= reruns)); do
    attempt=$((attempt + 1))
  done
done

allowed=""
for srv in "${pacerds[@]}"; do
  allowed+="$srv allowed $(($(spend_counter "$srv" spend_allowed) - ${allowed0[$srv]})) SPENDs; "
done

quiet_rounds=$(awk -F'|' '$2 == "quiet" { q[$1] = 1 } END { print length(q) }' "$tmp/raw")
all_rounds=$(awk -F'|' '{ a[$1] = 1 } END { print length(a) }' "$tmp/raw")

# Tables: per flag set, one row per server, the median over the rounds used
# (quiet ones if any) of each column, and the ratios the goals are set in.
table() {
  awk -F'|' -v use="$1" '
    function median(v, k,   t, i, j, x) {
      for (i = 1; i <= k; i++) t[i] = v[i]
      for (i = 2; i <= k; i++) { x = t[i]; for (j = i - 1; j >= 1 && t[j] > x; j--) t[j + 1] = t[j]; t[j + 1] = x }
      return k % 2 ? t[(k + 1) / 2] : (t[k / 2] + t[k / 2 + 1]) / 2
    }
    use == "quiet" && $2 != "quiet" { next }
    {
      fs = $3; s = $4
      if (!(fs in seenf)) { seenf[fs] = 1; forder[++nf] = fs }
      if (!(s in seens)) { seens[s] = 1; sorder[++ns] = s }
      k = ++cnt[fs, s]
      split($7, a, " ")
      for (i = 1; i <= 9; i++) V[fs, s, i, k] = a[i]
      LD[fs, s, k] = $5
    }
    END {
      for (o = 1; o <= nf; o++) {
        fs = forder[o]
        printf "\n### `%s`\n\n", fs
        print "| server | rps | p50 ms | p99 ms | server CPU µs/call | client CPU µs/call | others (cores) | load avg | rounds |"
        print "|---|---|---|---|---|---|---|---|---|"
        for (q = 1; q <= ns; q++) {
          s = sorder[q]; k = cnt[fs, s]
          for (i = 1; i <= 9; i++) { delete v; for (r = 1; r <= k; r++) v[r] = V[fs, s, i, r]; M[s, i] = median(v, k) }
          delete v; for (r = 1; r <= k; r++) v[r] = LD[fs, s, r]; ld = median(v, k)
          printf "| %s | %.0f | %.3f | %.3f | %.2f | %.2f | %.2f | %.2f | %d |\n", s, M[s, 1], M[s, 3], M[s, 5], M[s, 7], M[s, 8], M[s, 9], ld, k
        }
        print ""
        for (q = 1; q <= ns; q++) {
          p = sorder[q]
          if (p !~ /^(pacerd|floor)-/ || !(("lua", 7) in M)) continue
          fl = p; sub(/^pacerd-/, "floor-", fl)
          printf "- %s: CPU/call %.2fx Lua", p, M[p, 7] / M["lua", 7]
          if (p != fl && ((fs, fl) in cnt)) printf ", %.2fx its floor; p50 %.2fx its floor", M[p, 7] / M[fl, 7], M[p, 3] / M[fl, 3]
          printf "; rps %.2fx Lua", M[p, 1] / M["lua", 1]
          if ((fs, "redis-decrby") in cnt) printf ", %.2fx DECRBY", M[p, 1] / M["redis-decrby", 1]
          printf "\n"
        }
      }
    }' "$tmp/raw"
}

echo "## SPEND over the socket vs. the floors, DECRBY and EVALSHA (redis-benchmark, interleaved)"
echo
echo "$all_rounds round(s) run ($quiet_rounds quiet: in every run other processes used <= $max_other"
echo "cores, the machine's busy time minus the server's and redis-benchmark's), ~${seconds}s per run."
echo "Latencies as redis-benchmark reports them; CPU is the server's utime+stime per call from"
echo "/proc/<pid>/stat (tick $(getconf CLK_TCK) Hz) and redis-benchmark's own user+sys per call."
echo "Medians per column over the rounds used. (pacerd's \"others\" include its ledger's Redis.)"
if ((quiet_rounds > 0)); then
  echo "The tables use the $quiet_rounds quiet round(s) only."
  table quiet
else
  echo
  echo "**No round was quiet: every table below was measured under load from other work on this"
  echo "machine, and its ratios say nothing reliable about the goals.**"
  table all
fi
echo
echo "Every run (round.attempt | quiet/loaded | flags | server | load avg before | n | rps avg p50 p95 p99 max(ms) server_cpu client_cpu(µs/call) others(cores)):"
echo
sed 's/^/    /' "$tmp/raw"
echo
[ -n "$allowed" ] && echo "In the measured runs: $allowed"

# Open-loop latency at fixed rates (resplat): interleaved servers, one run each.
echo
echo "## Open-loop latency at fixed rates (resplat)"
echo
echo "${lat_seconds}s per run after 0.5s of warm-up; latencies in µs. \"corrected\" counts from when each"
echo "request was due (no coordinated omission), \"raw\" from when it was written; \"lag\" is the"
echo "client's own scheduling delay (written minus due), included in the corrected figures."
echo
echo "| server | rate | conns | load avg | p50 | p99 | p99.9 | max | raw p50 | raw p99 | raw p99.9 | lag p50 | lag p99 | achieved rps | errors |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for rc in $lat_rates; do
  rate=${rc%:*}
  conns=${rc#*:}
  for srv in "${servers[@]}"; do
    [ "$srv" = redis-decrby ] && continue
    read -r -a cmd <<<"$(cmd_of "$srv")"
    l=$(load1)
    out=$("$tmp/resplat" -socket "${sock_of[$srv]}" -rate "$rate" -conns "$conns" \
      -duration "${lat_seconds}s" "${cmd[@]}" 2>&1 | tail -n 1) || true
    awk -v srv="$srv" -v l="$l" -v line="$out" 'BEGIN {
      n = split(line, kv, " ")
      for (i = 1; i <= n; i++) { split(kv[i], p, "="); f[p[1]] = p[2] }
      if (!("p50" in f)) { printf "| %s | resplat failed: %s |\n", srv, line; exit }
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", srv, f["rate"], f["conns"], l,
        f["p50"], f["p99"], f["p999"], f["max"], f["raw_p50"], f["raw_p99"], f["raw_p999"], f["lag_p50"], f["lag_p99"], f["achieved_rps"], f["errors"]
    }'
  done
done

for srv in "${pacerds[@]}"; do
  if grep -qiE 'error|panic' "$tmp/$srv.log"; then
    echo
    echo "$srv log (errors):"
    grep -iE 'error|panic' "$tmp/$srv.log" | tail -n 5
  fi
done
