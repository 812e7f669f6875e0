-- grant: settles the shard's expired leases, releases budget along the curve, and
-- leases up to want micros from available. Idempotent by lease id.
-- KEYS: state leases exp done audit moves ops [due low [fair fair_exp]]
-- ARGV: lease_id holder want expiry_ms now_ms retain_until_ms audit_maxlen known_seq known_tip numbers [packed]
-- numbers: CALL_NUMBERS (prelude.lua): c_now c_cap grace_ms unit catch_up demand demand_ttl_ms min shards hour hour_ppb hour_permille hour_unit hour_no_bid known_granted known_returned ahead.
-- known_granted known_returned: the caller run's acknowledged totals on the shard (run_behind).
-- packed: 1 keeps this call's report counters in rp (prelude's packed); absent: in r_*.
-- ahead: the most spent + leased + available may stand beyond the plan's due (release_by_curve; 0 or absent: no such bound).
-- min: grant nothing rather than less than min micros (0: any amount).
-- shards: how many shards the campaign-day has (release_by_curve's ramp).
-- hour hour_ppb hour_permille hour_unit: release_by_curve's hour bound (permille 0: none;
-- hour_unit 0 or absent: unit; hour_no_bid 1: no bid over the share).
-- Reply: {status, granted, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 granted now, 1 already granted (retry), 2 lease already closed,
-- 3 the day is closed (no more grants), 4 frozen after a loss of state
-- (re-assert held leases; grants resume later), 5 the caller's known history
-- is not the shard's (it lost writes: nothing granted), 6 held by a budget cut
-- being applied (grants resume when it lands), 7 the lease id is another
-- holder's (nothing granted), -1 no such day.
local K = keys_of(KEYS)
local id, holder = ARGV[1], ARGV[2]
local want, expiry, now = argnum(ARGV[3]), argnum(ARGV[4]), argnum(ARGV[5]) -- expiry parsed: a malformed one fails before any write
local retain, maxlen = ARGV[6], ARGV[7] -- retain: the digits PEXPIREAT takes
local c_now, c_cap, grace, unit, catch_up, demand, demand_ttl, least, shards, hour, hour_ppb, hour_permille, hour_unit, hour_no_bid, known_granted, known_returned, ahead = struct.unpack(CALL_NUMBERS, ARGV[10])
local s = load_shard_deferred(K.state, GRANT_READ, argnum(ARGV[8]), id, nil, ARGV[11])
if not s then return no_day() end
s.diverged = diverged(K, s, ARGV[8], ARGV[9]) or run_behind(K, id, known_granted, known_returned)
if s.diverged then return shard_reply(5, 0, s) end
local cur = redis_call('HGET', K.leases, id)
if cur and not lease_of(cur, holder) then return shard_reply(7, 0, s) end
if cur then return shard_reply(1, (parse_lease(cur)), s) end
if redis_call('HEXISTS', K.done, id) == 1 then return shard_reply(2, 0, s) end
if s.closed == 1 then return shard_reply(3, 0, s) end
if now < (state_get(K.state, 'frozen_until') or 0) + 0 then return shard_reply(4, 0, s) end
if held(K) then return shard_reply(6, 0, s) end
settle_expired(K, s, now - grace, '64', now, maxlen, 'grant')
pay_owed(s)
local window = release_by_curve(s, c_now, c_cap, unit, catch_up, 0, shards > 1, hour_arg(hour, hour_ppb, hour_permille, hour_unit, hour_no_bid), ahead)
local take = want
local cap = fair_cap(holder, demand, demand_ttl, now, ARGV[5], s, window, least)
if cap and cap < take then take = cap end
take = all_or_nothing(s, take, least)
local g = grant_new(K, s, id, holder, take, ARGV[4], ARGV[5], maxlen)
fair_granted(s)
index_low(s, want, now)
store_shard(K.state, s)
keep_expiry(K, s, retain)
return shard_reply(0, g, s)
