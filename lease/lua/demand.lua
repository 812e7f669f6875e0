-- demand: adds one daemon's demand counts to a campaign-day's demand hash,
-- one call per flush however many slots it covers (a pipeline of HINCRBYs
-- was five commands a flush, per campaign, per host); and the flush's
-- micros asked to the minute it is counted in, in the day's ring of recent
-- minutes, from which it reads back the fleet's micros asked over a span of
-- whole minutes (a host's share of the fleet's demand, judged minute by
-- minute: the daemon's updateShare).
-- KEYS: the demand hash, the ring (RecentDemandKey: the demand hash's slot)
-- ARGV: expire_at_ms, enough, minute, from, to, then per slot: slot
-- requests allowed denied micros_asked
-- minute: the flush's minute (Unix minutes; 0: the ring is not written);
-- from..to: the minutes whose micros to sum (from 0: none; at most
-- RING_MINUTES - 1 before minute). The ring holds field 'r<m % RING_MINUTES>'
-- = '<m>|<micros>' for the latest minute m counted there.
-- Returns the hash's micros asked in the last slot given, this call's
-- included, and in the slot before it (0 before slot 1); then the fleet's
-- SPENDs (requests) and micros asked over the slots from the last given
-- back, as far as it takes to count enough SPENDs, or to the day's start
-- (0 and 0 when enough is 0); then the micros asked in the minutes from..to
-- and how many of them the ring held (a minute no flush was counted in is
-- not held: none was asked in it).
local RING_MINUTES = 16
local asked, last, total = 0, 0, 0
for i = 6, #ARGV, 5 do
  local s = ARGV[i]
  last = tonumber(s)
  total = total + tonumber(ARGV[i + 4])
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
local minute, from, to = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local span, held = 0, 0
if minute > 0 then
  local f = 'r' .. (minute % RING_MINUTES)
  local rec = redis.call('HGET', KEYS[2], f)
  local m, v = string.match(rec or '', '^(%d+)|(%d+)$')
  if m and tonumber(m) == minute then total = total + tonumber(v) end
  redis.call('HSET', KEYS[2], f, string.format('%d|%d', minute, total))
  redis.call('PEXPIREAT', KEYS[2], ARGV[1])
  if from > 0 and from <= to and to < minute and minute - from < RING_MINUTES then
    local fields = {}
    for k = from, to do fields[#fields + 1] = 'r' .. (k % RING_MINUTES) end
    local recs = redis.call('HMGET', KEYS[2], unpack(fields))
    for i, r in ipairs(recs) do
      local rm, rv = string.match(r or '', '^(%d+)|(%d+)$')
      if rm and tonumber(rm) == from + i - 1 then
        span, held = span + tonumber(rv), held + 1
      end
    end
  end
end
return {asked, before, spends, micros, span, held}
