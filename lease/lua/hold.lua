-- hold: a budget cut (op_id) holds the shard before it reads it: no grant and
-- no move out until the cut's adjust on this shard releases the hold (see
-- held in the prelude). Idempotent by op id; several cuts may hold a shard at
-- once. A hold is not money: it takes no step of the shard's history.
-- KEYS: state leases exp done audit moves ops
-- ARGV: op_id
-- Reply: {status, holds, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 held now, 1 held before (retry) or applied already, -1 no such day.
local K = keys_of(KEYS)
local op = ARGV[1]
local s = load_shard(K.state)
if not s then return no_day() end
if redis.call('HEXISTS', K.ops, op) == 1 or redis.call('HSETNX', K.ops, 'hold:' .. op, '1') == 0 then
  return shard_reply(1, num(redis.call('HGET', K.state, 'holds')), s)
end
local n = redis.call('HINCRBY', K.state, 'holds', 1)
inherit_ttl(K)
return shard_reply(0, n, s)
