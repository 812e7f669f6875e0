-- prelude: shared by every ledger script (concatenated in front of each at load).
--
-- Redis runs Lua 5.1, whose only number type is a double: integers are exact only
-- below 2^53. Money never gets near that (budgets are capped at MaxBudgetMicros,
-- 1e15), but products such as micros x parts-per-billion do, so every
-- multiply-divide goes through muldiv, which splits the operands so that no
-- intermediate value reaches 2^53.
local PPB = 1000000000

-- A number passed to redis.call is formatted by Redis (%.17g, ~1,700
-- instructions): a lease call's arguments to its commands are strings.
--
-- The functions a call uses most, kept as upvalues: a global such as
-- redis.call or math.min is looked up by name in the library's globals at
-- each use (~16k instructions a lease call in all). They are set by
-- begin_call, at every call: the library's globals are not all there while
-- it loads.
local redis_call = nil
local string_format = nil
local math_min = nil
local math_max = nil
local math_floor = nil

-- num is a number the ledger keeps or is given as decimal digits (a state
-- field, an argument), 0 if absent (false or nil). Lua's coercion parses
-- it once, where tonumber, a C call, parses twice (a grant reads some 15
-- this way); a string that is not a number is an error (tonumber's nil).
local function num(v)
  if v == false or v == nil then return 0 end
  return v + 0
end

-- argnum is a numeric script argument (ARGV[i]) as a number, nil if the
-- caller left it out. The ledger's Go side sends a numeric argument as
-- decimal digits (but a grant's or renewal's numbers argument,
-- CALL_NUMBERS): Lua's coercion parses them once, in the VM, where tonumber
-- is a C call that parses twice.
local function argnum(v)
  if v == nil then return nil end
  return v + 0
end

-- CALL_NUMBERS is the struct format of a grant's or renewal's numbers
-- argument (the ledger's callNumbers): 17 big-endian doubles, each an int64
-- the Go side had, read by one struct.unpack where 17 arguments of their own
-- cost a Lua string and a parse each. A literal: string.rep is not there
-- while the library loads.
local CALL_NUMBERS = '>ddddddddddddddddd'

-- digits is tonumber for a pattern's capture of decimal digits (nil if
-- the pattern did not match): one parse, in the VM, where tonumber, a C
-- call, parses twice.
local function digits(v)
  if v == nil then return nil end
  return v + 0
end

-- stored is num for a field the ledger wrote (digits, or absent): Lua's
-- own string-to-number coercion parses it once, where tonumber parses a
-- string twice (a strtod each, ~1,700 instructions).
local function stored(v)
  if not v then return 0 end
  return v + 0
end

-- Integers are written back as plain digits: tostring/redis.call would use
-- %.14g or a shortest-form formatter and could emit "1e+15". %d (Lua 5.1
-- casts to a C long) prints them exactly and costs a tenth of %.0f, whose
-- glibc path is multi-precision (about 2,400 instructions a number, 12-15%
-- of a lease call's instructions under callgrind); %.0f stays for what is
-- not an integer below 2^53. n % 1 == 0 is the integer test without a call
-- to math.floor (a C function call; str runs some 30 times a lease call);
-- inf and NaN fail it as they fail the range.
local function str(n)
  if n % 1 == 0 and n > -9007199254740992 and n < 9007199254740992 then
    return string_format('%d', n)
  end
  return string_format('%.0f', n)
end

-- divmod returns floor(n/d) and n mod d exactly, for 0 <= n < 2^53, 0 < d.
-- q - q % 1 is floor(q) (Lua's % is floored, and q's fraction is exact),
-- computed in the VM instead of a call to math.floor: muldiv, on every
-- ledger call's curve arithmetic, divides four times.
local function divmod(n, d)
  local q = n / d
  q = q - q % 1
  local r = n - q * d
  if r < 0 then
    q = q - 1
    r = r + d
  elseif r >= d then
    q = q + 1
    r = r - d
  end
  return q, r
end

-- muldiv returns floor(a*b/c) exactly for 0 <= a < 2^53 and 0 <= b <= c <= 2^30.
-- Its divisions are divmod's, written out: a Lua function call costs ~240
-- instructions, and a grant's release by the curve runs muldiv up to ten
-- times.
local function muldiv(a, b, c)
  if a == 0 or b == 0 then return 0 end
  if b == c then return a end
  local q = a / c                    -- q, r = divmod(a, c): a = q*c + r, r < c
  q = q - q % 1
  local r = a - q * c
  if r < 0 then
    q, r = q - 1, r + c
  elseif r >= c then
    q, r = q + 1, r - c
  end
  local bl = b % 32768               -- b = bh*2^15 + bl (exact: b an integer, 2^15 a power of two)
  local bh = (b - bl) / 32768
  local t = r * bh                   -- x1, x0 = divmod(r*bh, c); r*bh < 2^45
  local x1 = t / c
  x1 = x1 - x1 % 1
  local x0 = t - x1 * c
  if x0 < 0 then
    x1, x0 = x1 - 1, x0 + c
  elseif x0 >= c then
    x1, x0 = x1 + 1, x0 - c
  end
  t = x0 * 32768 + r * bl            -- y = divmod(t, c); both terms < 2^45
  local y = t / c
  y = y - y % 1
  local yr = t - y * c
  if yr < 0 then
    y = y - 1
  elseif yr >= c then
    y = y + 1
  end
  return q * b + x1 * 32768 + y
end

-- Key expiry. Every key of a campaign-day expires at its retention. A key
-- keeps its expiry until it is deleted, and only a few keys are ever created
-- after the day's open: the leases and exp keys (each time the shard goes
-- from no lease to one), done (at the first release or settlement), the
-- fair-share records (each time they go from none to one), moves and ops.
-- The writers that may create one note it in created (this call's keys that
-- may be new, key -> true), and only those get an expiry; re-asserting every
-- key on every call was 7 of a grant's ~30 Redis calls. Every EXPIRY_SWEEP-th
-- write of a shard still re-asserts all of them (a changed retention, or a
-- key a writer failed to note, is put right within that many writes).
local created = {}
local EXPIRY_SWEEP = 64

-- owed: a budget cut not yet applied because the budget was already leased
-- or spent; it is applied as leases come back (pay_owed). seq: the shard's
-- write sequence, raised by every write, so a daemon that sees it go down
-- knows the ledger lost acknowledged writes. closed: the day is over; no
-- more grants.
-- adv: what a shard's one-unit advance may release while it ramps up
-- (release_by_curve): not money, a rate limit's state; 0 for a new shard.
-- ADV_WHOLE (at least any unit): the advance is whole. Scripts from before
-- it neither read nor write it, so daemons of both versions may share a
-- shard during a rolling upgrade: the old ones' calls just do not ramp.
-- hr, hrel: the hour of the local day (plus one; 0 for none yet) and what
-- the shard released in it, counting what it held at its first call there
-- (release_by_curve's hour bound): not money either. Calls without an hour
-- bound (hour_permille 0) neither bound nor count.
local ADV_WHOLE = 1000000000000000
-- FIELDS: a release reads its first nine (load_shard_deferred's money);
-- the last five only a grant's release by the curve and its closed check
-- read. A field not loaded is nil on the shard and so never stored.
local FIELDS = {'budget', 'locked', 'available', 'leased', 'spent', 'lost', 'owed', 'seq', 'tip', 'cppb', 'closed', 'adv', 'hr', 'hrel'}

-- load_shard reads a shard and, if it exists, always writes (touch): a
-- script retried after a lost reply, or repeated by id, may find nothing to
-- change, yet under ledger.durability=replicas:N the WAIT that follows must
-- cover the first run's write. Replication is in order, so a write of this
-- run acknowledged by N replicas means every earlier one was.
local function load_shard(key)
  local v = redis_call('HMGET', key, unpack(FIELDS))
  if not v[1] then return nil end
  redis_call('HINCRBY', key, 'touch', 1)
  local s, o = {}, {}
  for i, f in ipairs(FIELDS) do
    s[f] = stored(v[i])
    o[f] = s[f]
  end
  s.o = o
  return s
end

-- Deferred state fields. Besides the shard's money fields, a call reads and
-- writes other fields of the state hash: the report counters (audit), each
-- run's totals (run_add), the fair-share sums, the hold and freeze marks,
-- the history. A script that loads its shard with load_shard_deferred reads
-- the ones it names along with the money fields, in the same HMGET, and
-- queues its writes to them (state_set, state_incr), which store_shard
-- writes in its one HSET: a grant's ~10 single-field reads and writes of
-- the state hash become none. Such a script must end every path that
-- wrote one through store_shard (grant, renew and release do: their
-- refusals return before any write). Other scripts read and write each
-- field at once, as the helpers do without a deferred shard.
local deferred = nil

-- The packed report counters. A grant, renewal or release raises six of the
-- report's counters: events, leases, granted, spent, returned and closed.
-- Called with the switch on (the ledger's Config.PackedCounters: its last
-- argument 1), it keeps them not in r_events ... r_closed but in one field,
-- rp: six big-endian doubles (struct.pack '>dddddd', 48 bytes, within
-- hash-max-listpack-value's 64), each an integer below 2^53 and so exact.
-- One field read and written, not six: ~28k instructions a call. Every
-- other script, and these three with the switch off, raise r_* as before.
-- Invariant: a shard's report counter is its r_* field plus rp's part, and
-- every reader sums both (lease/report.go, lease/audit.go, below_cap), so
-- daemons of both releases, and with either setting, may share a shard.
-- A count that would reach 2^53 in rp is raised in r_* instead.
-- packed: this call's switch (load_shard_deferred sets it).
local packed = false
local RP_EXACT = 9007199254740992

-- touch_unstored is the write a deferred shard's call makes when it
-- returns without storing (see load_shard).
local function touch_unstored()
  if deferred and deferred.unstored then
    deferred.unstored = false
    redis_call('HINCRBY', deferred.key, 'touch', 1)
  end
end

-- state_get is a state field (false if absent), as the call left it: a
-- deferred shard's write queued for it, else what its HMGET read for it (a
-- string, or false if absent: the call's own fields, hf and the runs' u1
-- and u2, are the reply's first three, the rest at the positions its
-- kind's at gives; load_shard_deferred), else the field read now. The
-- lookup is written out (a lease call reads some nine fields so, and a Lua
-- function call costs ~240 instructions); store_shard's is the same.
local function state_get(key, field)
  local d = deferred
  if d and d.key == key then
    local v = d.put[field]
    if v ~= nil then return v end
    local i = d.at[field]
    if i == nil then
      if field == d.hf then i = 1 elseif field == d.u1 then i = 2 elseif field == d.u2 then i = 3 end
    end
    if i ~= nil and not (d.gone and d.gone[field]) then
      local r = d.v[i]
      if r ~= nil then return r end
    end
  end
  return redis_call('HGET', key, field)
end

local function state_set(key, field, value)
  if deferred and deferred.key == key then
    deferred.put[field] = value
  else
    redis_call('HSET', key, field, value)
  end
end

-- state_incr adds delta (an integer) to an integer state field. Deferred,
-- the sum is kept exact below 2^53 and Redis's own (int64) HINCRBY adds
-- beyond. (A grant, renewal or release raises up to seven counters: num and
-- str are written out, a Lua function call costing ~240 instructions.)
local function state_incr(key, field, delta)
  if deferred and deferred.key == key then
    local v = (state_get(key, field) or 0) + delta
    if v < 9007199254740992 and v > -9007199254740992 then
      deferred.put[field] = string_format('%d', v)
      return
    end
    if deferred.put[field] ~= nil then redis_call('HSET', key, field, deferred.put[field]) end
    deferred.put[field] = nil
    deferred.gone = deferred.gone or {}
    deferred.gone[field] = true -- Redis holds it now: state_get reads it there
  end
  redis_call('HINCRBY', key, field, str(delta))
end

-- The shard's history: every write raises seq and moves tip along a hash
-- chain (tip = H(previous tip, seq, the script's first TIP_ARGS arguments),
-- 32 bits), and
-- the last HISTORY (seq, tip) pairs are kept. A daemon passes back the
-- (seq, tip) of the last reply it had: if the shard has not seen that seq
-- yet, or saw another tip at it, Redis lost writes it had acknowledged
-- (a restart from an older AOF or snapshot, a failover to a lagging
-- replica), even if enough writes landed since to pass the old seq again.
local HISTORY = 64
-- HISTORY_FIELDS[i + 1] is the name of the history's entry for a seq of i
-- modulo HISTORY ('h' .. i), made once: a call names two.
local HISTORY_FIELDS = (function()
  local names = {}
  for i = 0, HISTORY - 1 do names[i + 1] = 'h' .. i end
  return names
end)()
-- TIP_ARGS: every script that stores a shard names its write in its first
-- five arguments (a lease, move, op or run id, or the fence, and the
-- caller's now), so two different writes at one seq hash apart; the rest
-- (the curve, demand, bounds) would add bytes to hash and no tell-tale.
local TIP_ARGS = 5

-- store_shard writes the shard back and takes one step of its history:
-- every script stores at most once, so seq counts acknowledged writes.
-- A busy shard's state is a hashtable, not a listpack: each field a call
-- reads or writes is a search of a listpack from its start (a shard's
-- ~100 fields, two thirds of them the history and the runs' totals), which
-- was a sixth of a lease call's instructions. A hash holding a value longer
-- than hash-max-listpack-value (64 bytes by default) is a hashtable from
-- then on, and stays one, so at every BUSY_LEASES-th grant of its day a
-- shard gets the field enc, whose value is that long. Most shards of a
-- day see few grants (a cold campaign's), and keep the listpack's third of
-- the memory.
local BUSY_LEASES = 32
local ENC = 'hashtable: a busy shard, read and written field by field (see store_shard)'
-- A busy shard's done hash is made a hashtable at the same grants, by the
-- field DONE_ENC (grant_new): every grant and renewal looks its new lease id
-- up there, a miss that scans a listpack from its start to its end (up to
-- hash-max-listpack-entries, 512 by default), and every release and
-- settlement looks up the closed one. The field's name is longer than any
-- lease id (at most 200 bytes), so it is never one.
local DONE_ENC = 'hashtable: a busy shard\'s closed leases, looked up by id (see grant_new); a field name longer than 200 bytes, the most a lease id may be, so that it is never one, and longer than 64, hash-max-listpack-value\'s default '
-- It writes only the fields the call changed (s.o: the money fields as
-- loaded; a deferred shard's put against what its HMGET read): each field
-- written is a search of the hash, and a byte count in the AOF. The money
-- fields are compared one by one, in the order the HSET names them
-- (budget, locked, available, leased, spent, lost, cppb, owed, adv, hr,
-- hrel), and the HSET's arguments are counted in n, in a table made with
-- room for them: a loop over the names, # at each append and the table
-- grown twice were ~10% of a lease call's interpreter.
local function store_shard(key, s)
  s.seq = s.seq + 1
  local seq = string_format('%d', s.seq) -- an integer below 2^53 (str's %d, without its call)
  local tip0 = s.v and s.tip == s.o.tip and s.v[12] or str(s.tip) -- a deferred shard's tip as read
  s.tip = tonumber(string.sub(redis.sha1hex(tip0 .. '|' .. seq .. '|' .. table.concat(ARGV, '|', 1, math_min(#ARGV, TIP_ARGS))), 1, 8), 16)
  local tip = string_format('%d', s.tip) -- 32 bits
  local args = {'seq', seq, 'tip', tip, HISTORY_FIELDS[s.seq % HISTORY + 1], seq .. ':' .. tip,
    nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
  local n = 6
  local o = s.o or {}
  if s.budget ~= o.budget then args[n + 1] = 'budget'; args[n + 2] = str(s.budget); n = n + 2 end
  if s.locked ~= o.locked then args[n + 1] = 'locked'; args[n + 2] = str(s.locked); n = n + 2 end
  if s.available ~= o.available then args[n + 1] = 'available'; args[n + 2] = str(s.available); n = n + 2 end
  if s.leased ~= o.leased then args[n + 1] = 'leased'; args[n + 2] = str(s.leased); n = n + 2 end
  if s.spent ~= o.spent then args[n + 1] = 'spent'; args[n + 2] = str(s.spent); n = n + 2 end
  if s.lost ~= o.lost then args[n + 1] = 'lost'; args[n + 2] = str(s.lost); n = n + 2 end
  if s.cppb ~= o.cppb then args[n + 1] = 'cppb'; args[n + 2] = str(s.cppb); n = n + 2 end
  if s.owed ~= o.owed then args[n + 1] = 'owed'; args[n + 2] = str(s.owed); n = n + 2 end
  if s.adv ~= o.adv then args[n + 1] = 'adv'; args[n + 2] = str(s.adv); n = n + 2 end
  if s.hr ~= o.hr then args[n + 1] = 'hr'; args[n + 2] = str(s.hr); n = n + 2 end
  if s.hrel ~= o.hrel then args[n + 1] = 'hrel'; args[n + 2] = str(s.hrel); n = n + 2 end
  local put = s.put
  if put then
    local at, sv, gone, hf, u1, u2 = s.at, s.v, s.gone, s.hf, s.u1, s.u2
    for f, v in pairs(put) do
      local i = at[f] -- what the HMGET read for f (state_get's lookup)
      if i == nil then
        if f == hf then i = 1 elseif f == u1 then i = 2 elseif f == u2 then i = 3 end
      end
      if i == nil or (gone and gone[f]) or v ~= sv[i] then
        args[n + 1] = f; args[n + 2] = v; n = n + 2
      end
    end
  end
  local leases = put and put.r_leases
  if s.rcw then
    local rc = s.rc
    args[n + 1] = 'rp'; args[n + 2] = struct.pack('>dddddd', rc[1], rc[2], rc[3], rc[4], rc[5], rc[6]); n = n + 2
    leases = rc[2] -- packed, the leases rp counts
  end
  if leases and leases % BUSY_LEASES == 0 then
    args[n + 1] = 'enc'; args[n + 2] = ENC; n = n + 2
  end
  s.unstored = false
  redis_call('HSET', key, unpack(args, 1, n))
end

-- diverged reports whether a caller's last known (seq, tip) of this shard is
-- not in the shard's history: the ledger lost writes since. A seq too old to
-- be kept, or none (0), cannot be checked and passes. kseq and ktip are the
-- call's arguments, decimal digits as the ledger's Go side formats an int64
-- (strconv): compared as they came, as the history's entry was written
-- (str), not parsed and formatted again (two string.formats a call).
local function diverged(K, s, kseq, ktip)
  if not kseq then return false end
  local n = kseq + 0
  if n <= 0 then return false end
  if n > s.seq then return true end
  if s.seq - n >= HISTORY then return false end
  local rec = state_get(K.state, HISTORY_FIELDS[n % HISTORY + 1])
  return rec ~= kseq .. ':' .. ktip
end

-- Every money script replies {status, value, budget, locked, available,
-- leased, spent, lost, owed, seq, tip, diverged, extra...}.
local function shard_reply(status, value, s)
  if s == deferred then touch_unstored() end
  local dv = 0
  if s.diverged then dv = 1 end
  return {status, value, s.budget, s.locked, s.available, s.leased, s.spent, s.lost, s.owed, s.seq, s.tip, dv}
end

local function no_day()
  return {-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
end

-- take_or_owe takes amount out of what the shard can still grant (available,
-- then locked) for micros that are leased or spent after all (a re-assertion
-- after lost writes); what is not there restores the budget by the
-- shortfall, which is then owed, so the shard's target is unchanged. It
-- returns the shortfall: what the lost writes let be granted twice.
local function take_or_owe(s, amount)
  local from_avail = math_min(amount, s.available)
  s.available = s.available - from_avail
  local from_locked = math_min(amount - from_avail, s.locked)
  s.locked = s.locked - from_locked
  local short = amount - from_avail - from_locked
  s.budget = s.budget + short
  s.owed = s.owed + short
  return short
end

-- pay_owed applies what is left of a budget cut from budget not handed out
-- (locked first, then available): a cut below leased + spent completes as
-- leases come back, so their unused micros are never granted again.
local function pay_owed(s)
  if s.owed <= 0 then return 0 end
  local from_locked = math_min(s.owed, s.locked)
  s.locked = s.locked - from_locked
  local from_avail = math_min(s.owed - from_locked, s.available)
  s.available = s.available - from_avail
  local paid = from_locked + from_avail
  s.owed = s.owed - paid
  s.budget = s.budget - paid
  return paid
end

-- audit appends one ledger event to the shard's stream. Every change to money goes
-- through here, so the stream replays to the shard's state.
--
-- It also keeps the day's report as counters on the shard's state hash (r_*),
-- counted exactly as BuildReport used to replay the stream: the report is
-- exact however long the stream grew (it is capped at maxlen entries, and
-- stays the audit trail, not the account).
--
-- A stream with a consumer group is exported (pacer-export, docs/EXPORT.md):
-- it is not capped here, and the exporter trims it (trim.lua) only below
-- what every group acknowledged. Without a group the cap stays.
-- exported: per stream key, whether it has a consumer group (asked once a
-- call). The stream exists from the day's open; a missing one has none.
-- Whether it has one matters only once the stream may be longer than
-- maxlen: below that, MAXLEN ~ trims nothing, so the capped and the
-- uncapped XADD are the same write. The stream holds at most the events
-- ever appended to it, the shard's r_events (raised in the same script as
-- each XADD, never lowered), so a call whose shard is loaded deferred
-- (r_events read with the money, no extra command) appends uncapped without
-- asking while r_events + 1 <= maxlen: a shard-day of up to maxlen
-- (default 1,000,000) events asks no XINFO GROUPS in its grants, renewals
-- and releases.
local exported = {}

-- below_cap reports whether the shard's stream cannot exceed maxlen with
-- one more entry, by the deferred shard's r_events plus rp's events; false if that is not
-- known without a command.
local function below_cap(maxlen)
  if not (deferred and deferred.key == KEYS[1]) then return false end
  local n = state_get(KEYS[1], 'r_events')
  if not n then return false end
  if deferred.rc then n = n + deferred.rc[1] end -- the events rp counts (packed)
  return n + 1 <= (maxlen or 0) + 0 -- a lease call's argument, digits: one parse (tonumber parses twice)
end

-- append is audit's entry: the XADD, capped or not (above).
local function append(key, maxlen, ...)
  if exported[key] == nil and below_cap(maxlen) then
    redis_call('XADD', key, '*', ...)
  else
    if exported[key] == nil then
      local g = redis.pcall('XINFO', 'GROUPS', key)
      exported[key] = type(g) == 'table' and not g.err and #g > 0
    end
    if exported[key] then
      redis_call('XADD', key, '*', ...)
    else
      redis_call('XADD', key, 'MAXLEN', '~', maxlen, '*', ...)
    end
  end
end

-- count_packed raises a lease call's counters in rp (see packed), and
-- reports whether it did: not if a count would reach 2^53.
-- The counts are raised in the call's own table (d.rc, made by
-- load_shard_deferred), not a new one at each raise.
local function count_packed(d, ev, amount, unused)
  local rc = d.rc or {0, 0, 0, 0, 0, 0}
  local e, l, g, sp, r, c = rc[1] + 1, rc[2], rc[3], rc[4], rc[5], rc[6]
  if ev == 'grant' then
    l, g = l + 1, g + amount
  else
    sp, r, c = sp + amount - unused, r + unused, c + amount
  end
  if e >= RP_EXACT or l >= RP_EXACT or g >= RP_EXACT or sp >= RP_EXACT or r >= RP_EXACT or c >= RP_EXACT then return false end
  rc[1], rc[2], rc[3], rc[4], rc[5], rc[6] = e, l, g, sp, r, c
  d.rc, d.rcw = rc, true
  return true
end

-- count_event raises the report's counters for an event ev of amount
-- micros (a release's: unused of them given back).
local function count_event(ev, amount, unused)
  local d = deferred
  if packed and d and d.key == KEYS[1] and (ev == 'grant' or ev == 'release') and count_packed(d, ev, amount, unused) then
    return
  end
  local st = KEYS[1]
  state_incr(st, 'r_events', 1)
  if ev == 'open' or ev == 'adjust' then
    state_incr(st, 'r_budget', amount)
  elseif ev == 'grant' then
    state_incr(st, 'r_leases', 1)
    state_incr(st, 'r_granted', amount)
  elseif ev == 'release' then
    state_incr(st, 'r_spent', amount - unused)
    state_incr(st, 'r_returned', unused)
    state_incr(st, 'r_closed', amount)
  elseif ev == 'reassert_run' then
    state_incr(st, 'r_spent', amount)
  elseif ev == 'settle' then
    state_incr(st, 'r_settled', 1)
    state_incr(st, 'r_lost', amount)
    state_incr(st, 'r_spent', amount)
    state_incr(st, 'r_closed', amount)
  end
end

-- audit appends the event (...: the entry's fields and values) and counts it.
local function audit(key, maxlen, ...)
  append(key, maxlen, ...)
  local a = {...}
  local f = {}
  for i = 1, #a - 1, 2 do f[a[i]] = a[i + 1] end
  count_event(f.ev, tonumber(f.amount) or 0, tonumber(f.unused) or 0)
end

-- audit_lease is audit for a lease's grant, release or settlement (ev),
-- whose caller has its amount and unused micros as numbers: the entry's
-- fields are not parsed back (a table of them built, its numbers read).
local function audit_lease(key, maxlen, ev, amount, unused, ...)
  append(key, maxlen, ...)
  count_event(ev, amount, unused)
end

-- scale returns floor(x * permille / 1000) exactly for 0 <= x <= 1e15 and
-- 0 <= permille <= 8000.
local function scale(x, permille)
  local q, r = divmod(x, 1000)
  return q * permille + math_floor(r * permille / 1000)
end

-- release_by_curve moves budget from locked to available as the pacing curve
-- advances from the shard's last release point cppb to c_now (both in PPB of the
-- local day), then caps available and puts the excess back into locked. Exact:
-- every micro moved out of one field lands in the other.
--
-- The plan is the shard's budget (net of what a cut still owes) along the
-- curve: plan x C is due by C. k (parts per thousand of the plan's pace; 0:
-- the pro-rata rule) says how fast a shard off its plan may move:
--   k = 0: locked is released pro rata over what is left of the curve, and
--     available is capped at what that releases over the cap window
--     (c_now..c_cap): a deficit is spread over the rest of the day, which
--     dumps it at the day's end if it is large.
--   k >= 1000: a shard behind its plan releases what is due, but never more
--     than k/1000 x the plan's pace over the call (not pro rata to the end of
--     the day: as fast as the cap allows, and no end-of-day dump); available
--     is capped at the plan's cap window plus what is behind, at most k/1000
--     x that window. A shard ahead of its plan releases pro rata (slower
--     than the plan) until the plan catches up.
-- unit: available may hold one unit (the caller's bid size) while the
-- shard's spent + available stays within one unit of the plan, and, with
-- ahead > 0, spent + leased + available within ahead of it: a campaign
-- whose cap window is worth less than one bid still gets its bids, on time,
-- and the fleet, whatever its hosts hold, is never more than ahead in front
-- of its curve (the caller's bound, in its mean bids, which a largest SPEND
-- may exceed). Not while the
-- shard is behind its plan by more than a unit: then only the catch-up rule
-- releases (at most k x the pace), and available may fill up to one unit.
-- Once the curve is done (a morning-only curve, or the day's end), whatever
-- is locked is released; so is what is left once it is at most TAIL_BIDS
-- bids (and, with ahead > 0, the curve has at most ahead left to release).
-- ramp: the campaign-day has more than one shard, so a new shard, or one
-- that was far behind, takes up its advance at the catch-up pace (adv).
-- hour: {idx, ppb, permille, unit, no_bid} (or nil): the call falls in hour
-- idx of the local day, whose share of the curve is ppb; in that hour the
-- shard releases at most permille x the plan's share of it, plus one unit
-- (hour.unit if set; none with no_bid, and then what it holds available
-- beyond that goes back to locked), less
-- what it held (available and leased) at its first call in the hour, so
-- that no hour spends more than that multiple of its plan and a bid (and
-- what hosts spent of their leases between the hour's start and that call).
-- It bounds the catch-up and the advance alike; the curve's end releases
-- all the same.
-- exempt: micros a renewal's ending lease just gave back, left out of the
-- cap: they were released before, so keeping them adds nothing to the
-- fleet's pace, while capping them would re-lock what the caps let other
-- hosts accumulate (a host renewing an unspent standing bid every few
-- minutes wiped out what the shard had gathered towards the others' bids).
-- Returns the cap on available; nil in the curve's last FAIR_END cap
-- windows (a fair split there would strand at the day's end what holders
-- leave for each other).
local FAIR_END = 3
-- RAMP_PERMILLE bounds the pace a ramping shard takes up its advance at, in
-- permille of the plan's: twice it, the plan's own pace and as much again
-- banked. At the catch-up pace (3x, the rule until 2026-11-26), a
-- 786-bid campaign with a midnight spike on a daytime curve ran its night
-- hours at 2.2-2.7x its plan, less a bid, over five seeds (the issue's bound
-- for small budgets is 2x); at 2x, 1.6-2.1x.
local RAMP_PERMILLE = 2000
-- TAIL_BIDS: a shard's last bids wait for no curve (with ahead > 0, once
-- the curve has no more than ahead left to release). Once what it has left
-- (locked and available) is at most TAIL_BIDS bids (the hour's usual bid,
-- else the unit), and with ahead > 0 the plan keeps at most ahead locked,
-- locked is released, within
-- the hour's bound, unless the shard is far behind (then the catch-up paces
-- it to the end) or ramping.
-- Held back a bid ahead of the curve, a small campaign's last bid or two
-- waited for the curve's last hours, where its few SPENDs rarely fit what was
-- left: the family's small budgets (22-72 bids, seeds 1-64) ended their
-- days with part of a bid unspent that a SPEND had asked for hours before
-- midnight. Released, the remainder meets every SPEND from then on: those
-- days reached 99.5% on 239 of 512 (205), and where the curve oracle did,
-- on 54 of 81 (48); the tiny scenario's 20-bid days held their hours (358
-- of 360 within 2x, as before). Three bids: no better (52 of 81).
local TAIL_BIDS = 2

-- usual_bid is the bid the hour's bound and the tail count in: the hour's
-- (the campaign's usual largest bid) if the call gave one, else the unit.
local function usual_bid(unit, hour)
  if hour and hour.unit > 0 then return hour.unit end
  return unit
end

local function release_by_curve(s, c_now, c_cap, unit, k, exempt, ramp, hour, ahead)
  unit = unit or 0
  ahead = ahead or 0
  k = k or 0
  exempt = exempt or 0
  if c_now > PPB then c_now = PPB end
  if c_cap > PPB then c_cap = PPB end
  if c_cap < c_now then c_cap = c_now end
  -- A caller whose clock is behind the shard's release point must not re-lock
  -- what is already available: shift its cap window to start at cppb.
  if c_now < s.cppb then
    c_cap = math_min(PPB, s.cppb + (c_cap - c_now))
    c_now = s.cppb
  end
  local plan = s.budget - s.owed
  if plan < 0 then plan = 0 end
  -- What the call's span of the curve allows in all, for the advance's ramp
  -- (below): k x the plan's pace, at most RAMP_PERMILLE.
  local locked0, allowance = s.locked, 0
  if k > 0 and c_now > s.cppb then allowance = scale(muldiv(plan, c_now - s.cppb, PPB), math_min(k, RAMP_PERMILLE)) end
  if c_now > s.cppb then
    local moved = muldiv(s.locked, c_now - s.cppb, PPB - s.cppb)
    if k > 0 and c_now < PPB then
      local due = s.locked - (plan - muldiv(plan, c_now, PPB)) -- what puts the shard on its plan
      if due > moved then -- behind: catch up, at most k x the plan's pace
        moved = math_min(due, scale(muldiv(plan, c_now - s.cppb, PPB), k))
      end
    end
    s.locked = s.locked - moved
    s.available = s.available + moved
    s.cppb = c_now
  end
  if s.cppb >= PPB then
    if s.locked > 0 then
      -- The curve is done for the day (a morning-only curve, or the day's
      -- end): budget locked since (a raise, a carry-over, a rebalancing move)
      -- or still behind has no curve left to wait for.
      s.available = s.available + s.locked
      s.locked = 0
    end
    return nil
  end
  local plan_locked = plan - muldiv(plan, s.cppb, PPB) -- what the plan keeps locked from here
  -- Behind by more than a unit, the catch-up rule alone paces the shard: the
  -- one-unit advance below would otherwise refill available at every call
  -- (what the fleet spent is far below the plan), whatever k says, and a
  -- campaign far behind would end its day in a burst. Its available may
  -- still fill up to one unit at the catch-up pace, so that a campaign whose
  -- cap window is worth less than a bid gets its bids, at that pace.
  local far_behind = k > 0 and unit > 0 and s.locked - plan_locked > unit
  -- Catching up, on one of several shards, the advance will ramp up again
  -- once the shard is back on its plan (below).
  if far_behind and ramp then s.adv = 0 end
  local ramping = false
  local cap
  if k > 0 then
    local window = muldiv(plan, c_cap - s.cppb, PPB)
    local behind = s.locked + s.available - plan_locked
    cap = math_max(0, math_min(window + behind, scale(window, k)))
    if far_behind and cap < unit then cap = unit end
  else
    cap = muldiv(s.locked + s.available, c_cap - s.cppb, PPB - s.cppb)
  end
  if s.available - exempt > cap then
    s.locked = s.locked + (s.available - exempt - cap)
    s.available = cap + exempt
  end
  if ramp and k > 0 and unit > 0 and not far_behind and s.adv < unit then
    -- A new shard, or one that was catching up, takes up its one-unit
    -- advance no faster than twice the plan's pace (RAMP_PERMILLE, and the
    -- catch-up pace if that is less): the advance spends adv,
    -- which each call fills with what its allowance leaves over the rules
    -- above (what the cap re-locked may come back), until it holds a unit;
    -- from then on the advance is whole, until the shard falls behind
    -- again. Without the ramp, every shard of a campaign ending its
    -- catch-up jumped from a unit behind its plan to a unit ahead at once:
    -- eight shards, 25-35 bids in minutes, more than a daytime curve's
    -- last hour (late-peak: hours of 3.1-4.8x the plan against the 3x
    -- bound, then nothing). A new shard ramps up too: eight shards a unit
    -- ahead from midnight gave a 786-bid campaign with a midnight spike
    -- 4.3x its curve's first hour. Only where a campaign-day has several
    -- shards (ramp): a single shard's jump is the one bid ahead the
    -- advance is for, and a sparse campaign's own gaps between SPENDs
    -- leave it a bid or two behind all day (ramped after each, and from
    -- midnight, the tiny scenario's 20-bid budgets lost a bid in three
    -- days of 120 and a midnight spike its first bid).
    s.adv = s.adv + math_max(0, allowance - (locked0 - s.locked))
    if s.adv >= unit then s.adv = ADV_WHOLE else ramping = true end
  end
  -- The hour's bound (hour, above): what this call let out so far (net of
  -- what the cap took back) counts against what the hour has left; beyond
  -- it goes back to locked, and the advance below may take only what is
  -- left.
  local room
  if hour and k > 0 then
    local net = locked0 - s.locked
    if s.hr < hour.idx + 1 then -- a host whose clock is behind counts in the later hour
      s.hr = hour.idx + 1
      s.hrel = math_max(0, s.available + s.leased - net)
    end
    local bid = usual_bid(unit, hour)
    if hour.no_bid then bid = 0 end
    room = scale(muldiv(plan, hour.ppb, PPB), hour.permille) + bid - s.hrel - net
    if room < 0 then
      -- What this call let out goes back; with no bid over the bound (an
      -- exact one), so does what was available at the hour's first call
      -- beyond it: released in the hour before, it would be spent in this
      -- one (a 20-bid budget far behind its curve held 3,190 micros at
      -- 23:00 and spent 2,615 of them at 23:00:16, 1.75x its last hour).
      local free = math_max(0, net)
      if hour.no_bid then free = s.available end
      local back = math_min(-room, free, s.available)
      s.available = s.available - back
      s.locked = s.locked + back
      room = 0
    end
  end
  if unit > 0 and s.available < unit and not far_behind then
    -- After: spent + available <= plan x C + unit. Leased budget is not
    -- counted: a sparse campaign's hosts each hold a bid, unspent until a
    -- SPEND comes to that host, so the fleet runs at most a bid per host (and
    -- the leases in flight) ahead of its curve.
    local due = plan - plan_locked
    local x = math_min(unit - s.available, s.locked, due + unit - s.available - s.spent)
    if ahead > 0 then x = math_min(x, due + ahead - s.available - s.spent - s.leased) end
    if room then x = math_min(x, room) end
    if ramping then
      x = math_min(x, s.adv)
      if x > 0 then s.adv = s.adv - x end
    end
    if x > 0 then
      s.locked = s.locked - x
      if room then room = room - x end
      s.available = s.available + x
    end
  end
  -- The shard's last bids (TAIL_BIDS): the rest of locked, within the
  -- hour's room.
  if unit > 0 and k > 0 and not far_behind and not ramping and s.locked > 0 then
    if s.locked + s.available <= TAIL_BIDS * usual_bid(unit, hour) and (ahead <= 0 or plan_locked <= ahead) then
      local x = s.locked
      if room then x = math_min(x, room) end
      if x > 0 then
        s.locked = s.locked - x
        s.available = s.available + x
      end
    end
  end
  -- Signed: budget the hour let out and the cap took back unleased (a
  -- call that released for a SPEND and then refused it, for want of a few
  -- micros) is the hour's to release again. Counted as released, one SPEND
  -- too large for the hour's room closed the hour to every other SPEND.
  if room then s.hrel = math_max(0, s.hrel + locked0 - s.locked) end
  if PPB - s.cppb <= FAIR_END * (c_cap - s.cppb) then return nil end -- the curve's last cap windows: no split
  return cap
end

-- hour_arg is release_by_curve's hour from a call's arguments: nil with
-- permille 0 (no hour bound).
local function hour_arg(idx, ppb, permille, unit, no_bid)
  permille = num(permille)
  if permille <= 0 then return nil end
  return {idx = num(idx), ppb = num(ppb), permille = permille, unit = num(unit), no_bid = num(no_bid) == 1}
end

-- Lease records: "amount|holder|expiry_ms".
local function parse_lease(rec)
  local amount, holder, expiry = string.match(rec, '^(%d+)|([^|]*)|(%d+)$')
  return digits(amount), holder, digits(expiry)
end

-- note_done notes the done key as created (to be given its expiry) if it
-- does not exist yet: it gets its first record at the shard-day's first
-- release or settlement, and keeps every later one. Call it before a
-- record is written. A deferred shard (grant, renewal, release) notes in its
-- state field dk that done exists, with its expiry (written in its one HSET,
-- read in its one HMGET: call_fields), so only its first record costs an
-- EXISTS. Should done go while the state stays, the record recreating it
-- has no expiry until the shard's next EXPIRY_SWEEP-th write.
local done_seen = false
local function note_done(K)
  if done_seen then return end
  done_seen = true
  local dk = deferred and deferred.key == K.state
  if dk and state_get(K.state, 'dk') then return end
  if redis_call('EXISTS', K.done) == 0 then created[K.done] = true end
  if dk then state_set(K.state, 'dk', '1') end
end

-- settle_expired settles, conservatively, leases whose expiry is before cutoff:
-- their holder is gone or cut off and stopped spending before expiry, but what it
-- spent was never reported, so all of it counts as spent (and as lost, for the
-- report). A crash therefore costs under-delivery bounded by the lease, never
-- overspend. Returns the number and amount settled. limit: at most that many
-- (decimal digits, as a lease call passes it, or a number).
local function settle_expired(K, s, cutoff, limit, now, maxlen, why)
  local ids = redis_call('ZRANGEBYSCORE', K.exp, '-inf', '(' .. str(cutoff), 'LIMIT', '0', limit)
  local n, total = 0, 0
  for i = 1, #ids do
    local id = ids[i]
    local rec = redis_call('HGET', K.leases, id)
    if rec then
      local amount, holder = parse_lease(rec)
      s.leased = s.leased - amount
      s.spent = s.spent + amount
      s.lost = s.lost + amount
      redis_call('HDEL', K.leases, id)
      note_done(K)
      redis_call('HSET', K.done, id, 's:' .. str(amount))
      audit_lease(K.audit, maxlen, 'settle', amount, 0, 'ev', 'settle', 'lease', id, 'holder', holder,
        'amount', str(amount), 'by', why, 'ms', str(now))
      n = n + 1
      total = total + amount
    end
    redis_call('ZREM', K.exp, id)
  end
  return n, total
end

local function keys_of(KEYS)
  return {state = KEYS[1], leases = KEYS[2], exp = KEYS[3], done = KEYS[4], audit = KEYS[5], moves = KEYS[6], ops = KEYS[7]}
end

-- The reconciler's indexes (see lease/index.go): KEYS[8] due, KEYS[9] low,
-- in the shard's slot; absent when a caller passes only the shard's keys.
-- On a Redis Cluster (the index keys' names carry their slot's hash tag)
-- an entry new to its slot's index is also recorded in the slot's anchor
-- (lease/index.go, "Anchors"): the first of the 64 anchor keys, from the
-- slot's group (slot / 256) on, that this master serves, with the time the
-- entry needs the reconciler (ZADD LT: the anchor's score is a lower bound
-- of its slot's). A non-local anchor is an error pcall returns; none local
-- leaves the entry to the reconciler's rotating look at every slot.
local ANCHORS = (function()
  local keys = {'3560', '2464', '1768', '69235', '22069', '56283', '20261', '21365',
  '48576', '27938', '18360', '19264', '11467', '10563', '41271', '17019', '4129', '69306', '3453',
  '2557', '130', '12295', '11199', '9058', '1296', '19357', '29098', '49541', '41342', '1878',
  '8591', '9495', '8209', '26479', '265', '4892', '3706', '2602', '45842', '5378', '2821', '3925',
  '13409', '40113', '48710', '39288', '17891', '16995', '356', '17781', '46093', '15589', '45971',
  '44875', '3635', '2731', '16248', '40020', '2912', '3816', '4782', '5686', '48623', '49727'}
  for i = 1, #keys do
    keys[i] = 'pacer:idx:slots:{' .. keys[i] .. '}'
  end
  return keys
end)()

-- CRC16 is CRC16/XMODEM's table, as Redis Cluster hashes a key's tag
-- (built with arithmetic: bit is not available while a library loads).
local CRC16 = (function()
  local t = {}
  for i = 0, 255 do
    local c = i * 256
    for _ = 1, 8 do
      c = c * 2
      if c >= 65536 then -- c - 65536 xor 0x1021
        c = c - 65536
        local x, p, r = 4129, 1, 0
        for _ = 1, 16 do
          local u, v = c % 2, x % 2
          if u ~= v then r = r + p end
          c, x, p = (c - u) / 2, (x - v) / 2, p * 2
        end
        c = r
      end
    end
    t[i] = c
  end
  return t
end)()

local function anchor(score)
  local tag = string.match(KEYS[8], '{(.*)}$')
  if not tag then return end -- one server: one index key, no anchors
  local c = 0
  for i = 1, #tag do
    c = bit.bxor((c % 256) * 256, CRC16[bit.bxor((c - c % 256) / 256, string.byte(tag, i))])
  end
  local slot = c % 16384
  local g, n = (slot - slot % 256) / 256, #ANCHORS
  for j = 0, n - 1 do
    if type(redis.pcall('ZADD', ANCHORS[(g + j) % n + 1], 'LT', score, slot)) == 'number' then return end
  end
end

-- index_due records that the shard's leases all expire at score (ZADD GT).
local function index_due(score)
  if KEYS[8] and redis_call('ZADD', KEYS[8], 'GT', score, KEYS[1]) == 1 then anchor(score) end
end

-- index_expiry records that a lease on this shard expires at expiry.
local function index_expiry(expiry)
  index_due(str(expiry))
end

-- index_low flags a shard left with less than one request's worth to grant:
-- to be refilled from its siblings, or its day exhausted.
local function index_low(s, want, now)
  if KEYS[9] and s.closed ~= 1 and math_max(s.locked + s.available - s.owed, 0) < want then
    if redis_call('ZADD', KEYS[9], 'NX', str(now), KEYS[1]) == 1 then anchor(0) end
  end
end

-- check_fence refuses a reconciler call whose fencing token is older than one
-- the shard has seen (a deposed leader), and records a newer one. fence 0 is
-- "no election" and is always accepted without recording anything.
-- A budget cut holds each shard of its day before it reads them: while a
-- shard is held (state field 'holds' > 0, one ops field 'hold:<op>' per cut),
-- it grants nothing and moves nothing out, so between the cut's read and its
-- apply what a shard has left to grant can only grow (releases) and never be
-- handed out; the cut's adjust releases its hold. See AdjustDayOp.
local function held(K)
  return (state_get(K.state, 'holds') or 0) + 0 > 0
end

-- lease_of reports whether a lease id the shard knows (record rec)
-- belongs to holder: a known id is answered only to its own holder.
local function lease_of(rec, holder)
  local _, h = parse_lease(rec)
  return h == holder
end

local function check_fence(K, fence)
  if fence <= 0 then return true end
  local seen = num(redis_call('HGET', K.state, 'fence'))
  if fence < seen then return false end
  if fence > seen then redis_call('HSET', K.state, 'fence', str(fence)) end
  return true
end

-- Key expiry: see created above.
--
-- inherit_ttl gives keys created after the shard was opened (done, moves) the
-- state key's retention, so nothing of a campaign-day outlives it. only:
-- look at those keys alone (a set of key names, e.g. created), not all.
local function inherit_ttl(K, only)
  local ttl = redis_call('PTTL', K.state)
  if ttl <= 0 then return end
  for name, k in pairs(K) do
    if name ~= 'state' and (not only or only[k]) and redis_call('PTTL', k) == -1 then redis_call('PEXPIRE', k, ttl) end
  end
end

local function expire_all(K, at)
  for _, k in pairs(K) do redis_call('PEXPIREAT', k, at) end
end

-- keep_expiry gives the keys this call may have created expiry at (all the
-- shard's keys, the fair-share records' too, on every EXPIRY_SWEEP-th write).
-- Called after store_shard. at: ms since the epoch, as decimal digits (a
-- lease call passes its argument's) or a number.
local function keep_expiry(K, s, at)
  if s.seq % EXPIRY_SWEEP == 0 then
    expire_all(K, at)
    for i = 10, 11 do
      if KEYS[i] then redis_call('PEXPIREAT', KEYS[i], at) end
    end
    return
  end
  for k in pairs(created) do redis_call('PEXPIREAT', k, at) end
end

-- keep_inherited is inherit_ttl for the keys this call may have created
-- (all of them on every EXPIRY_SWEEP-th write). Called after store_shard.
local function keep_inherited(K, s)
  if s.seq % EXPIRY_SWEEP == 0 then return inherit_ttl(K) end
  if next(created) then inherit_ttl(K, created) end
end

-- grant_new takes up to want micros from available into a new lease.
-- all_or_nothing returns take, or 0 if the shard cannot give at least min of
-- it (min nil or 0: any amount).
local function all_or_nothing(s, take, min)
  if min and min > 0 and math_min(take, s.available) < min then return 0 end
  return take
end

-- Each daemon run's totals on the shard: what it was granted and what it
-- gave back unused (state field 'u:<run>' = "granted|returned", the run
-- being a lease id less its last '-' part: holder-bootID). A daemon passes
-- back the totals it had acknowledged; a shard that recorded less than that
-- lost writes it had acknowledged, however many writes came after (the
-- (seq, tip) history keeps only the last HISTORY). run_totals reads them.
local function run_of(id)
  return string.match(id, '^(.*)%-[^%-]*$') or ''
end

-- run_field is the state field of lease id's run's totals, 'u:<run>'. A
-- deferred shard's call has its ids' (u1, u2: load_shard_deferred) and
-- does not match and join them again (a renewal names its run's field
-- four times).
local function run_field(id)
  local d = deferred
  if d then
    if id == d.id1 then return d.u1 end
    if id == d.id2 then return d.u2 or d.u1 end
  end
  return 'u:' .. run_of(id)
end

-- run_totals is what field ('u:<run>', run_field) records: granted, returned.
local function run_totals(K, field)
  local v = state_get(K.state, field)
  if not v then return 0, 0 end
  local g, r = string.match(v, '^(%d+)|(%d+)$')
  return digits(g), digits(r)
end

-- A total the call does not change is written back as the digits it read
-- (a grant returns nothing, a release is granted nothing): one format less.
local function run_add(K, field, granted, returned)
  local v = state_get(K.state, field)
  local gs, rs = '0', '0'
  if v then gs, rs = string.match(v, '^(%d+)|(%d+)$') end
  if granted ~= 0 then gs = str(gs + granted) end
  if returned ~= 0 then rs = str(rs + returned) end
  state_set(K.state, field, gs .. '|' .. rs)
end

-- A grant, renewal or release reads, besides the money, the state fields
-- its usual path uses (load_shard_deferred): the history entry at the
-- caller's known seq, the runs of its lease ids, the report counters its
-- audit raises (audit), and a grant (GRANT_READ, RENEW_READ) the freeze and
-- hold marks and the fair-share sums; a call that closes a lease (RENEW_READ,
-- RELEASE_READ) the counters of a release. Each field read is a hash lookup
-- and a Lua string (a few thousand instructions), so a call names only what
-- its usual path uses. A kind is built once, when the library loads: its
-- names (the fields after the call's own three), how many of them are money
-- (FIELDS' first), and at, each name's position in the HMGET's reply.
-- Each kind has two forms: off, the counters r_* (and rp, which a shard
-- written with the switch on holds: below_cap sums it), and on (packed), rp
-- for the lease calls' counters (r_events still: below_cap sums both).
local GRANT_FIELDS = {'r_leases', 'r_granted', 'frozen_until', 'holds', 'fair_sum', 'fair_supply', 'fair_avail', 'fair_epoch'}
local CLOSE_FIELDS = {'r_spent', 'r_returned', 'r_closed'}
local GRANT_FIELDS_PACKED = {'frozen_until', 'holds', 'fair_sum', 'fair_supply', 'fair_avail', 'fair_epoch'}
local function read_form(money, grant, closes, on)
  local names, at = {}, {}
  for i = 1, money do names[i] = FIELDS[i] end
  names[#names + 1] = 'dk'
  names[#names + 1] = 'r_events'
  names[#names + 1] = 'rp'
  local gf = on and GRANT_FIELDS_PACKED or GRANT_FIELDS
  if grant then for i = 1, #gf do names[#names + 1] = gf[i] end end
  if closes and not on then for i = 1, #CLOSE_FIELDS do names[#names + 1] = CLOSE_FIELDS[i] end end
  for i = money + 1, #names do at[names[i]] = i + 3 end
  return {names = names, money = money, at = at}
end
local function read_kind(money, grant, closes)
  return {off = read_form(money, grant, closes, false), on = read_form(money, grant, closes, true)}
end
local GRANT_READ = read_kind(#FIELDS, true, false)
local RENEW_READ = read_kind(#FIELDS, true, true)
local RELEASE_READ = read_kind(9, false, true)

-- load_shard_deferred is load_shard that also reads the fields of kind
-- (GRANT_READ, RENEW_READ, RELEASE_READ), the history entry at kseq and the
-- runs of lease ids id1 and id2 (nil: one id), and defers the call's writes
-- to the state's other fields to store_shard. A deferred field the call did
-- not read is read when first needed (one HGET; state_get), e.g. a
-- settlement's report counters in a grant. Its write for WAIT to cover
-- (load_shard's touch) is store_shard's HSET, or, on a path that stores
-- nothing (a refusal), touch_unstored's.
-- The shard and its loaded copy are built by table constructors that name
-- every field they will hold: a table that grows a field at a time is
-- rehashed at every power of two (building a shard so took more
-- instructions than its curve's arithmetic). Its fields are read as stored
-- reads them, written out: a Lua function call costs ~240 instructions.
local function load_shard_deferred(key, kinds, kseq, id1, id2, on)
  packed = on == '1'
  local kind = packed and kinds.on or kinds.off
  local hf, u1, u2 = nil, 'u:' .. run_of(id1), nil
  if kseq and kseq > 0 then hf = HISTORY_FIELDS[kseq % HISTORY + 1] end
  if id2 then
    u2 = 'u:' .. run_of(id2)
    if u2 == u1 then u2 = nil end
  end
  -- The call's own three fields come first (u1 again where one is not
  -- needed), so that the kind's fixed names can follow them in one unpack.
  local v = redis_call('HMGET', key, hf or u1, u1, u2 or u1, unpack(kind.names))
  if not v[4] then return nil end
  local s = {key = key, v = v, at = kind.at, hf = hf, u1 = u1, u2 = u2, id1 = id1, id2 = id2, put = {}, unstored = true, gone = nil, diverged = nil, o = nil, rc = nil, rcw = nil,
    budget = (v[4] or 0) + 0, locked = (v[5] or 0) + 0, available = (v[6] or 0) + 0, leased = (v[7] or 0) + 0,
    spent = (v[8] or 0) + 0, lost = (v[9] or 0) + 0, owed = (v[10] or 0) + 0, seq = (v[11] or 0) + 0, tip = (v[12] or 0) + 0,
    cppb = nil, closed = nil, adv = nil, hr = nil, hrel = nil}
  if kind.money > 9 then
    s.cppb, s.closed, s.adv, s.hr, s.hrel = (v[13] or 0) + 0, (v[14] or 0) + 0, (v[15] or 0) + 0, (v[16] or 0) + 0, (v[17] or 0) + 0
  end
  s.o = {budget = s.budget, locked = s.locked, available = s.available, leased = s.leased, spent = s.spent,
    lost = s.lost, owed = s.owed, seq = s.seq, tip = s.tip,
    cppb = s.cppb, closed = s.closed, adv = s.adv, hr = s.hr, hrel = s.hrel}
  local rp = v[kind.at.rp]
  if rp then -- parsed before any write: a malformed rp fails the call whole
    local e, l, g, sp, r, c = struct.unpack('>dddddd', rp)
    s.rc = {e, l, g, sp, r, c}
  end
  deferred = s
  return s
end

-- run_behind reports whether the shard recorded less for the run of lease id
-- than the caller's acknowledged totals (kg granted, kr returned).
local function run_behind(K, id, kg, kr)
  if not kg or (kg <= 0 and (not kr or kr <= 0)) then return false end
  local g, r = run_totals(K, run_field(id))
  return kg > g or (kr or 0) > r
end

-- es and ms: the lease's expiry and the call's now, the call's arguments
-- (decimal digits, as the ledger's Go side formats an int64), written as
-- they came, not parsed and formatted again.
local function grant_new(K, s, id, holder, want, es, ms, maxlen)
  if s.closed == 1 then return 0 end
  local g = want
  if s.available < g then g = s.available end
  if g <= 0 then return 0 end
  s.available = s.available - g
  if s.leased <= 0 then -- no lease outstanding: the two keys may be new
    created[K.leases] = true
    created[K.exp] = true
  end
  s.leased = s.leased + g
  run_add(K, run_field(id), g, 0)
  local gs = str(g) -- formatted once (a string.format and a new string)
  redis_call('HSET', K.leases, id, gs .. '|' .. holder .. '|' .. es)
  redis_call('ZADD', K.exp, es, id)
  index_due(es)
  audit_lease(K.audit, maxlen, 'grant', g, 0, 'ev', 'grant', 'lease', id, 'holder', holder,
    'amount', gs, 'expiry', es, 'ms', ms)
  local leases = s.rcw and s.rc[2] or num(state_get(K.state, 'r_leases')) -- packed, the leases rp counts
  if leases % BUSY_LEASES == 0 then
    note_done(K)
    redis_call('HSET', K.done, DONE_ENC, '1')
  end
  return g
end

-- Fair shares of a supply-constrained shard (issue 10). Grants are first
-- come, first served, and every busy host asks about as often (once per half
-- lease window), so each would take about the same from what the shard
-- accrued between visits, whatever its demand. Each grant and renewal
-- therefore carries its holder's recent demand (micros a second) and how
-- long to remember it, and the shard keeps the live holders' records
-- (KEYS[10]: holder -> "demand|epoch|supply at its last grant", KEYS[11]:
-- holder by expiry_ms; on the state: fair_sum, the sum of their demands,
-- fair_supply, what became available on the shard so far, counted at each
-- grant as the rise of available since the last one, fair_avail, available
-- after the last grant, and fair_epoch, raised when fair_supply restarts
-- from 0 to stay far below 2^53).
--
-- While the shard is supply-constrained, a holder with share p = its demand
-- over the sum may take the larger of p x what is available now and p x
-- what became available since its own last grant here: the first is its
-- part of what is there (which the others, coming in any order, leave for
-- it), the second its part of what the shard released while it was away,
-- which holds whatever order the holders come in (a holder coming right
-- after a small one finds more left). Constrained: available is below the
-- cap window (release_by_curve's cap), so the fleet takes about what the
-- curve releases; once available reaches the cap, the fleet takes less than
-- that and everyone gets what it asks. Nor is there a split in the curve's
-- last FAIR_END cap windows: a split keeps more available between visits
-- (each holder's part until it comes), which first come, first served
-- drains before the day's end. Never below the caller's least (its
-- all-or-nothing min: a sparse holder's standing bid, or the SPEND a fetch
-- is for), so such a holder still gets its bid; an ordinary grant gets its
-- share even when that is less than a bid, and its bucket adds it to the
-- next. (A floor of one bid on every grant gave a small host a whole bid at
-- each visit where its share was a fraction of one: a host with 20% of a
-- campaign's demand, at 1.6 SPENDs a second over the fleet and 3x the
-- budget, took 24% of the spend.) This only caps a grant: what the shard
-- releases and the money arithmetic are unchanged.
local FAIR_EXPIRE = '16'               -- stale records dropped per call, at most (ZRANGEBYSCORE's LIMIT)
local FAIR_SCALE = 1073741824          -- 2^30: muldiv's bound on its ratio
local FAIR_MAX_DEMAND = 1099511627776  -- 2^40 micros/s: sums of 8,192 stay below 2^53
local FAIR_REBASE = 1125899906842624   -- 2^50: fair_supply restarts above this

local function fair_record(rec)
  if not rec then return nil end
  local d, e, sup = string.match(rec, '^(%d+)|(%d+)|(%d+)$')
  return digits(d), digits(e), digits(sup)
end

-- fair_cap records holder's demand until now + ttl and returns the most it
-- may take from s.available, or nil for no cap (no demand given, no record
-- keys, the shard not constrained, or the holder the only one live). Every
-- grant and renewal calls it, with a demand or not, so fair_supply counts
-- what every grant found; fair_granted follows the grant. The record keys'
-- expiry is the caller's keep_expiry. ms: now as the call's argument's
-- digits (see grant_new).
local function fair_cap(holder, demand, ttl, now, ms, s, cap, least)
  local fk, fe = KEYS[10], KEYS[11]
  if not fe then return nil end
  local sum, supply = (state_get(KEYS[1], 'fair_sum') or 0) + 0, (state_get(KEYS[1], 'fair_supply') or 0) + 0 -- num's, written out
  local last_avail, epoch = (state_get(KEYS[1], 'fair_avail') or 0) + 0, (state_get(KEYS[1], 'fair_epoch') or 0) + 0
  local sum0, supply0, epoch0 = sum, supply, epoch
  if s.available > last_avail then supply = supply + (s.available - last_avail) end
  if supply > FAIR_REBASE then
    supply = 0
    epoch = epoch + 1
  end
  local out = nil
  if demand and ttl and demand >= 1 and ttl >= 1 then
    demand = math_min(math_floor(demand), FAIR_MAX_DEMAND)
    local gone = redis_call('ZRANGEBYSCORE', fe, '-inf', '(' .. ms, 'LIMIT', '0', FAIR_EXPIRE)
    for i = 1, #gone do
      local h = gone[i]
      sum = sum - (fair_record(redis_call('HGET', fk, h)) or 0)
      redis_call('HDEL', fk, h)
      redis_call('ZREM', fe, h)
    end
    local old_d, old_e, old_s = fair_record(redis_call('HGET', fk, holder))
    if not old_d and sum <= 0 then -- no record left: the two keys may be new
      created[fk] = true
      created[fe] = true
    end
    sum = sum - (old_d or 0) + demand
    if sum < demand then
      -- Cannot happen while the records and the sum are written together;
      -- recount rather than trust it.
      sum = 0
      local all = redis_call('HVALS', fk)
      for _, rec in ipairs(all) do sum = sum + (fair_record(rec) or 0) end
      sum = sum - (old_d or 0) + demand
    end
    redis_call('HSET', fk, holder, string_format('%d|%d|%d', demand, epoch, supply)) -- integers below 2^53: str's, in one format
    redis_call('ZADD', fe, str(now + ttl), holder)
    if cap and s.available < cap and sum > demand then
      local d, total = demand, sum
      if total > FAIR_SCALE then
        local q = math_floor(total / FAIR_SCALE) + 1
        d = math_floor(d / q)
        total = math_floor(total / q)
      end
      local away = 0
      if old_e == epoch and old_s and supply > old_s then away = supply - old_s end
      out = math_max(muldiv(s.available, d, total), muldiv(away, d, total), least or 0)
    end
  end
  -- Only a changed sum is formatted and written (an absent field reads 0).
  if sum ~= sum0 then state_set(KEYS[1], 'fair_sum', str(sum)) end
  if supply ~= supply0 then state_set(KEYS[1], 'fair_supply', str(supply)) end
  if epoch ~= epoch0 then state_set(KEYS[1], 'fair_epoch', str(epoch)) end
  return out
end

-- fair_granted notes what a grant left available: the next grant counts
-- the supply from there.
local function fair_granted(s)
  if KEYS[11] and s.available ~= (state_get(KEYS[1], 'fair_avail') or 0) + 0 then state_set(KEYS[1], 'fair_avail', str(s.available)) end
end

-- release_lease closes an active lease: unused micros go back to available, the
-- rest is spent. Returns a status: 0 released now, 2 released before (retry: same
-- answer), 3 settled before (the holder was too late), 4 unknown lease, and the
-- unused micros credited. refunded (nil or 0: none) is what bidders refunded to
-- the holder since its last release or renewal of the campaign-day: recorded
-- in the release's audit entry for the billing record, and no part of the
-- money here (unused already holds whatever of it the holder did not spend again).
-- us and ms: unused and the call's now as their arguments' digits (see
-- grant_new); the lease's amount is written as its record holds it.
-- A lease id is in leases or in done, never both: every script that writes
-- a lease record has found no done record for its id (grant, renew,
-- reassert), and every one that writes a done record deletes the lease
-- record in the same call (release_lease, settle_expired). So an open
-- lease, a release's usual case, is closed without a look in done.
local function release_lease(K, s, id, unused, us, ms, maxlen, refunded)
  local rec = redis_call('HGET', K.leases, id)
  if not rec then
    local done = redis_call('HGET', K.done, id)
    if not done then return 4, 0 end
    local kind, v = string.match(done, '^(%a):(%d+)$')
    if kind == 'r' then return 2, tonumber(v) end
    return 3, 0
  end
  local as, holder = string.match(rec, '^(%d+)|([^|]*)|%d+$') -- parse_lease's, the amount's digits kept
  local amount = as + 0
  if unused > amount then
    return redis.error_reply('ERR unused ' .. str(unused) .. ' exceeds lease amount ' .. str(amount))
  end
  s.leased = s.leased - amount
  s.available = s.available + unused
  s.spent = s.spent + (amount - unused)
  pay_owed(s)
  run_add(K, run_field(id), 0, unused)
  redis_call('HDEL', K.leases, id)
  redis_call('ZREM', K.exp, id)
  note_done(K)
  redis_call('HSET', K.done, id, 'r:' .. us)
  if refunded and refunded > 0 then
    audit_lease(K.audit, maxlen, 'release', amount, unused, 'ev', 'release', 'lease', id, 'holder', holder,
      'amount', as, 'unused', us, 'ms', ms, 'refunded', str(refunded))
  else
    audit_lease(K.audit, maxlen, 'release', amount, unused, 'ev', 'release', 'lease', id, 'holder', holder,
      'amount', as, 'unused', us, 'ms', ms)
  end
  return 0, unused
end

-- begin_call resets the prelude's per-call state. A script's prelude runs
-- afresh at every EVAL, but the ledger's Functions library
-- (lease/functions.go) creates it once per master and calls begin_call at
-- the start of every function: every top-level local above that a call
-- changes is reset here (TestPreludeStateIsResetAtEveryCall holds each
-- lower-case one to it, and the upper-case ones to constants).
local function begin_call()
  redis_call = redis.call
  string_format = string.format
  math_min = math.min
  math_max = math.max
  math_floor = math.floor
  -- created and exported are made anew only if the last call wrote to them
  -- (most leave them empty): a table less to make and collect a call.
  if next(created) ~= nil then
    created = {}
  end
  deferred = nil
  packed = false
  if next(exported) ~= nil then
    exported = {}
  end
  done_seen = false
end
