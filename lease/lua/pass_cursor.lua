-- pass_cursor: records how far the reconciler's full pass has got, unless a
-- newer leader (a higher fence) recorded it since: a deposed leader's late
-- write cannot move the cursor. fence 0 is "no election" and always writes.
-- KEYS: the cursor hash
-- ARGV: fence after done started_ms campaigns
-- Reply: 1 written, 0 fenced off.
local fence = tonumber(ARGV[1])
local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if fence > 0 and fence < seen then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'after', ARGV[2], 'done', ARGV[3], 'started', ARGV[4], 'campaigns', ARGV[5])
return 1
