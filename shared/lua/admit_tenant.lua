-- Tenant admission (maxActive) on one partition for runs about to be submitted there.
-- ARG.ROOM: maxActive for this partition (the tenant's quota less its runs active on the other
-- partitions; '' = none). Returns {V.OK, 0} | {V.FULL, active count here}. A counted run stays counted
-- until it ends (active_pruned): a parent parked awaiting its children counts, and so does each child.
local now = tonumber(ARG.NOW)
if ARG.ROOM == '' then return {V.OK, 0} end
local max_active = tonumber(ARG.ROOM)
local first = ARGN.RUN_IDS
local new = 0
for i = first, #ARGV, 1000 do  -- ZMSCORE (Redis >= 6.2): one call per thousand runs, not one per run
  for _, sc in ipairs(redis.call('ZMSCORE', KEY.ACTIVE, unpack(ARGV, i, math.min(i + 999, #ARGV)))) do
    if not sc then new = new + 1 end
  end
end
local count = redis.call('ZCARD', KEY.ACTIVE)
if count + new > max_active then count = active_pruned(KEY.ACTIVE, now, tonumber(ARG.GRACE_MS)) end
if count + new > max_active then return {V.FULL, count} end
local add = {}
for i = first, #ARGV do
  add[#add + 1] = now; add[#add + 1] = ARGV[i]
  if #add == 2000 or i == #ARGV then redis.call('ZADD', KEY.ACTIVE, 'NX', unpack(add)); add = {} end
end
redis.call('PEXPIRE', KEY.ACTIVE, ARG.TTL_MS)
return {V.OK, 0}
