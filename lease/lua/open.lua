-- open: creates one shard of a campaign-day with its slice of the budget, all of
-- it locked (the pacing curve releases it). Idempotent: an existing shard is left
-- as it is. Reply: {1} opened now, {0} existed.
-- KEYS: state leases exp done audit
-- ARGV: budget now_ms retain_until_ms audit_maxlen
local K = keys_of(KEYS)
local budget, now, retain, maxlen = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if redis.call('EXISTS', K.state) == 1 then return {0} end
redis.call('HSET', K.state, 'budget', str(budget), 'locked', str(budget), 'available', 0,
  'leased', 0, 'spent', 0, 'lost', 0, 'cppb', 0, 'owed', 0, 'seq', 1, 'tip', 0, 'h1', '1:0', 'fence', 0,
  'opened_ms', str(now))
audit(K.audit, maxlen, 'ev', 'open', 'amount', str(budget), 'ms', str(now))
expire_all(K, retain)
return {1}
