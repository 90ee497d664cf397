-- Webhook deliveries of one partition: move newly finished runs from the list the scripts push to
-- into the due set, then claim due deliveries for a lease (so several API processes never deliver
-- one at once).
-- KEYS: due zset   ARGV: now, leaseMs, limit
for _ = 1, 1000 do
  local id = redis.call('RPOP', WEBHOOKS)
  if not id then break end
  redis.call('ZADD', KEYS[1], 'NX', ARGV[1], id)
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
end
return ids
