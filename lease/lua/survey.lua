-- survey: what the reconciler's full look reads of one of a campaign's
-- today's shards (Ledger.SurveyCampaigns), and the reconciler's fencing
-- token recorded on it, as a settle would: a deposed leader's later writes
-- there are refused. One call a shard, pipelined with the others. Not money:
-- no history step.
-- KEYS: state moves exp
-- ARGV: fence cutoff_ms
-- Reply: {status, expired, moves, fields}; status 0 read (the fence recorded,
-- or already), -1 no such shard (nothing recorded), -3 fenced off (a newer
-- token was seen; nothing else read); expired: the leases whose expiry is
-- before cutoff_ms; moves: the moves hash's records; fields: budget locked
-- available leased spent lost owed seq tip closed fence (Go's shardFields
-- then fence).
local v = redis.call('HMGET', KEYS[1], 'budget', 'locked', 'available', 'leased', 'spent', 'lost', 'owed', 'seq', 'tip', 'closed', 'fence')
if not v[1] then return {-1, 0, {}, {}} end
local fence, seen = tonumber(ARGV[1]), tonumber(v[11] or '0')
if fence > 0 and fence < seen then return {-3, 0, {}, {}} end
if fence > seen then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
  v[11] = ARGV[1]
end
return {0, redis.call('ZCOUNT', KEYS[3], '-inf', '(' .. ARGV[2]), redis.call('HVALS', KEYS[2]), v}
