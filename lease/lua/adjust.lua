-- adjust: changes a shard's budget mid-day by delta micros, exactly once per
-- op_id (a retry after a lost reply returns the first answer and changes
-- nothing). A raise first cancels what a cut still owes, then adds to locked
-- (the curve releases it over the rest of the day). A cut takes from locked,
-- then available, never from leased or spent budget, which is already handed
-- out. mode 'owe': what the shard cannot give now is owed and taken from
-- leases as they come back (pay_owed), so the cut is always applied in full.
-- mode 'take': only what the shard holds is taken (closing a day for carry-over).
-- KEYS: state leases exp done audit moves ops
-- ARGV: op_id delta now_ms max_budget mode audit_maxlen
-- Reply: {status, applied_delta, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged, owed_delta};
-- status 0 applied now, 1 applied before (retry), -1 no such day.
-- applied_delta is what moved the shard's budget now; owed_delta what it owes on top.
local K = keys_of(KEYS)
local op, delta, now, maxb = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local mode, maxlen = ARGV[5], ARGV[6]
local s = load_shard(K.state)
if not s then return no_day() end
-- The op's hold on the shard (if it took one) ends with its apply, first
-- time or retried.
if redis.call('HDEL', K.ops, 'hold:' .. op) == 1 then
  redis.call('HINCRBY', K.state, 'holds', -1)
end
local rec = redis.call('HGET', K.ops, op)
if rec then
  local a, o = string.match(rec, '^(-?%d+)|(-?%d+)$')
  local r = shard_reply(1, tonumber(a), s)
  r[13] = tonumber(o)
  return r
end
local applied, owed = delta, 0
if delta > 0 then
  local cancel = math.min(delta, s.owed)
  s.owed = s.owed - cancel
  owed = -cancel
  applied = delta - cancel
  if s.budget + applied > maxb then
    return redis.error_reply('ERR budget would exceed ' .. str(maxb) .. ' micros')
  end
  s.locked = s.locked + applied
else
  local cut = -delta
  local from_locked = math.min(cut, s.locked)
  s.locked = s.locked - from_locked
  local from_avail = math.min(cut - from_locked, s.available)
  s.available = s.available - from_avail
  applied = -(from_locked + from_avail)
  if mode == 'owe' then
    owed = cut + applied
    s.owed = s.owed + owed
  end
end
s.budget = s.budget + applied
store_shard(K.state, s)
redis.call('HSET', K.ops, op, str(applied) .. '|' .. str(owed))
inherit_ttl(K)
audit(K.audit, maxlen, 'ev', 'adjust', 'op', op, 'amount', str(applied), 'owed', str(owed), 'ms', str(now))
local r = shard_reply(0, applied, s)
r[13] = owed
return r
