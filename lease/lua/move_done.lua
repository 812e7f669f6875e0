-- move_done: marks a move's outbound record finished once move_in landed.
-- KEYS: state leases exp done audit moves
-- ARGV: move_id
local K = keys_of(KEYS)
local rec = redis.call('HGET', K.moves, ARGV[1])
if not rec then return 0 end
local done = string.gsub(rec, '|pending$', '|done')
redis.call('HSET', K.moves, ARGV[1], done)
return 1
