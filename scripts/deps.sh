#!/usr/bin/env bash
# Installs what the tests and `make run` need, when it is missing and we can:
#   - redis-server and redis-cli (tests and `make run` start their own servers),
#   - the compatibility suite's clients (compat/): Debian's python3-redis for
#     /usr/bin/python3, and Node with ioredis and node-redis pinned in
#     compat/node/package-lock.json, installed in compat/node/node_modules,
#   - postgresql-15 (the exporter's tests run its initdb and pg_ctl),
#   - promtool, from Debian's prometheus package (the alerting rules' tests),
#   - lintian (`make deb-check` lints the Debian package).
# Idempotent: a second run installs nothing. Otherwise it says what to run.
# `scripts/deps.sh run` installs only what `make run` needs: redis, and
# postgresql-15 when it can install it (root or passwordless sudo; without
# it `make run` starts the fleet without PostgreSQL and says so).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
only_run=false
[ "${1:-}" = run ] && only_run=true

pkgs=()
command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || pkgs+=(redis-tools)
can_install=false
if [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
  can_install=true
fi
if $only_run && [ ! -x /usr/lib/postgresql/15/bin/initdb ]; then
  if $can_install && command -v apt-get >/dev/null 2>&1; then
    pkgs+=(postgresql-15) # make run's PostgreSQL and pacer-export
  else
    echo "postgresql-15 is not installed: make run starts the fleet without PostgreSQL and pacer-export (sudo apt-get install postgresql-15 adds them)" >&2
  fi
fi
if ! $only_run; then
  if ! /usr/bin/python3 -c 'import redis' >/dev/null 2>&1; then
    pkgs+=(python3 python3-redis)
  fi
  # PostgreSQL 15 for the exporter's tests (export/, cmd/pacer-export,
  # pacerctl reconcile): they run initdb and pg_ctl from Debian's versioned
  # server directory (internal/pgtest), never a system cluster.
  [ -x /usr/lib/postgresql/15/bin/initdb ] || pkgs+=(postgresql-15)
  # promtool (Debian's prometheus package) for the alerting rules' tests
  # (cmd/pacerd TestAlertRules: promtool check rules / test rules).
  command -v promtool >/dev/null 2>&1 || pkgs+=(prometheus)
  # lintian for `make deb-check` (packaging/deb_test.go); dpkg-deb is in dpkg.
  command -v lintian >/dev/null 2>&1 || pkgs+=(lintian)
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi

if [ ${#pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    sudo=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo"
  else
    echo "missing: ${pkgs[*]}. Install them with: sudo apt-get install ${pkgs[*]} (then run scripts/deps.sh again)" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing: ${pkgs[*]}, and this is not a Debian-like system: install redis-server (>= 6; >= 7 for pacer-export), redis-cli, python3 with redis-py, PostgreSQL 15 (set PACER_PG_BIN to its bin directory), promtool (Prometheus), and Node >= 18 with npm by hand." >&2
    exit 1
  fi
  echo "installing ${pkgs[*]} from Debian's packages..." >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${pkgs[@]}" >/dev/null
  # Debian starts a system redis on :6379; pacer's tests and dev stack use
  # their own servers on Unix sockets and do not need it.
fi

$only_run && exit 0

# Node clients, exactly as package-lock.json pins them. npm ci wipes and
# reinstalls, so run it only when the lock file changed since the last run.
node_dir="$root/compat/node"
stamp="$node_dir/node_modules/.package-lock.json"
if [ ! -f "$stamp" ] || [ "$node_dir/package-lock.json" -nt "$stamp" ]; then
  echo "installing the Node clients of the compatibility suite (npm ci in compat/node)..." >&2
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
