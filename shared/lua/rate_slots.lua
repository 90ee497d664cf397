-- Rate keys (RunInput.rate): when runs of a key may start so that at most `limit` start in any
-- `period` ms. Each key keeps, at its home partition, the starts it gave (zset runId -> start ms,
-- keys.Partition.rate_key); a run gets the earliest start from now on at which the window before
-- it holds fewer than `limit` starts: now, or `period` after the limit-th latest start given. A
-- run asked again (its submission sent again) gets the start it got. Starts older than a period
-- are forgotten; the zset expires a period after its latest start.
-- The call: shared.calls.limits.RateSlots (a rate key in KEYS per run; ARG.MOST starts one key may
-- hold ahead, beyond which the run is refused; then runId, limit, period ms per run).
-- Reply per run: its start ms ('0' = now, not delayed; '-1' = refused: the key holds too many)
local most = tonumber(ARG.MOST)
local now = now_ms()
local out = {}
for i = 1, #KEYS do
  local at0 = ARGN.RUNS + 3 * (i - 1)
  local rk, id = KEYS[i], ARGV[at0]
  local limit, period = tonumber(ARGV[at0 + 1]), tonumber(ARGV[at0 + 2])
  local had = redis.call('ZSCORE', rk, id)
  if had then
    out[i] = tonumber(had) > now and had or '0'
  else
    redis.call('ZREMRANGEBYSCORE', rk, '-inf', now - period)
    local n = redis.call('ZCARD', rk)
    local at = now
    if n >= limit then
      local kth = redis.call('ZRANGE', rk, n - limit, n - limit, 'WITHSCORES')
      at = math.max(now, tonumber(kth[2]) + period)
    end
    if n >= most then
      out[i] = '-1'
    else
      redis.call('ZADD', rk, at, id)
      local ttl = redis.call('PTTL', rk)
      if ttl < at - now + period then redis.call('PEXPIRE', rk, at - now + period) end
      out[i] = at > now and string.format('%d', at) or '0'
    end
  end
end
return out
