-- watermark: advances a Redis master's write watermark (watermark.go) from
-- the value the reconciler just compared with its copy outside Redis, so
-- that a restore landing between the compare and this write makes it
-- refuse rather than move a rolled-back watermark forward unseen. A
-- reconciler whose fence is older than one the watermark has seen (a
-- deposed leader) is refused. Idempotent: a retry after a lost reply finds
-- the watermark already where this call put it and answers as it did.
-- KEYS: watermark
-- ARGV: fence had epoch counter next new_epoch
--   had is 1 when the caller read the key (epoch, counter are what it read);
--   new_epoch names the key if it has to be created.
-- Reply: {status, epoch, counter}: status 0 advanced (epoch, counter are the
-- new value), 1 not what the caller read (nothing written; the current value),
-- 2 fenced off (nothing written).
local fence, had = tonumber(ARGV[1]), ARGV[2] == '1'
local epoch, counter = tonumber(ARGV[3]), tonumber(ARGV[4])
local nxt, new_epoch = tonumber(ARGV[5]), tonumber(ARGV[6])
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'counter', 'fence')
local cur_epoch, cur_counter = tonumber(cur[1]), tonumber(cur[2])
local seen = tonumber(cur[3]) or 0
if fence > 0 and fence < seen then
  return {2, cur_epoch or 0, cur_counter or 0}
end
if fence > seen then seen = fence end
local want_epoch = epoch
if not had then want_epoch = new_epoch end
local retry = cur_epoch == want_epoch and cur_counter == nxt
if not retry then
  if (cur_epoch ~= nil) ~= had then return {1, cur_epoch or 0, cur_counter or 0} end
  if had and (cur_epoch ~= epoch or cur_counter ~= counter) then
    return {1, cur_epoch, cur_counter}
  end
end
-- Written even on a retry, so that a WAIT after it covers the first write.
redis.call('HSET', KEYS[1], 'epoch', string.format('%d', want_epoch),
  'counter', string.format('%d', nxt), 'fence', string.format('%d', seen))
return {0, want_epoch, nxt}
