#!/usr/bin/env bash
# Installs redis-server (tests and `make run` start their own) from Debian's
# packages when it is missing and we can; otherwise says how.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
pkgs="redis-server redis-tools"
if [ "$(id -u)" = 0 ]; then
  sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo="sudo"
else
  echo "redis-server is missing. Install it with: sudo apt-get install $pkgs" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "redis-server is missing and this is not a Debian-like system: install redis-server (>= 6) by hand." >&2
  exit 1
fi
echo "installing $pkgs from Debian's packages..." >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $pkgs >/dev/null
# Debian starts a system redis on :6379; pacer's tests and dev stack use
# their own servers on Unix sockets and do not need it.
