-- open: creates one shard of a campaign-day with its slice of the budget, all of
-- it locked (the pacing curve releases it). Idempotent: an existing shard is left
-- as it is. Reply: {1} opened now, {0} existed.
-- KEYS: state leases exp done audit
-- ARGV: budget now_ms retain_until_ms audit_maxlen
local K = keys_of(KEYS)
local budget, now, retain, maxlen = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if redis.call('EXISTS', K.state) == 1 then return {0} end
-- Every field the scripts read or count goes in now, at 0, ahead of the
-- write history (h1..h64, added as seq grows): the hash is a listpack, found
-- field by field from its start, so a field added later (or absent, as
-- closed and frozen_until were until set) cost each call a scan of the
-- whole history.
redis.call('HSET', K.state, 'budget', str(budget), 'locked', str(budget), 'available', 0,
  'leased', 0, 'spent', 0, 'lost', 0, 'cppb', 0, 'owed', 0, 'seq', 1, 'tip', 0, 'closed', 0, 'adv', 0,
  'hr', 0, 'hrel', 0, 'touch', 0, 'frozen_until', 0, 'holds', 0, 'fair_sum', 0, 'fair_supply', 0, 'fair_avail', 0, 'fair_epoch', 0,
  'r_events', 0, 'r_budget', 0, 'r_leases', 0, 'r_granted', 0, 'r_spent', 0, 'r_returned', 0,
  'r_closed', 0, 'r_settled', 0, 'r_lost', 0, 'fence', 0, 'opened_ms', str(now), 'h1', '1:0')
audit(K.audit, maxlen, 'ev', 'open', 'amount', str(budget), 'ms', str(now))
expire_all(K, retain)
return {1}
