-- settle: settles leases whose expiry plus grace has passed (conservatively: all
-- counted as spent). Called by the reconciler with its fencing token: a token
-- lower than one the shard has already seen comes from a deposed leader and is
-- refused, so its late writes cannot land. fence 0 means "no election" (a lone
-- daemon or an operator) and is always accepted without raising the shard's fence.
-- KEYS: state leases exp done audit
-- ARGV: now_ms grace_ms fence limit audit_maxlen
-- Reply: {status, settled_amount, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged, settled_count};
-- status 0 ok, -1 no such day, -3 fenced off.
local K = keys_of(KEYS)
local now, grace, fence, limit, maxlen = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local s = load_shard(K.state)
if not s then local r = no_day(); r[13] = 0; return r end
if not check_fence(K, fence) then
  local r = shard_reply(-3, num(redis.call('HGET', K.state, 'fence')), s)
  r[13] = 0
  return r
end
local n, total = settle_expired(K, s, now - grace, limit, now, maxlen, 'reconciler')
store_shard(K.state, s)
-- The due index: nothing leased, nothing to settle here until a new grant
-- (which records itself); otherwise the entry stays at the latest expiry
-- (unchanged when nothing was settled: every grant raised it, ZADD GT).
if KEYS[8] then
  if s.leased <= 0 then
    redis.call('ZREM', KEYS[8], KEYS[1])
  elseif n > 0 then
    local last = redis.call('ZRANGE', K.exp, -1, -1, 'WITHSCORES')
    if last[2] then index_due(last[2]) end
  end
end
local r = shard_reply(0, total, s)
-- Only the done key can be new here, at the shard-day's first settlement
-- or release (settle_expired notes it); every EXPIRY_SWEEP-th write still
-- looks at every key.
keep_inherited(K, s)
r[13] = n
return r
