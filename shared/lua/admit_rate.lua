-- A tenant's submission rate: a token bucket at the tenant's home partition. It holds at most
-- `burst` runs' worth of tokens (at least a full batch) and refills at submitsPerSecond; n runs
-- take n tokens or are all refused, with the wait until n tokens are there. Tokens are counted in
-- thousandths (integers): one run = 1000, and the bucket gains `rate` of them per millisecond.
-- The hash expires once it would be full again: a missing bucket is a full one.
-- Answers {V.OK, 0} or {V.RATE_LIMITED, milliseconds until n tokens are there}.
local n, rate, burst = tonumber(ARG.N), tonumber(ARG.PER_SECOND), tonumber(ARG.BURST)
local now = now_ms()
local full = burst * 1000
local b = redis.call('HMGET', KEY.BUCKET, 'tokens', 'at')
local tokens = tonumber(b[1]) or full
local at = tonumber(b[2]) or now
tokens = math.min(full, tokens + math.max(0, now - at) * rate)
local verdict, wait = V.OK, 0
if ARG.REFUND == '1' then
  tokens = math.min(full, tokens + n * 1000)
elseif tokens >= n * 1000 then
  tokens = tokens - n * 1000
else
  verdict, wait = V.RATE_LIMITED, math.ceil((n * 1000 - tokens) / rate)
end
redis.call('HSET', KEY.BUCKET, 'tokens', tokens, 'at', now)
redis.call('PEXPIRE', KEY.BUCKET, math.ceil((full - tokens) / rate) + 1000)
return {verdict, wait}
