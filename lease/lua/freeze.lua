-- freeze: a daemon found that this shard lost acknowledged writes (its write
-- sequence went back, or a lease it holds is unknown). Until until_ms no new
-- lease is granted here: every daemon re-asserts the leases it holds
-- (reassert) in the meantime, and every lease granted before the loss that
-- nobody re-asserts has expired by then (until = now + lease window + grace),
-- so the budget they hold cannot be granted while someone may still spend it.
-- The shard is flagged in the reconciler's low index, so that its next step
-- looks at the day (a move the loss split is made whole: RepairMoves).
-- KEYS: state leases exp done audit moves ops
-- ARGV: until_ms now_ms reason audit_maxlen
-- Reply: {status, frozen_until_ms, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 frozen now (or longer), 1 already frozen at least that long, -1 no such day.
local K = keys_of(KEYS)
local untl, now, reason, maxlen = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local s = load_shard(K.state)
if not s then return no_day() end
local cur = num(redis.call('HGET', K.state, 'frozen_until'))
if cur >= untl then return shard_reply(1, cur, s) end
-- Kept for the check (pacerctl check names the shard): when it was first
-- found, and why.
redis.call('HSETNX', K.state, 'lost_writes', str(now) .. ' ' .. reason)
redis.call('HSET', K.state, 'frozen_until', str(untl))
store_shard(K.state, s)
audit(K.audit, maxlen, 'ev', 'freeze', 'until', str(untl), 'reason', reason, 'ms', str(now))
if KEYS[9] and redis.call('ZADD', KEYS[9], 'NX', str(now), KEYS[1]) == 1 then anchor(0) end
return shard_reply(0, untl, s)
