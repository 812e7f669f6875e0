-- unflag: removes reconciler index entries, each only if its score is still
-- the one the reconciler read (a shard flagged again since stays flagged).
-- KEYS: index
-- ARGV: member score [member score ...]
local n = 0
for i = 1, #ARGV, 2 do
  if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i])) == tonumber(ARGV[i + 1]) then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
