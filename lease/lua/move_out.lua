-- move_out: first half of a rebalancing move between two shards of one
-- campaign-day (different slots, so two scripts). Takes up to amount micros
-- of locked budget out of this shard and records the move as pending; the
-- reconciler then calls move_in on the peer and move_done here. If it dies in
-- between, the next reconciler finds the pending record and finishes the move:
-- move_in is idempotent by move id, so no micro is lost or doubled.
-- mode 'free' (a debt payment, PayDebts) takes available budget too, once
-- locked is gone, but never what the shard's own cuts still owe. Mode 'redo'
-- (RepairMoves: the peer credited this move and this shard lost its record)
-- takes the whole amount: locked, then available, and owes the rest.
-- KEYS: state leases exp done audit moves
-- ARGV: move_id amount peer_shard fence now_ms audit_maxlen [mode]
-- Reply: {status, taken, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 moved now, 1 already recorded (retry), -1 no such day, -3 fenced off,
-- -4 held by a budget cut being applied (nothing moved).
local K = keys_of(KEYS)
local id, amount, peer = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local fence, now, maxlen = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local s = load_shard(K.state)
if not s then return no_day() end
local rec = redis.call('HGET', K.moves, id)
if rec then
  local kind, amt = string.match(rec, '^(%a+)|(%d+)|')
  return shard_reply(1, tonumber(amt), s)
end
if not check_fence(K, fence) then return shard_reply(-3, 0, s) end
if held(K) then return shard_reply(-4, 0, s) end
local take, owe = math.min(amount, s.locked), 0
if ARGV[7] == 'free' then
  take = math.max(math.min(amount, s.locked + s.available - s.owed), 0)
elseif ARGV[7] == 'redo' then
  take = math.min(amount, s.locked + s.available)
  owe = amount - take
end
local from_locked = math.min(take, s.locked)
s.locked = s.locked - from_locked
s.available = s.available - (take - from_locked)
s.budget = s.budget - take
s.owed = s.owed + owe
store_shard(K.state, s)
redis.call('HSET', K.moves, id, 'out|' .. str(take + owe) .. '|' .. peer .. '|pending')
inherit_ttl(K)
if owe > 0 then
  audit(K.audit, maxlen, 'ev', 'move_out', 'move', id, 'amount', str(take), 'peer', peer, 'ms', str(now), 'owed', str(owe))
else
  audit(K.audit, maxlen, 'ev', 'move_out', 'move', id, 'amount', str(take), 'peer', peer, 'ms', str(now))
end
return shard_reply(0, take + owe, s)
