-- close: marks a shard of a finished campaign-day closed: grants and renewals
-- refuse it from now on (releases and settlement still work), so what is left
-- on it can only shrink, and a carry-over takes exactly what is there.
-- Idempotent.
-- KEYS: state leases exp done audit moves ops
-- ARGV: now_ms audit_maxlen
-- Reply: {status, 0, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 closed now, 1 closed before, -1 no such day.
local K = keys_of(KEYS)
local now, maxlen = tonumber(ARGV[1]), ARGV[2]
local s = load_shard(K.state)
if not s then return no_day() end
if s.closed == 1 then return shard_reply(1, 0, s) end
redis.call('HSET', K.state, 'closed', 1)
s.closed = 1
store_shard(K.state, s)
audit(K.audit, maxlen, 'ev', 'close', 'ms', str(now))
return shard_reply(0, 0, s)
