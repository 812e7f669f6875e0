-- release: closes a lease, crediting its unused micros back to available.
-- Idempotent by lease id: a retry after a timeout gets the first answer and
-- credits nothing twice.
-- KEYS: state leases exp done audit
-- ARGV: lease_id unused now_ms audit_maxlen [known_seq known_tip [known_granted known_returned [refunded [packed]]]]
-- packed: 1 keeps this call's report counters in rp (prelude's packed); absent: in r_*.
-- refunded: bidders' refunds the holder accepted since its last report (release_lease).
-- Reply: {status, unused_credited, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged};
-- status 0 released now, 2 released before (a retry: the same answer), 3 settled
-- before (the holder was too late), 4 unknown lease (release_lease), -1 no such day.
local K = keys_of(KEYS)
local s = load_shard_deferred(K.state, RELEASE_READ, argnum(ARGV[5]), ARGV[1], nil, ARGV[10])
if not s then return no_day() end
s.diverged = diverged(K, s, ARGV[5], ARGV[6]) or run_behind(K, ARGV[1], argnum(ARGV[7]), argnum(ARGV[8]))
local st, credited = release_lease(K, s, ARGV[1], argnum(ARGV[2]), ARGV[2], ARGV[3], ARGV[4], argnum(ARGV[9]))
if type(st) == 'table' then
  touch_unstored()
  return st
end
store_shard(K.state, s)
keep_inherited(K, s)
return shard_reply(st, credited, s)
