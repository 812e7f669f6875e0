-- trim: drops the entries of an exported audit stream that every consumer
-- group has acknowledged, and nothing else: XTRIM MINID at the lowest of each
-- group's oldest pending entry (delivered, not acknowledged) or, with none
-- pending, its last delivered entry (kept, so the stream never looks empty to
-- a reader). A stream without a group is left to audit's cap.
-- KEYS: audit
-- Returns {entries trimmed, the MINID used ('' for none)}.
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return {0, ''} end
local groups = redis.call('XINFO', 'GROUPS', key)
if #groups == 0 then return {0, ''} end

-- less orders stream ids "ms-seq" exactly (as decimal strings: a seq may
-- pass 2^53).
local function less(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end

local min
for _, g in ipairs(groups) do
  local f = {}
  for i = 1, #g - 1, 2 do f[g[i]] = g[i + 1] end
  local safe = f['last-delivered-id']
  if tonumber(f['pending']) > 0 then
    safe = redis.call('XPENDING', key, f['name'])[2]
  end
  if not min or less(safe, min) then min = safe end
end
if min == '0-0' then return {0, min} end
return {redis.call('XTRIM', key, 'MINID', min), min}
