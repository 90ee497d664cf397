-- The tenants whose schedules fire (producer.schedules.live): an API process says its tokens name
-- these tenants for the next ttl ms, at its start and every third of the ttl after. A tenant's
-- score is the latest such "until" any process gave (never shortened by another process's), so the
-- live tenants are the union of what the running API processes name; one no process has named for
-- a day is forgotten. The tenants this adds (the default one always) keep the set from emptying.
-- The call: shared.calls.schedules.SayLiveTenants. Returns: now (ms, Redis time).
local now = now_ms()
local till = now + tonumber(ARG.TTL_MS)
redis.call('DEL', KEY.BEFORE)
for i = ARGN.TENANTS, #ARGV do
  local was = tonumber(redis.call('ZSCORE', KEY.LIVE, ARGV[i]) or '0')
  if till > was then redis.call('ZADD', KEY.LIVE, till, ARGV[i]) end
end
redis.call('ZREMRANGEBYSCORE', KEY.LIVE, '-inf', now - 86400000)
return now
