-- The call: shared.calls.limits.CapacityAcquire (the limits 0 = no such limit; the run's priority ''
-- = not in the line: served as it polls).
-- Returns {0, V.OK, -1} when granted, else {waitHintMs, verdict, its rank in the line (-1: none)}.
-- The line: calls waiting for a concurrency slot or a request in the window are served by run
-- priority with the queue's aging rule (prelude.lua queue_score), from when each began waiting: a
-- waiter is granted only while fewer waiters stand before it than there is room. A call of priority
-- p is so never overtaken by one of priority q that began waiting more than (q - p) quanta after it.
local now = now_ms()
local holder = ARG.HOLDER
local lease, maxc, rpm = tonumber(ARG.LEASE_MS), tonumber(ARG.MAX_CONCURRENT), tonumber(ARG.RPM)
local tpm, tokens, window = tonumber(ARG.TPM), tonumber(ARG.TOKENS), tonumber(ARG.WINDOW_MS)
local lined = (ARG.PRIORITY or '') ~= '' and (maxc > 0 or rpm > 0)
local rank = -1
if lined then
  local stale = redis.call('ZRANGEBYSCORE', KEY.SEEN, '-inf', now - tonumber(ARG.STALE_MS), 'LIMIT', 0, 100)
  for _, w in ipairs(stale) do
    redis.call('ZREM', KEY.WAITING, w)
    redis.call('ZREM', KEY.SEEN, w)
  end
  redis.call('ZADD', KEY.WAITING, 'NX', now - tonumber(ARG.PRIORITY) * tonumber(ARG.AGING_MS), holder)
  redis.call('ZADD', KEY.SEEN, now, holder)
  local keep = tonumber(ARG.STALE_MS) * 2
  redis.call('PEXPIRE', KEY.WAITING, keep)
  redis.call('PEXPIRE', KEY.SEEN, keep)
  rank = redis.call('ZRANK', KEY.WAITING, holder)
end
local paused = tonumber(redis.call('GET', KEY.PAUSE) or '0')
if paused > now then return {paused - now, V.PAUSED, rank} end
local room = nil
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEY.SLOTS, '-inf', now)
  room = maxc - redis.call('ZCARD', KEY.SLOTS)
  if room <= 0 or (lined and rank >= room) then
    local first = redis.call('ZRANGE', KEY.SLOTS, 0, 0, 'WITHSCORES')
    return {math.max(1, room > 0 and 1 or tonumber(first[2]) - now), V.CONCURRENCY, rank}
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEY.REQUESTS, '-inf', now - window)
  local left = rpm - redis.call('ZCARD', KEY.REQUESTS)
  if left <= 0 or (lined and rank >= left) then
    local first = redis.call('ZRANGE', KEY.REQUESTS, 0, 0, 'WITHSCORES')
    return {math.max(1, left > 0 and 1 or tonumber(first[2]) + window - now), V.REQUESTS, rank}
  end
end
if tpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEY.TOKENS, '-inf', now - window)
  local entries = redis.call('ZRANGE', KEY.TOKENS, 0, -1, 'WITHSCORES')
  local used = 0
  for i = 1, #entries, 2 do used = used + tonumber(string.match(entries[i], ':(%d+)$')) end
  -- A request larger than the whole budget still goes, alone in an empty window.
  if used > 0 and used + tokens > tpm then
    local excess = used + tokens - tpm
    for i = 1, #entries, 2 do
      excess = excess - tonumber(string.match(entries[i], ':(%d+)$'))
      if excess <= 0 then return {math.max(1, tonumber(entries[i + 1]) + window - now), V.TOKENS, rank} end
    end
    return {window, V.TOKENS, rank}
  end
end
if lined then
  redis.call('ZREM', KEY.WAITING, holder)
  redis.call('ZREM', KEY.SEEN, holder)
end
if maxc > 0 then
  redis.call('ZADD', KEY.SLOTS, now + lease, holder)
  redis.call('PEXPIRE', KEY.SLOTS, lease * 2)
end
if rpm > 0 then
  redis.call('ZADD', KEY.REQUESTS, now, holder)
  redis.call('PEXPIRE', KEY.REQUESTS, window * 2)
end
if tpm > 0 then
  redis.call('ZADD', KEY.TOKENS, now, holder .. ':' .. tokens)
  redis.call('PEXPIRE', KEY.TOKENS, window * 2)
end
return {0, V.OK, -1}
