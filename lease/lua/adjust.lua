-- adjust: changes a shard's budget mid-day by delta micros. A raise adds to
-- locked (the curve releases it over the rest of the day); a cut takes from
-- locked, then available, never from leased or spent budget, which is already
-- handed out: the reply says how much of the cut was applied.
-- KEYS: state leases exp done audit
-- ARGV: delta now_ms max_budget audit_maxlen
-- Reply: {status, applied_delta, budget, locked, available, leased, spent, lost}
local K = keys_of(KEYS)
local delta, now, maxb, maxlen = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local s = load_shard(K.state)
if not s then return {-1, 0, 0, 0, 0, 0, 0, 0} end
local applied = delta
if delta > 0 then
  if s.budget + delta > maxb then
    return redis.error_reply('ERR budget would exceed ' .. str(maxb) .. ' micros')
  end
  s.locked = s.locked + delta
else
  local cut = -delta
  local from_locked = math.min(cut, s.locked)
  s.locked = s.locked - from_locked
  local from_avail = math.min(cut - from_locked, s.available)
  s.available = s.available - from_avail
  applied = -(from_locked + from_avail)
end
s.budget = s.budget + applied
redis.call('HSET', K.state, 'budget', str(s.budget))
store_shard(K.state, s)
if applied < 0 then
  audit(K.audit, maxlen, 'ev', 'adjust', 'amount', '-' .. str(-applied), 'ms', str(now))
else
  audit(K.audit, maxlen, 'ev', 'adjust', 'amount', str(applied), 'ms', str(now))
end
return shard_reply(0, applied, s)
