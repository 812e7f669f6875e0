-- dayop: records a change to a campaign-day's budget (an operator's raise or
-- cut, a carry-over) exactly once per op id, in steps around the change
-- to the shards (other slots):
--   intend: decides the op's delta once, before its shards are held and read
--          ("<day>:op:<id>" = "intent|delta|"), and lists it in the pending
--          set (value "delta|intent"); returns {delta, day_budget};
--   abandon: forgets an op still at intent (its day closed before it was
--          split); returns {0, day_budget};
--   begin: decides the op's split over the shards once (its delta too, if no
--          intent decided it)
--          ("<day>:op:<id>" = "pending|delta|p0,p1,..."), lists it in the
--          pending set, and returns the decided delta and split;
--   done:  adds the delta to the day's budget once, marks the op done.
-- A retried or crashed op is finished by running both again with its id.
-- KEYS: days dayops
-- ARGV: action day op_id delta parts
-- Reply: {delta, day_budget, p0, p1, ...} (begin), {delta, day_budget} (done)
local action, day, op, delta, parts = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local field = day .. ':op:' .. op
redis.call('HINCRBY', KEYS[1], ':touch', 1) -- a write for WAIT to cover (see load_shard)
local rec = redis.call('HGET', KEYS[1], field)
if action == 'intend' then
  if not rec then
    rec = 'intent|' .. delta .. '|'
    redis.call('HSET', KEYS[1], field, rec)
    redis.call('HSET', KEYS[2], day .. '|' .. op, delta .. '|intent')
  end
  local _, d = string.match(rec, '^(%a+)|(-?%d+)|')
  return {tonumber(d), tonumber(redis.call('HGET', KEYS[1], day .. ':budget') or 0)}
elseif action == 'abandon' then
  if rec and string.match(rec, '^intent|') then
    redis.call('HDEL', KEYS[1], field)
    redis.call('HDEL', KEYS[2], day .. '|' .. op)
  end
  return {0, tonumber(redis.call('HGET', KEYS[1], day .. ':budget') or 0)}
elseif action == 'begin' then
  if rec and string.match(rec, '^intent|') then
    delta = string.match(rec, '^intent|(-?%d+)|')
    rec = nil
  end
  if not rec then
    rec = 'pending|' .. delta .. '|' .. parts
    redis.call('HSET', KEYS[1], field, rec)
    redis.call('HSET', KEYS[2], day .. '|' .. op, delta .. '|' .. parts)
  end
else
  if not rec then return redis.error_reply('ERR no such day op ' .. op) end
  local state, d, p = string.match(rec, '^(%a+)|(-?%d+)|(.*)$')
  if state == 'pending' then
    redis.call('HINCRBY', KEYS[1], day .. ':budget', d)
    rec = 'done|' .. d .. '|' .. p
    redis.call('HSET', KEYS[1], field, rec)
    redis.call('HDEL', KEYS[2], day .. '|' .. op)
  end
end
local _, d, p = string.match(rec, '^(%a+)|(-?%d+)|(.*)$')
local reply = {tonumber(d), tonumber(redis.call('HGET', KEYS[1], day .. ':budget') or 0)}
if action == 'begin' then
  for v in string.gmatch(p, '-?%d+') do reply[#reply + 1] = tonumber(v) end
end
return reply
