-- Tenant admission (maxActive) on one partition for runs about to be submitted there.
-- KEYS: the tenant's active zset on this partition
-- ARGV: now ms, maxActive for this partition (the tenant's quota less its runs active on the other
--       partitions; '' = none), active set ttl ms, grace ms, runIds…
-- Returns {'ok'} | {'full', active count here}. A counted run stays counted until it ends
-- (active_pruned): a parent parked awaiting its children counts, and so does each child.
local now = tonumber(ARGV[1])
if ARGV[2] == '' then return {'ok', 0} end
local max_active = tonumber(ARGV[2])
local new = 0
for i = 5, #ARGV, 1000 do  -- ZMSCORE (Redis >= 6.2): one call per thousand runs, not one per run
  for _, sc in ipairs(redis.call('ZMSCORE', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))) do
    if not sc then new = new + 1 end
  end
end
local count = redis.call('ZCARD', KEYS[1])
if count + new > max_active then count = active_pruned(KEYS[1], now, tonumber(ARGV[4])) end
if count + new > max_active then return {'full', count} end
local add = {}
for i = 5, #ARGV do
  add[#add + 1] = now; add[#add + 1] = ARGV[i]
  if #add == 2000 or i == #ARGV then redis.call('ZADD', KEYS[1], 'NX', unpack(add)); add = {} end
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'ok', 0}
