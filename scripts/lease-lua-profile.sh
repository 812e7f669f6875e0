#!/usr/bin/env bash
# Where a lease call's Lua goes, by function and by line: records the
# FCALLs of BenchmarkLeaseCallRedisCPU's CASE (OPS ops) on a real
# redis-server, with every redis.call's arguments and reply, and replays
# the grants, renewals and releases under Debian's lua5.1 (the Lua Redis
# embeds) with a count hook (scripts/lease-lua-profile.lua). The working
# tree's lease/ is copied into a temporary worktree whose library is
# patched to record (nothing in the tree is changed). Counts are Lua VM
# instructions, which the machine's load does not move; the replay also
# checks that every command's arguments and every reply are the recorded
# ones, so RECORD=FILE keeps the record, and LUADIR=DIR replays it against
# other scripts (a change that kept every command and reply shows "0 differ").
# PACER_LEASE_PACKED=1 turns ledger.packed_counters on.
# Usage: scripts/lease-lua-profile.sh [CASE] [OPS]
# e.g.   PACER_LEASE_PACKED=1 scripts/lease-lua-profile.sh none/1-clients/busy 300
set -euo pipefail
cd "$(dirname "$0")/.."
case=${1:-none/1-clients/busy} ops=${2:-300}
command -v lua5.1 >/dev/null || { echo "lua5.1 not found: sudo apt-get install lua5.1" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 not found: sudo apt-get install python3" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/rec" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
record=${RECORD:-$tmp/record.lua}
git worktree add --detach "$tmp/rec" HEAD >/dev/null 2>&1
cp -r lease/. "$tmp/rec/lease/"
python3 - "$tmp/rec" <<'PY'
import sys
root = sys.argv[1]
def patch(path, old, new, append=False):
    p = root + '/' + path
    s = open(p).read()
    if append:
        s += new
    else:
        if s.count(old) != 1:
            sys.exit('lease-lua-profile: cannot patch %s (%r not found once)' % (path, old[:60]))
        s = s.replace(old, new)
    open(p, 'w').write(s)
# Each function's body runs inside a closure whose reply is recorded.
patch('lease/functions.go',
      'begin_call()\\n")\n\t\tb.WriteString(nb[1])\n\t\tb.WriteString("\\nend}\\n")',
      'begin_call()\\nrecord_begin(\'" + nb[0] + "\')\\nlocal reply = (function()\\n")\n\t\tb.WriteString(nb[1])\n\t\tb.WriteString("\\nend)()\\nrecord_end(reply)\\nreturn reply\\nend}\\n")')
# The prelude's redis_call records each command; the call is appended to a list.
patch('lease/lua/prelude.lua', None, r'''
local record = nil
local function serialize(v)
  local t = type(v)
  if t == 'string' then return string.format('%q', v) end
  if t == 'number' then return string.format('%.17g', v) end
  if t ~= 'table' then return tostring(v) end
  local parts = {}
  for k, x in pairs(v) do parts[#parts + 1] = '[' .. serialize(k) .. ']=' .. serialize(x) end
  return '{' .. table.concat(parts, ',') .. '}'
end
local function record_begin(name)
  record = {fn = name, keys = KEYS, argv = ARGV, calls = {}}
  local call = redis.call
  redis_call = function(...)
    local r = call(...)
    record.calls[#record.calls + 1] = {args = {...}, reply = r}
    return r
  end
end
local function record_end(reply)
  record.res = reply
  redis.call('RPUSH', 'lease-lua-profile', serialize(record))
end
''', append=True)
# The benchmark writes the list out when its ops are done.
patch('lease/cost_bench_test.go',
      '\tb.StopTimer()\n\tscripts, cmds := commandCounts(b, srv)\n\tb.ReportMetric((serverCPU(b, srv)-cpu0)*1e6/float64(scripts), "redis-cpu-µs/call")\n\tb.ReportMetric(float64(cmds)/float64(scripts), "redis-cmds/call")\n}\n\nfunc benchSettleCalls(',
      '\tb.StopTimer()\n\tif recs, err := rdb.LRange(ctx, "lease-lua-profile", 0, -1).Result(); err != nil {\n\t\tb.Fatal(err)\n\t} else if err := os.WriteFile(os.Getenv("LEASE_LUA_PROFILE"), []byte("return {\\n"+strings.Join(recs, ",\\n")+"\\n}\\n"), 0o644); err != nil {\n\t\tb.Fatal(err)\n\t}\n\tscripts, cmds := commandCounts(b, srv)\n\tb.ReportMetric((serverCPU(b, srv)-cpu0)*1e6/float64(scripts), "redis-cpu-µs/call")\n\tb.ReportMetric(float64(cmds)/float64(scripts), "redis-cmds/call")\n}\n\nfunc benchSettleCalls(')
PY
(cd "$tmp/rec/lease" && LEASE_LUA_PROFILE=$record go test -run '^$' -bench "LeaseCallRedisCPU/$case\$" \
	-benchtime "${ops}x" . >/dev/null)
lua5.1 scripts/lease-lua-profile.lua "${LUADIR:-lease/lua}" "$record"
