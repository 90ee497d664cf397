-- Tenant admission (maxActive and submitsPerSecond quotas) for runs about to be submitted.
-- KEYS: the tenant's active zset, its rate counter of this second
-- ARGV: now ms, maxActive (0: none), submitsPerSecond (0: none), active set ttl ms, grace ms, runIds…
-- Returns {'ok'} | {'rate_limited', submitted this second} | {'full', active count}.
local now = tonumber(ARGV[1])
local max_active = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local n = #ARGV - 5
if rate > 0 then
  local c = redis.call('INCRBY', KEYS[2], n)
  if c == n then redis.call('PEXPIRE', KEYS[2], 2000) end
  if c > rate then
    redis.call('DECRBY', KEYS[2], n)
    return {'rate_limited', c - n}
  end
end
if max_active > 0 then
  local new = 0
  for i = 6, #ARGV, 1000 do  -- ZMSCORE (Redis >= 6.2): one call per thousand runs, not one per run
    for _, sc in ipairs(redis.call('ZMSCORE', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))) do
      if not sc then new = new + 1 end
    end
  end
  local count = redis.call('ZCARD', KEYS[1])
  if count + new > max_active then
    -- Forget runs that ended (or expired): oldest first, at most 200 a call, so a full tenant
    -- costs Redis a bounded amount per refused submission.
    local members = redis.call('ZRANGE', KEYS[1], 0, 199, 'WITHSCORES')
    for i = 1, #members, 2 do
      local st = redis.call('HGET', run_key(members[i]), 'status')
      if (st and st ~= 'queued' and st ~= 'running')
          or (not st and tonumber(members[i + 1]) < now - tonumber(ARGV[5])) then
        redis.call('ZREM', KEYS[1], members[i])
      end
    end
    count = redis.call('ZCARD', KEYS[1])
  end
  if count + new > max_active then
    if rate > 0 then redis.call('DECRBY', KEYS[2], n) end
    return {'full', count}
  end
  local add = {}
  for i = 6, #ARGV do
    add[#add + 1] = now; add[#add + 1] = ARGV[i]
    if #add == 2000 or i == #ARGV then redis.call('ZADD', KEYS[1], 'NX', unpack(add)); add = {} end
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return {'ok', 0}
