-- grant: settles the shard's expired leases, releases budget along the curve, and
-- leases up to want micros from available. Idempotent by lease id.
-- KEYS: state leases exp done audit
-- ARGV: lease_id holder want expiry_ms now_ms c_now c_cap grace_ms retain_until_ms audit_maxlen
-- Reply: {status, granted, budget, locked, available, leased, spent, lost, owed, seq};
-- status 0 granted now, 1 already granted (retry), 2 lease already closed,
-- 3 the day is closed (no more grants), -1 no such day.
local K = keys_of(KEYS)
local id, holder = ARGV[1], ARGV[2]
local want, expiry, now = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local c_now, c_cap, grace = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local retain, maxlen = tonumber(ARGV[9]), ARGV[10]
local s = load_shard(K.state)
if not s then return no_day() end
local cur = redis.call('HGET', K.leases, id)
if cur then return shard_reply(1, (parse_lease(cur)), s) end
if redis.call('HEXISTS', K.done, id) == 1 then return shard_reply(2, 0, s) end
if s.closed == 1 then return shard_reply(3, 0, s) end
settle_expired(K, s, now - grace, 64, now, maxlen, 'grant')
pay_owed(s)
release_by_curve(s, c_now, c_cap)
local g = grant_new(K, s, id, holder, want, expiry, now, maxlen)
store_shard(K.state, s)
expire_all(K, retain)
return shard_reply(0, g, s)
