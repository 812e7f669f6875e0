-- renew: in one atomic call, releases an ending lease (its unused micros back to
-- available) and grants its successor on the same shard, so a steady campaign
-- needs one ledger round trip per lease window. Idempotent by both lease ids.
-- KEYS: state leases exp done audit
-- ARGV: old_id unused new_id holder want expiry_ms now_ms c_now c_cap grace_ms retain_until_ms audit_maxlen
-- Reply: {old_status, granted, budget, locked, available, leased, spent, lost, new_status}
local K = keys_of(KEYS)
local old_id, unused, id, holder = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local want, expiry, now = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local c_now, c_cap, grace = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local retain, maxlen = tonumber(ARGV[11]), ARGV[12]
local s = load_shard(K.state)
if not s then return {-1, 0, 0, 0, 0, 0, 0, 0, -1} end
local st = release_lease(K, s, old_id, unused, now, maxlen)
if type(st) == 'table' then return st end
local reply
local cur = redis.call('HGET', K.leases, id)
if cur then
  reply = shard_reply(st, (parse_lease(cur)), s)
  reply[9] = 1
elseif redis.call('HEXISTS', K.done, id) == 1 then
  reply = shard_reply(st, 0, s)
  reply[9] = 2
else
  settle_expired(K, s, now - grace, 64, now, maxlen, 'grant')
  release_by_curve(s, c_now, c_cap)
  local g = grant_new(K, s, id, holder, want, expiry, now, maxlen)
  reply = shard_reply(st, g, s)
  reply[9] = 0
end
store_shard(K.state, s)
expire_all(K, retain)
return reply
