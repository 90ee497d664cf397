-- A tenant's submission rate: its token bucket (rate_bucket.lua) at the tenant's home partition,
-- of at least a full batch; n runs take n tokens or are all refused, with the wait until n tokens
-- are there. Answers {V.OK, 0} or {V.RATE_LIMITED, milliseconds until n tokens are there}.
local n, rate, burst = tonumber(ARG.N), tonumber(ARG.PER_SECOND), tonumber(ARG.BURST)
local now = now_ms()
local full = burst * 1000
local tokens = bucket_level(KEY.BUCKET, rate, full, now)
local verdict, wait = V.OK, 0
if ARG.REFUND == '1' then
  tokens = math.min(full, tokens + n * 1000)
elseif tokens >= n * 1000 then
  tokens = tokens - n * 1000
else
  verdict, wait = V.RATE_LIMITED, math.ceil((n * 1000 - tokens) / rate)
end
bucket_set(KEY.BUCKET, tokens, rate, full, now)
return {verdict, wait}
