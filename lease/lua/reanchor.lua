#!lua flags=allow-cross-slot-keys
-- reanchor: records in a Cluster slot's anchor (lease/index.go, "Anchors")
-- exactly when the slot's index entries next need the reconciler (0 while a
-- shard is flagged low, else the earliest due entry's score), or removes the
-- slot from it when the slot has no entries. Atomic with the ledger scripts
-- of the slot, which only lower the score (ZADD LT) when they add an entry,
-- so the score stays a lower bound. The anchor is the first one this master
-- serves, tried in the ledger scripts' order (prelude.lua, anchor): from the
-- slot's group (slot / 256) on, around; the tags are prelude.lua's.
-- KEYS: due low (one slot's index keys)
-- ARGV: slot
-- Reply: {anchor, added, entries}: anchor: the position (1-based) in that
-- order of the anchor this master serves, 0 if none; added: 1 if the slot
-- has entries the anchor did not record; entries: 1 if it has entries.
local tags = {'3560', '2464', '1768', '69235', '22069', '56283', '20261', '21365',
  '48576', '27938', '18360', '19264', '11467', '10563', '41271', '17019', '4129', '69306', '3453',
  '2557', '130', '12295', '11199', '9058', '1296', '19357', '29098', '49541', '41342', '1878',
  '8591', '9495', '8209', '26479', '265', '4892', '3706', '2602', '45842', '5378', '2821', '3925',
  '13409', '40113', '48710', '39288', '17891', '16995', '356', '17781', '46093', '15589', '45971',
  '44875', '3635', '2731', '16248', '40020', '2912', '3816', '4782', '5686', '48623', '49727'}
local score
if redis.call('EXISTS', KEYS[2]) == 1 then
  score = '0'
else
  score = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
end
local slot = tonumber(ARGV[1])
local g, n = (slot - slot % 256) / 256, #tags
for j = 0, n - 1 do
  local key = 'pacer:idx:slots:{' .. tags[(g + j) % n + 1] .. '}'
  local r
  if score then
    r = redis.pcall('ZADD', key, score, ARGV[1])
  else
    r = redis.pcall('ZREM', key, ARGV[1])
  end
  if type(r) == 'number' then
    if score then return {j + 1, r, 1} end
    return {j + 1, 0, 0}
  end
end
if score then return {0, 0, 1} end
return {0, 0, 0}
