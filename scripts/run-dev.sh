#!/usr/bin/env bash
# `make run`: a local pacer fleet in .run/ — a real redis-server (AOF on), an
# embedded etcd and NATS, a demo campaign and three pacerd on their own Unix
# sockets, and PostgreSQL with pacer-export when postgresql-15 is installed
# (cmd/pacer-dev). Ctrl-C stops everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exec bin/pacer-dev --dir .run --bin bin --curves configs/curves "$@"
