-- The tenants whose schedules fire (producer.schedules.live): an API process says its tokens name
-- these tenants for the next ttl ms, at its start and every third of the ttl after. A tenant's
-- score is the latest such "until" any process gave (never shortened by another process's), so the
-- live tenants are the union of what the running API processes name; one no process has named for
-- a day is forgotten. The tenants this adds (the default one always) keep the set from emptying.
-- KEYS: the live tenants (zset tenant -> until, ms Redis time), the set older versions kept (removed)
-- ARGV: ttl ms, tenant, …
-- Returns: now (ms, Redis time)
local now = now_ms()
local till = now + tonumber(ARGV[1])
redis.call('DEL', KEYS[2])
for i = 2, #ARGV do
  local was = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]) or '0')
  if till > was then redis.call('ZADD', KEYS[1], till, ARGV[i]) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 86400000)
return now
