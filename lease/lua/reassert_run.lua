-- reassert_run: a daemon run re-asserts its totals on a shard that lost
-- writes: what it was granted and what it gave back unused (see run_totals).
-- Its held leases are re-asserted first (reassert), so what the run consumed
-- beyond what the shard recorded, granted less returned, was spent by its
-- clients: it is taken out of what the shard can still grant (available,
-- then locked) and counted spent; if that is not enough, the budget is
-- restored by the shortfall and the same amount is owed (as reassert does),
-- so the shard's target is unchanged. Then the shard records the run's
-- totals. What a rollback lets the fleet grant twice is then only what no
-- surviving daemon saw.
-- With open_only set (pacerctl recover), a closed shard is left alone: its
-- day's report and carry-over are decided.
-- KEYS: state leases exp done audit moves ops
-- ARGV: run granted returned now_ms audit_maxlen [open_only]
-- Reply: {status, spent_added, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 raised, 1 nothing to raise, 2 closed (open_only), -1 no such day.
local K = keys_of(KEYS)
local run, kg, kr = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now, maxlen = tonumber(ARGV[4]), ARGV[5]
local s = load_shard(K.state)
if not s then return no_day() end
if ARGV[6] == '1' and s.closed == 1 then return shard_reply(2, 0, s) end
local g, r = run_totals(K, 'u:' .. run)
if kg <= g and kr <= r then return shard_reply(1, 0, s) end
-- What the run consumed (granted less returned) beyond what the shard
-- counted for it. Where the shard counted more (it lost a release, and the
-- lease it still has is settled as spent), nothing is added: the shard
-- over-counts, never under-counts. Either way the shard now records at
-- least the run's totals, so the run's next call is not behind.
local short_of = (kg - kr) - (g - r)
redis.call('HSET', K.state, 'u:' .. run, str(math.max(g, kg)) .. '|' .. str(math.max(r, kr)))
if short_of <= 0 then
  store_shard(K.state, s)
  return shard_reply(1, 0, s)
end
local short = take_or_owe(s, short_of)
s.spent = s.spent + short_of
store_shard(K.state, s)
audit(K.audit, maxlen, 'ev', 'reassert_run', 'run', run, 'amount', str(short_of), 'short', str(short), 'ms', str(now))
return shard_reply(0, short_of, s)
