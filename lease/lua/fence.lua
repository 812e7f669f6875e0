-- fence: records a reconciler's fencing token on a shard its full pass read
-- without writing (Ledger.FenceShards), as a settle would have: a deposed
-- leader's later writes there are refused. Not money: no history step.
-- KEYS: state
-- ARGV: fence
-- Reply: 0 recorded (or already), -1 no such shard, -3 fenced off (a newer
-- token was seen).
local fence = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if fence <= 0 then return 0 end
local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if fence < seen then return -3 end
if fence > seen then redis.call('HSET', KEYS[1], 'fence', ARGV[1]) end
return 0
