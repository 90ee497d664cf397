-- KEYS pause; ARGV ms. No call to the endpoint starts for ms (an existing longer pause stays).
local now = now_ms()
local ms = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current >= now + ms then return current - now end
redis.call('SET', KEYS[1], now + ms, 'PX', ms)
return ms
