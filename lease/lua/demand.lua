-- demand: adds one daemon's demand counts to a campaign-day's demand hash,
-- one call per flush however many slots it covers (a pipeline of HINCRBYs
-- was five commands a flush, per campaign, per host).
-- KEYS: the demand hash
-- ARGV: expire_at_ms, enough, then per slot: slot requests allowed denied
-- micros_asked
-- Returns the hash's micros asked in the last slot given, this call's
-- included, and in the slot before it (0 before slot 1); then the fleet's
-- SPENDs (requests) and micros asked over the slots from the last given
-- back, as far as it takes to count enough SPENDs, or to the day's start
-- (0 and 0 when enough is 0).
local asked, last = 0, 0
for i = 3, #ARGV, 5 do
  local s = ARGV[i]
  last = tonumber(s)
  redis.call('HINCRBY', KEYS[1], 'req:' .. s, ARGV[i + 1])
  redis.call('HINCRBY', KEYS[1], 'ok:' .. s, ARGV[i + 2])
  redis.call('HINCRBY', KEYS[1], 'no:' .. s, ARGV[i + 3])
  asked = redis.call('HINCRBY', KEYS[1], 'reqm:' .. s, ARGV[i + 4])
end
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
local before = 0
if last >= 1 then before = tonumber(redis.call('HGET', KEYS[1], 'reqm:' .. (last - 1)) or '0') end
local enough, spends, micros = tonumber(ARGV[2]), 0, 0
local s = last
while enough > 0 and spends < enough and s >= 0 do
  local v = redis.call('HMGET', KEYS[1], 'req:' .. s, 'reqm:' .. s)
  spends = spends + tonumber(v[1] or '0')
  micros = micros + tonumber(v[2] or '0')
  s = s - 1
end
return {asked, before, spends, micros}
