-- relook: a campaign-day's relook mark in the campaign's days hash
-- ("<day>:relook" = until_ms): a shard of the day lost acknowledged writes
-- and was frozen until until_ms (Ledger.Freeze), so the reconciler looks at
-- the day again once the freeze has ended, reported or not (Ledger.Relook).
-- Not money: no history step.
-- KEYS: days
-- ARGV: 'mark' field until_ms | 'clear' field until_ms
-- mark keeps the later of the mark and until_ms; clear removes the mark
-- only if it is still until_ms (a freeze since has marked it again).
-- Reply: 1 changed, 0 not.
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[2]) or '0')
local mark = tonumber(ARGV[3])
if ARGV[1] == 'mark' then
  if mark <= cur then return 0 end
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  return 1
end
if cur ~= mark then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[2])
