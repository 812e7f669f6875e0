-- reassert: a daemon re-records a lease it holds that the ledger forgot (Redis
-- came back with less than it acknowledged). The lease's amount is taken out
-- of what the shard can still grant (available, then locked); if that is not
-- enough, the budget is restored by the shortfall and the same amount is owed,
-- so the shard's target budget is unchanged and the debt is paid from leases
-- as they come back: what the fleet can spend again fits the budget, except
-- what the lost state let someone grant twice before anyone noticed.
-- KEYS: state leases exp done audit moves ops
-- With open_only set (pacerctl recover), a closed shard is left alone.
-- ARGV: lease_id holder amount expiry_ms now_ms audit_maxlen [open_only]
-- Reply: {status, amount, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 re-recorded, 1 the ledger knows it, 2 it was closed (released or settled),
-- 3 the shard is closed (open_only), -1 no such day.
local K = keys_of(KEYS)
local id, holder, amount, expiry = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now, maxlen = tonumber(ARGV[5]), ARGV[6]
local s = load_shard(K.state)
if not s then return no_day() end
if ARGV[7] == '1' and s.closed == 1 then return shard_reply(3, 0, s) end
if redis.call('HEXISTS', K.leases, id) == 1 then return shard_reply(1, 0, s) end
if redis.call('HEXISTS', K.done, id) == 1 then return shard_reply(2, 0, s) end
local short = take_or_owe(s, amount)
s.leased = s.leased + amount
run_add(K, run_field(id), amount, 0)
redis.call('HSET', K.leases, id, str(amount) .. '|' .. holder .. '|' .. str(expiry))
redis.call('ZADD', K.exp, str(expiry), id)
index_expiry(expiry)
store_shard(K.state, s)
audit(K.audit, maxlen, 'ev', 'reassert', 'lease', id, 'holder', holder, 'amount', str(amount),
  'short', str(short), 'expiry', str(expiry), 'ms', str(now))
inherit_ttl(K) -- the leases and exp keys may be new (rare: every key is looked at)
return shard_reply(0, amount, s)
