-- renew: in one atomic call, releases an ending lease (its unused micros back to
-- available) and grants its successor on the same shard, so a steady campaign
-- needs one ledger round trip per lease window. Idempotent by both lease ids.
-- KEYS: state leases exp done audit moves ops [due low [fair fair_exp]]
-- ARGV: old_id unused new_id holder want expiry_ms now_ms retain_until_ms audit_maxlen known_seq known_tip numbers refunded [packed]
-- numbers: as grant's (CALL_NUMBERS, prelude.lua).
-- known_granted known_returned: the caller run's acknowledged totals on the shard (run_behind).
-- refunded: bidders' refunds the holder accepted since its last report, recorded in the release's entry (release_lease).
-- packed: 1 keeps this call's report counters in rp (prelude's packed); absent: in r_*.
-- ahead: the most spent + leased + available may stand beyond the plan's due (release_by_curve; 0 or absent: no such bound).
-- min: grant nothing rather than less than min micros (0: any amount).
-- shards: how many shards the campaign-day has (release_by_curve's ramp).
-- hour hour_ppb hour_permille hour_unit: release_by_curve's hour bound (permille 0: none;
-- hour_unit 0 or absent: unit; hour_no_bid 1: no bid over the share).
-- Reply: {old_status, granted, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged, new_status};
-- new_status as grant's status.
local K = keys_of(KEYS)
local old_id, unused, id, holder = ARGV[1], argnum(ARGV[2]), ARGV[3], ARGV[4]
local want, expiry, now = argnum(ARGV[5]), argnum(ARGV[6]), argnum(ARGV[7]) -- expiry parsed: a malformed one fails before any write
local retain, maxlen = ARGV[8], ARGV[9] -- retain: the digits PEXPIREAT takes
local c_now, c_cap, grace, unit, catch_up, demand, demand_ttl, least, shards, hour, hour_ppb, hour_permille, hour_unit, hour_no_bid, known_granted, known_returned, ahead = struct.unpack(CALL_NUMBERS, ARGV[12])
local s = load_shard_deferred(K.state, RENEW_READ, argnum(ARGV[10]), old_id, id, ARGV[14])
if not s then local r = no_day(); r[13] = -1; return r end
s.diverged = diverged(K, s, ARGV[10], ARGV[11]) or run_behind(K, id, known_granted, known_returned)
local st, credited = release_lease(K, s, old_id, unused, ARGV[2], ARGV[7], maxlen, argnum(ARGV[13]))
if type(st) == 'table' then
  touch_unstored()
  return st
end
local new_status, g = 0, 0
local cur = redis_call('HGET', K.leases, id)
if s.diverged then
  new_status = 5
elseif cur and not lease_of(cur, holder) then
  new_status = 7
elseif cur then
  new_status, g = 1, (parse_lease(cur))
elseif redis_call('HEXISTS', K.done, id) == 1 then
  new_status = 2
elseif s.closed == 1 then
  new_status = 3
elseif now < (state_get(K.state, 'frozen_until') or 0) + 0 then
  new_status = 4
elseif held(K) then
  new_status = 6
else
  settle_expired(K, s, now - grace, '64', now, maxlen, 'grant')
  pay_owed(s)
  local window = release_by_curve(s, c_now, c_cap, unit, catch_up, st == 0 and credited or 0, shards > 1, hour_arg(hour, hour_ppb, hour_permille, hour_unit, hour_no_bid), ahead)
  -- A fair share of what is available, plus what the ending lease just gave
  -- back: it was this holder's, fairly granted, and its tokens are carried.
  local take = want
  local cap = fair_cap(holder, demand, demand_ttl, now, ARGV[7], s, window, least)
  if cap then
    if st == 0 then cap = cap + credited end
    if cap < take then take = cap end
  end
  take = all_or_nothing(s, take, least)
  g = grant_new(K, s, id, holder, take, ARGV[6], ARGV[7], maxlen)
  fair_granted(s)
  index_low(s, want, now)
end
store_shard(K.state, s)
keep_expiry(K, s, retain)
local reply = shard_reply(st, g, s)
reply[13] = new_status
return reply
