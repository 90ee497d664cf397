-- A tenant's submission token bucket (admit_rate.lua, admit_submit.lua): at most `burst` runs' worth
-- of tokens, refilled at submitsPerSecond. Tokens are counted in thousandths (integers): one run =
-- 1000, and the bucket gains `rate` of them per millisecond. The hash expires once it would be full
-- again: a missing bucket is a full one.
-- The tokens the bucket holds at `now`, of at most `full`.
local function bucket_level(key, rate, full, now)
  local b = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(b[1]) or full
  local at = tonumber(b[2]) or now
  return math.min(full, tokens + math.max(0, now - at) * rate)
end
-- The bucket holds `tokens` at `now`.
local function bucket_set(key, tokens, rate, full, now)
  redis.call('HSET', key, 'tokens', tokens, 'at', now)
  redis.call('PEXPIRE', key, math.ceil((full - tokens) / rate) + 1000)
end
