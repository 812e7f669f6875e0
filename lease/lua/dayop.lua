-- dayop: records a change to a campaign-day's budget (an operator's raise or
-- cut, a carry-over) exactly once per op id, in two steps around the change
-- to the shards (other slots):
--   begin: decides the op's delta once ("<day>:op:<id>" = "pending|delta"),
--          lists it in the pending set, returns the decided delta;
--   done:  adds the delta to the day's budget once, marks the op done.
-- A retried or crashed op is finished by running both again with its id.
-- KEYS: days dayops
-- ARGV: action day op_id delta
-- Reply: {delta, day_budget}
local action, day, op, delta = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local field = day .. ':op:' .. op
redis.call('HINCRBY', KEYS[1], ':touch', 1) -- a write for WAIT to cover (see load_shard)
local rec = redis.call('HGET', KEYS[1], field)
if action == 'begin' then
  if not rec then
    redis.call('HSET', KEYS[1], field, 'pending|' .. delta)
    redis.call('HSET', KEYS[2], day .. '|' .. op, delta)
    rec = 'pending|' .. delta
  end
else
  if not rec then return redis.error_reply('ERR no such day op ' .. op) end
  local state, d = string.match(rec, '^(%a+)|(-?%d+)$')
  if state == 'pending' then
    redis.call('HINCRBY', KEYS[1], day .. ':budget', d)
    rec = 'done|' .. d
    redis.call('HSET', KEYS[1], field, rec)
    redis.call('HDEL', KEYS[2], day .. '|' .. op)
  end
end
local _, d = string.match(rec, '^(%a+)|(-?%d+)$')
return {tonumber(d), tonumber(redis.call('HGET', KEYS[1], day .. ':budget') or 0)}
