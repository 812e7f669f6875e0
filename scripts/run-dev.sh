#!/usr/bin/env bash
# `make run`: a local pacer stack in .run/ — a real redis-server (AOF on) on a
# Unix socket, a demo campaign, and pacerd in the foreground. Ctrl-C stops all.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run="$root/.run"
bin="$root/bin"
mkdir -p "$run"
redis_sock="$run/redis.sock"
pacer_sock="$run/pacer.sock"

cleanup() {
  if [ -f "$run/redis.pid" ]; then
    kill "$(cat "$run/redis.pid")" 2>/dev/null || true
    rm -f "$run/redis.pid"
  fi
}
trap cleanup EXIT

if ! redis-cli -s "$redis_sock" ping >/dev/null 2>&1; then
  redis-server --port 0 --unixsocket "$redis_sock" --unixsocketperm 700 --dir "$run" \
    --appendonly yes --daemonize yes --pidfile "$run/redis.pid" --logfile "$run/redis.log"
  for _ in $(seq 100); do
    redis-cli -s "$redis_sock" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
fi

# 86,400 currency units a day: a pace of 1,000,000 micros (1 unit) per second.
"$bin/pacerctl" --redis "$redis_sock" --curves "$root/configs/curves" \
  campaign set demo --daily 86400000000 --tz UTC --curve flat >/dev/null

cat <<MSG

  pacer dev stack
  ---------------
  redis-server   $redis_sock  (ledger, AOF in .run/)
  pacerd socket  $pacer_sock
  campaign       demo: 86,400 units/day, flat curve (1,000,000 micros/s)

  Try, in another terminal:
    redis-cli -s $pacer_sock SPEND demo 1000        # (integer) 1
    redis-cli -s $pacer_sock BALANCE demo
    redis-cli -s $pacer_sock INFO
    redis-benchmark -s $pacer_sock -n 200000 -c 50 SPEND demo 1000   # far above pace: mostly 0s
    $bin/pacerctl --redis $redis_sock campaign get demo
    $bin/pacerctl --redis $redis_sock check

  Ctrl-C stops pacerd (its leases go back to the ledger) and redis-server.

MSG
"$bin/pacerd" --redis "$redis_sock" --socket "$pacer_sock" --curves "$root/configs/curves" \
  --holder "dev-$(hostname)" --admin 127.0.0.1:9464 --log-format console
