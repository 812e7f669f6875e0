-- plan: decides a campaign-day's plan once, from the campaign as the store
-- holds it at that moment (never from a caller's cached copy), and returns it.
-- Every opener builds the day's shards from this plan, so racing openers,
-- a budget cut just before midnight or a shard-count change cannot fund a
-- day twice or with two shard counts. The campaign's settings and its days
-- share one hash tag, so this is one slot.
-- KEYS: campaign days
-- ARGV: day bids_per_shard
-- Reply: {budget, shards, curve} or an error if the campaign is unknown.
local day = ARGV[1]
redis.call('HINCRBY', KEYS[2], ':touch', 1) -- a write for WAIT to cover (see load_shard)
local plan = redis.call('HGET', KEYS[2], day .. ':plan')
if not plan then
  local c = redis.call('HMGET', KEYS[1], 'daily', 'shards', 'curve')
  if not c[1] then return redis.error_reply('ERR unknown campaign') end
  local shards = tonumber(c[2])
  -- A budget of few bids gets fewer shards (one per bids_per_shard bids, at
  -- least one), once daemons have told us the campaign's bid size.
  local bid = tonumber(redis.call('HGET', KEYS[2], ':bid') or '0')
  local per = tonumber(ARGV[2] or '0')
  if bid and bid > 0 and per and per > 0 then
    local fit = math.floor(tonumber(c[1]) / (bid * per))
    if fit < 1 then fit = 1 end
    if fit < shards then shards = fit end
  end
  plan = c[1] .. '|' .. string.format('%d', shards) .. '|' .. (c[3] or 'flat')
  redis.call('HSET', KEYS[2], day .. ':plan', plan)
  redis.call('HSETNX', KEYS[2], day .. ':budget', c[1])
end
local budget, shards, curve = string.match(plan, '^(%d+)|(%d+)|(.*)$')
return {budget, shards, curve}
