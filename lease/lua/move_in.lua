-- move_in: second half of a rebalancing move: credits the micros taken out of
-- the peer shard to this shard's locked budget. Idempotent by move id.
-- KEYS: state leases exp done audit moves
-- ARGV: move_id amount peer_shard now_ms audit_maxlen
-- Reply: {status, credited, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 credited now, 1 already credited, -1 no such day.
-- Not fenced: a move recorded as pending by a legitimate leader must be
-- finishable by whoever comes next, and crediting it twice is impossible.
local K = keys_of(KEYS)
local id, amount, peer = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now, maxlen = tonumber(ARGV[4]), ARGV[5]
local s = load_shard(K.state)
if not s then return no_day() end
if redis.call('HEXISTS', K.moves, id) == 1 then return shard_reply(1, 0, s) end
s.locked = s.locked + amount
s.budget = s.budget + amount
pay_owed(s) -- budget moved here pays what a cut left owing first
store_shard(K.state, s)
redis.call('HSET', K.moves, id, 'in|' .. str(amount) .. '|' .. peer)
inherit_ttl(K)
audit(K.audit, maxlen, 'ev', 'move_in', 'move', id, 'amount', str(amount), 'peer', peer, 'ms', str(now))
return shard_reply(0, amount, s)
