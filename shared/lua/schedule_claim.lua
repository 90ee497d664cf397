-- Claim the due schedules of one partition for a lease: their due score moves to the lease's
-- expiry, so racing firers never claim one schedule at once, and a firer that dies holding a claim
-- leaves it to be claimed again when the lease expires (its firings' run ids are deterministic, so
-- making one again creates nothing new). schedule_advance.lua sets the next firing.
-- KEYS: due zset   ARGV: leaseMs, limit
-- Returns: {now (ms, Redis time), schedule key …}
local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), id)
end
table.insert(ids, 1, now)
return ids
